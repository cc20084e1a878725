"""``make sweep``: the sweep pipeline under kfp.local over a CPU grid, then its table printed.

``python -m pipelines.tools.run_sweep [--config sweep.yaml] [--set 'name=value ...'] [--grid grid.yaml]
[--source shapes:400] [--steps-per-epoch 24] [--pipeline-root local_outputs]``. The default grid is
2 image sizes x 2 epoch counts x 2 batch sizes of the sweep task's model on its grid data (the
task's ``run_defaults``: the small detector on 400 built-in shapes), plus one cell with a model
option the model does not know, so a failed row (with its reason) shows too. ``--config`` and
``--set`` set any parameter of the sweep pipeline's run form, as for ``make run``
(``pipelines/tools/params.py``); a grid file is a YAML list of cells (docs/sweep.md). The console
is ``make run``'s (``pipelines/tools/runner.py``): a line per step, each step's log under
``<run folder>/logs/``, a failure's first cause; then the table and where its page is.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import Any, Optional

import yaml

from components.sweep.component import join_training_grid
from pipelines import sweep
from pipelines.tools import params
from pipelines.tools.params import Layer, ParameterError, RunParameters
from pipelines.tools.runner import Finished, Summary, Tool
from trainer.tasks import get_task

DEMO_GRID = [
    {"accelerator": "cpu", "image_size": size, "epochs": epochs, "batch_size_per_replica": batch}
    for size in (32, 64)
    for epochs in (1, 2)
    for batch in (8, 16)
] + [{"accelerator": "cpu", "name": "cpu bad option", "epochs": 1, "model_options": {"no_such_option": 1}}]

_TASK = get_task(sweep.TASK).run_defaults  # the grid's data, model and its options are the task's

# What make sweep sets where the run form has other defaults: a grid a CPU runs in minutes.
LOCAL_DEFAULTS = {
    "grid_cells": DEMO_GRID,
    "source": _TASK.grid_data or _TASK.data,
    "model": _TASK.model,
    "model_options": dict(_TASK.grid_model_options),
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
    if args.model is not None and args.model != LOCAL_DEFAULTS["model"]:
        flags["model_options"] = {}  # the local options are the task's model's
    if flags:
        layers.append(Layer("flags", flags))
    layers.append(params.parse_set(" ".join(args.set or []), "SET"))
    resolved = params.resolve(params.run_form(sweep.pipeline), layers, sweep.NAME)
    params.check_steps(sweep.pipeline, resolved.values)
    return resolved


def _table(folder: Path, root: Path) -> Optional[Path]:
    """The join's Markdown table of this run (else the newest under the root), or None."""
    report = folder / join_training_grid.name / "report"
    if report.is_file():
        return report
    reports = sorted(root.glob(f"sweep-*/{join_training_grid.name}/report"), key=lambda p: p.stat().st_mtime)
    return reports[-1] if reports else None


def _flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--grid", type=Path, help="a YAML list of cells (default: the demo grid)")
    parser.add_argument("--source", help=f"default {LOCAL_DEFAULTS['source']}")
    parser.add_argument("--model", help=f"default {LOCAL_DEFAULTS['model']}")
    parser.add_argument("--steps-per-epoch", type=int, help=f"default {LOCAL_DEFAULTS['steps_per_epoch']}")
    parser.add_argument("--learning-rate", type=float, help=f"default {LOCAL_DEFAULTS['learning_rate']}")


def last_lines(done: Finished) -> Summary:
    """The grid's Markdown table, then its page (the join's HTML artifact, copied to ``grid.html``)."""
    table = _table(done.folder, done.folder.parent)
    if table is None:
        missing = [] if done.failure else [f"error: no grid table under {done.folder}/{join_training_grid.name}"]
        return Summary(missing, ok=False)
    page = done.folder / "grid.html"
    shutil.copyfile(table.with_name("chart"), page)  # the artifact has no extension: a browser wants one
    return Summary([table.read_text().rstrip(), f"results page: {page}"])


TOOL = Tool(sweep, __doc__, sweep_parameters, last_lines, flags=_flags)
_parser = TOOL.parser
main = TOOL.main


if __name__ == "__main__":
    sys.exit(main())
