"""``make sweep``: the sweep pipeline under kfp.local over a CPU grid, then its table printed.

``python -m pipelines.tools.run_sweep [--config sweep.yaml] [--set 'name=value ...'] [--grid grid.yaml]
[--source shapes:400] [--steps-per-epoch 24] [--pipeline-root local_outputs]``. The default grid is
2 image sizes x 2 epoch counts x 2 batch sizes of the small detector on the built-in shapes, plus
one cell with a model option the detector does not know, so a failed row (with its reason) shows
too. ``--config`` and ``--set`` set any parameter of the sweep pipeline's run form, as for
``make run`` (``pipelines/tools/params.py``); a grid file is a YAML list of cells (docs/sweep.md). The
console is ``make run``'s: a line per step, each step's log under ``<run folder>/logs/``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Optional

import yaml

from pipelines import sweep
from pipelines.tools import params
from pipelines.tools.params import Layer, ParameterError, RunParameters

DEMO_GRID = [
    {"accelerator": "cpu", "image_size": size, "epochs": epochs, "batch_size_per_replica": batch}
    for size in (32, 64)
    for epochs in (1, 2)
    for batch in (8, 16)
] + [{"accelerator": "cpu", "name": "cpu bad option", "epochs": 1, "model_options": {"no_such_option": 1}}]

# What make sweep sets where the run form has other defaults: a grid a CPU runs in minutes.
LOCAL_DEFAULTS = {
    "grid_cells": DEMO_GRID,
    "source": "shapes:400",
    "model": "retinanet",
    "model_options": sweep.LOCAL_MODEL_OPTIONS,
    "epochs": 1,
    "steps_per_epoch": 24,
    "batch_size_per_replica": 8,
    "learning_rate": 0.016,
}


def _grid_layer(path: Path) -> Layer:
    """``--grid cells.yaml`` as the ``grid_cells`` parameter (the run form checks it is a list)."""
    if not path.is_file():
        raise ParameterError([f"GRID {path}: no such file; give a YAML list of cells (docs/sweep.md)"])
    try:
        cells = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ParameterError([f"GRID {path} is not YAML: {' '.join(str(err).split())}"]) from None
    return Layer(f"GRID {path}", {"grid_cells": cells})


def sweep_parameters(args: argparse.Namespace) -> RunParameters:
    """The sweep's parameters: the form's defaults, make sweep's, ``CONFIG``, the flags, ``SET``.

    Raises:
        ParameterError: an unknown name, a wrong type, a value a step refuses (one line each).
    """
    layers = [Layer("make sweep", LOCAL_DEFAULTS)]
    if args.config:
        layers.append(params.read_config(args.config))
    if args.grid:
        layers.append(_grid_layer(args.grid))
    flags: dict[str, Any] = {
        name: getattr(args, name)
        for name in ("source", "model", "steps_per_epoch", "learning_rate")
        if getattr(args, name) is not None
    }
    if args.model is not None and args.model != "retinanet":
        flags["model_options"] = {}  # the local options are the detector's
    if flags:
        layers.append(Layer("flags", flags))
    layers.append(params.parse_set(" ".join(args.set or []), "SET"))
    resolved = params.resolve(params.run_form(sweep.pipeline), layers, sweep.NAME)
    params.check_steps(sweep.pipeline, resolved.values)
    return resolved


def _table(folder: Path, root: Path) -> Optional[Path]:
    """The join's Markdown table of this run (else the newest under the root), or None."""
    report = folder / "join-training-grid" / "report"
    if report.is_file():
        return report
    reports = sorted(root.glob("sweep-*/join-training-grid/report"), key=lambda p: p.stat().st_mtime)
    return reports[-1] if reports else None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help="a YAML file of the sweep pipeline's run-form parameters")
    parser.add_argument("--set", action="append", metavar="NAME=VALUE ...", help="parameters over --config")
    parser.add_argument("--grid", type=Path, help="a YAML list of cells (default: the demo grid)")
    parser.add_argument("--source", help="default shapes:400")
    parser.add_argument("--model", help="default retinanet")
    parser.add_argument("--steps-per-epoch", type=int, help="default 24")
    parser.add_argument("--learning-rate", type=float, help="default 0.016")
    parser.add_argument("--pipeline-root", type=Path, default=Path("local_outputs"))
    parser.add_argument("--verbose", action="store_true", help="also print kfp.local's whole output as it comes")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Runs the grid locally behind the quiet console and prints the Markdown table."""
    from pipelines.tools.run_local import run_in_console

    args = _parser().parse_args(argv)
    try:
        resolved = sweep_parameters(args)
    except ParameterError as err:
        for line in err.problems:
            print(f"error: {line}", file=sys.stderr)
        return 2
    root = args.pipeline_root.resolve()
    started = time.monotonic()
    lines = [f"lean-tpu-pipelines: the {sweep.NAME} pipeline under kfp.local", f"parameters: {resolved.describe()}"]
    done = run_in_console(
        sweep.pipeline, sweep.NAME, resolved.values, root, out=sys.stdout, tty=None, verbose=args.verbose,
        first_lines=lines,
    )  # fmt: skip
    console = done.console
    failure = console.failure(done.error)
    if failure is not None:
        console.print_failure(failure)
    table = _table(done.folder, root)
    if table is None:
        console.say(f"error: no grid table under {done.folder}/join-training-grid")
        return 1
    console.say(table.read_text().rstrip())
    console.say(f"chart: {table.with_name('chart')}")
    console.say(f"logs:  {console.log_dir}/")
    console.say(f"grid wall time: {time.monotonic() - started:.1f} s")
    return 0 if failure is None and done.error is None else 1


if __name__ == "__main__":
    sys.exit(main())
