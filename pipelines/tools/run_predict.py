"""``make predict``: the batch_predict pipeline under kfp.local, then its summary printed.

``python -m pipelines.tools.run_predict --data photos/ [--stage staging --model detector | --model-dir DIR]
[--stages local_outputs/stages] [--output-uri local_outputs/predictions] [--config predict.yaml]
[--set 'name=value ...'] [--pipeline-root local_outputs]``. ``--config`` and ``--set`` set any
parameter of the pipeline's run form, as for ``make run`` (``pipelines/tools/params.py``); a
local ``--data`` (or ``--model-dir``) that is not there is one ``error:`` line, exit 2, before
anything runs. The console is ``make run``'s (``pipelines/tools/runner.py``): a line per step, each
step's log under ``<run folder>/logs/``, a failure's first cause. The exit status is 1 when a shard
did not finish (running the same command again redoes only that shard).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional

from components.batch_predict.component import predict_shard
from pipelines import batch_predict
from pipelines.tools import params, runner
from pipelines.tools.params import Layer, RunParameters
from pipelines.tools.runner import Finished, Summary, Tool

# Local shards: kfp.local runs two tasks at once on this machine's two cores.
LOCAL_DEFAULTS = {"images_per_shard": 2000}


def predict_parameters(args: argparse.Namespace) -> RunParameters:
    """The run's parameters: the form's defaults, make predict's, ``CONFIG``, the flags, ``SET``.

    Raises:
        ParameterError: an unknown name, a wrong type, a value a step refuses (one line each).
    """
    layers = [Layer("make predict", LOCAL_DEFAULTS)]
    if args.config:
        layers.append(params.read_config(args.config))
    flags: dict[str, Any] = {
        "stage": args.stage if args.model_dir is None else "",
        "model_name": args.model or "",
        "model_dir": args.model_dir or "",
        "stages_root": str(args.stages),
        "output_uri": str(args.output_uri),
    }
    if args.format is not None:
        flags["serving_format"] = args.format
    if args.data is not None:
        flags["data"] = args.data
    layers.append(Layer("flags", flags))
    layers.append(params.parse_set(" ".join(args.set or []), "SET"))
    resolved = params.resolve(params.run_form(batch_predict.pipeline), layers, batch_predict.NAME)
    params.check_steps(batch_predict.pipeline, resolved.values)
    return resolved


def check_local_paths(args: argparse.Namespace, resolved: RunParameters) -> Optional[int]:
    """A local ``data`` or ``model_dir`` that is not on this machine: one line, before anything runs.

    Raises:
        ParameterError: the path is missing (``DATA /nonexistent: no such file or folder ...``).
    """
    runner.check_local_paths(resolved, (("data", "DATA"), ("model_dir", "MODEL_DIR")))
    return None


def last_lines(done: Finished) -> Summary:
    """Where the predictions are, the report, the metrics (with labels); not ok when a shard did not finish."""
    output = Path(done.kwargs["output_uri"])
    summary_file = output / "summary.json"
    if not summary_file.is_file():
        missing = f"error: no summary under {output}: the run stopped before the join (see the logs)"
        return Summary([] if done.failure else [missing], ok=False)
    summary = json.loads(summary_file.read_text())
    lines = [f"predictions: {output}/shard-*.jsonl ({summary['scored']:,} images)"]
    for name in ("coco_results.json", "report.html"):
        if (output / name).is_file():
            lines.append(f"{name.split('.')[0].replace('_', ' ')}: {output / name}")
    lines += [f"{name}: {value:.4f}" for name, value in summary.get("metrics", {}).items()]
    return Summary(lines, ok=bool(summary.get("complete")))


def _flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", help="the images: a folder, gs:// prefix, CSV/JSONL list, COCO file or dataset")
    parser.add_argument("--stage", default="staging", help="score what this stage serves (default staging)")
    parser.add_argument("--model", help="the served model name at the stage (default: the one it serves)")
    parser.add_argument("--model-dir", help="a model folder to score instead of a stage's model")
    parser.add_argument("--stages", type=Path, default=Path("local_outputs/stages"), help="the stage store")
    parser.add_argument("--output-uri", default="local_outputs/predictions", help="where the predictions go")
    parser.add_argument(
        "--format", help="score in this form: saved_model, litert, litert_int8, onnx, onnx_int8 (default: the stage's)"
    )


# The steps' figures, but a shard's: its iterations share one task name, so whose it is is unknown.
TOOL = Tool(
    batch_predict, __doc__, predict_parameters, last_lines, flags=_flags, before=check_local_paths,
    figures=lambda step: not step.startswith(predict_shard.name),
)  # fmt: skip
_parser = TOOL.parser
main = TOOL.main


if __name__ == "__main__":
    sys.exit(main())
