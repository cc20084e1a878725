"""``make predict``: the batch_predict pipeline under kfp.local, then its summary printed.

``python -m pipelines.tools.run_predict --data photos/ [--stage staging --model detector | --model-dir DIR]
[--stages local_outputs/stages] [--output-uri local_outputs/predictions] [--config predict.yaml]
[--set 'name=value ...'] [--pipeline-root local_outputs]``. ``--config`` and ``--set`` set any
parameter of the pipeline's run form, as for ``make run`` (``pipelines/tools/params.py``). The
console is ``make run``'s: a line per step, each step's log under ``<run folder>/logs/``. The exit
status is 1 when a shard did not finish (running the same command again redoes only that shard).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from pipelines import batch_predict
from pipelines.tools import params
from pipelines.tools.params import Layer, ParameterError, RunParameters

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
    if args.data is not None:
        flags["data"] = args.data
    layers.append(Layer("flags", flags))
    layers.append(params.parse_set(" ".join(args.set or []), "SET"))
    resolved = params.resolve(params.run_form(batch_predict.pipeline), layers, batch_predict.NAME)
    params.check_steps(batch_predict.pipeline, resolved.values)
    return resolved


def _figure(headline):
    """The steps' figures, but a shard's: its iterations share one task name, so whose it is is unknown."""
    return lambda run_dir, step: "" if step.startswith("predict-shard") else headline(run_dir, step)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="the images: a folder, gs:// prefix, CSV/JSONL list, COCO file or dataset")
    parser.add_argument("--stage", default="staging", help="score what this stage serves (default staging)")
    parser.add_argument("--model", help="the served model name at the stage (default: the one it serves)")
    parser.add_argument("--model-dir", help="a model folder to score instead of a stage's model")
    parser.add_argument("--stages", type=Path, default=Path("local_outputs/stages"), help="the stage store")
    parser.add_argument("--output-uri", default="local_outputs/predictions", help="where the predictions go")
    parser.add_argument("--config", help="a YAML file of the batch_predict pipeline's run-form parameters")
    parser.add_argument("--set", action="append", metavar="NAME=VALUE ...", help="parameters over --config")
    parser.add_argument("--pipeline-root", type=Path, default=Path("local_outputs"))
    parser.add_argument("--verbose", action="store_true", help="also print kfp.local's whole output as it comes")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs the batch prediction locally behind the quiet console and prints its summary."""
    from pipelines.tools.run_local import headline, run_in_console

    args = _parser().parse_args(argv)
    try:
        resolved = predict_parameters(args)
    except ParameterError as err:
        for line in err.problems:
            print(f"error: {line}", file=sys.stderr)
        return 2
    root = args.pipeline_root.resolve()
    started = time.monotonic()
    lines = [
        f"lean-tpu-pipelines: the {batch_predict.NAME} pipeline under kfp.local",
        f"parameters: {resolved.describe()}",
    ]
    done = run_in_console(
        batch_predict.pipeline, batch_predict.NAME, resolved.values, root, out=sys.stdout, tty=None,
        verbose=args.verbose, first_lines=lines, headline=_figure(headline),
    )  # fmt: skip
    console = done.console
    failure = console.failure(done.error)
    if failure is not None:
        console.print_failure(failure)
    output = Path(resolved.values["output_uri"])
    summary_file = output / "summary.json"
    if not summary_file.is_file():
        console.say(f"error: no summary under {output}: the run stopped before the join (see the logs)")
        return 1
    summary = json.loads(summary_file.read_text())
    console.say(f"predictions: {output}/shard-*.jsonl ({summary['scored']:,} images)")
    for name in ("coco_results.json", "report.html"):
        if (output / name).is_file():
            console.say(f"{name.split('.')[0].replace('_', ' ')}: {output / name}")
    for name, value in summary.get("metrics", {}).items():
        console.say(f"{name}: {value:.4f}")
    console.say(f"logs:  {console.log_dir}/")
    console.say(f"wall time: {time.monotonic() - started:.1f} s")
    return 0 if failure is None and done.error is None and summary.get("complete") else 1


if __name__ == "__main__":
    sys.exit(main())
