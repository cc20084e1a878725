"""``make select``: the select pipeline under kfp.local, then where the pick and its files are.

``python -m pipelines.tools.run_select --data pool/ [--stage staging --model classifier | --model-dir DIR]
[--dataset local_outputs/dataset] [--count 100] [--output-uri local_outputs/selection]
[--stages local_outputs/stages] [--config select.yaml] [--set 'name=value ...'] [--pipeline-root local_outputs]``.
``--config`` and ``--set`` set any parameter of the pipeline's run form (``strategy``, ``diversity``,
``seed``, ``selection_options.threshold``...), as for ``make run`` (``pipelines/tools/params.py``);
a local ``--data``, ``--model-dir`` or ``--dataset`` that is not there is one ``error:`` line, exit
2, before anything runs. The console is ``make run``'s (``pipelines/tools/runner.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional

from pipelines import select
from pipelines.tools import params, runner
from pipelines.tools.params import Layer, RunParameters
from pipelines.tools.runner import Finished, Summary, Tool


def select_parameters(args: argparse.Namespace) -> RunParameters:
    """The run's parameters: the form's defaults, ``CONFIG``, the flags, ``SET``.

    Raises:
        ParameterError: an unknown name, a wrong type, a value the step refuses (one line each).
    """
    layers = []
    if args.config:
        layers.append(params.read_config(args.config))
    flags: dict[str, Any] = {
        "stage": args.stage if args.model_dir is None else "",
        "model_name": args.model or "",
        "model_dir": args.model_dir or "",
        "stages_root": str(args.stages),
        "output_uri": str(args.output_uri),
    }
    for name in ("data", "dataset", "count"):
        if getattr(args, name) is not None:
            flags[name] = getattr(args, name)
    layers.append(Layer("flags", flags))
    layers.append(params.parse_set(" ".join(args.set or []), "SET"))
    resolved = params.resolve(params.run_form(select.pipeline), layers, select.NAME)
    params.check_steps(select.pipeline, resolved.values)
    return resolved


def check_local_paths(args: argparse.Namespace, resolved: RunParameters) -> Optional[int]:
    """A local ``data``, ``model_dir`` or ``dataset`` that is not on this machine: one line, before anything runs.

    Raises:
        ParameterError: the path is missing (``DATA /nonexistent: no such file or folder ...``).
    """
    runner.check_local_paths(resolved, (("data", "DATA"), ("model_dir", "MODEL_DIR"), ("dataset", "DATASET")), _builtin)
    return None


def _builtin(name: str, value: str) -> bool:
    """A built-in source's name (``fashion-mnist``) as the pool: no path to look for."""
    if name != "data":
        return False
    from components.image_input.sources import is_builtin

    return is_builtin(value)


def last_lines(done: Finished) -> Summary:
    """What was picked and where its files are; not ok when the selection did not finish."""
    output = Path(done.kwargs["output_uri"])
    selection_file = output / "selection.json"
    if not selection_file.is_file():
        missing = f"error: no selection.json under {output}: the run stopped before the pick (see the logs)"
        return Summary([] if done.failure else [missing], ok=False)
    result = json.loads(selection_file.read_text())
    picks = result.get("picks") or []
    lines = [
        f"picked: {len(picks):,} of {result.get('pool', 0):,} images by {result.get('strategy')}: {selection_file}"
    ]
    for name, file in (result.get("files") or {}).items():
        lines.append(f"{name.replace('_', ' ')}: {output / file}")
    return Summary(lines, ok=True)


def _flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", help="the pool of unlabelled images: a folder, gs:// prefix, list or any source")
    parser.add_argument("--stage", default="staging", help="score with what this stage serves (default staging)")
    parser.add_argument("--model", help="the served model name at the stage (default: the one it serves)")
    parser.add_argument("--model-dir", help="a model folder to score with instead of a stage's model")
    parser.add_argument("--stages", type=Path, default=Path("local_outputs/stages"), help="the stage store")
    parser.add_argument("--dataset", help="the labelled dataset folder: its images are never picked")
    parser.add_argument("--count", type=int, help="how many images to pick (default 100)")
    parser.add_argument("--output-uri", default="local_outputs/selection", help="where the pick goes")


TOOL = Tool(
    select, __doc__, select_parameters, last_lines, flags=_flags, before=check_local_paths, figures=lambda step: True
)
main = TOOL.main


if __name__ == "__main__":
    sys.exit(main())
