"""The experiment grid step: plan the cells, run one cell, join the cells' rows into the tables.

The KFP adapters (``component.py``) and the command line (``__main__.py``) call these; the
grid, cell and table modules hold the pieces. TensorFlow is imported only when a cell trains.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from components.launchers.locations import training_locations
from components.sweep.cell import CellResult, process_start_time, run_cell_recorded
from components.sweep.config import SweepConfig
from components.sweep.grid import GridCell, plan_grid
from components.sweep.notebook import SweepRun, plan_notebook_cells, run_notebook_cell
from components.sweep.table import best_cells, build_rows, collect_results, render_grid_html, render_grid_markdown
from trainer.budget.pricing import load_price_table


@dataclasses.dataclass(frozen=True)
class GridReport:
    """The join's outputs.

    Attributes:
        markdown: the tables as Markdown.
        html: the page with the tables and the quality-against-time chart.
        best: ``best_quality``, ``fastest``, ``cheapest`` (cell names), ``cells``, ``failed``.
    """

    markdown: str
    html: str
    best: dict[str, Any]


def plan_cells(grid: Sequence[Mapping[str, Any]], settings: SweepConfig) -> list[GridCell]:
    """The grid's cells, repeats expanded, each with its key.

    Args:
        grid: the cells as the pipeline's ``grid_cells`` gives them.
        settings: the grid's defaults and data (the pipeline's model, ..., source, limit_per_split).
    """
    return plan_grid(grid, settings.grid_defaults(), settings.key_context())


def run_one_cell(
    dataset: tuple[str, str],
    model: tuple[str, str],
    cell: Mapping[str, Any],
    rows_root: str,
    checkpoint_dir: Optional[str] = None,
) -> CellResult:
    """Trains and evaluates one planned cell (``GridCell.to_dict``), its row on record under ``rows_root``.

    Args:
        dataset: the dataset's (local path, URI); a cell of several worker pods reads the URI.
        model: the model folder's (local path, URI); the chief of worker pods writes the URI.
        cell: the planned cell.
        rows_root: where the cell's row is written.
        checkpoint_dir: where checkpoints go (None: under the model folder).
    """
    planned = GridCell.from_dict(cell)
    # The launcher is the run's default (auto): local processes outside a cluster, worker pods in one.
    dataset_dir, model_dir = training_locations(dataset, model, planned.workers, "auto")
    return run_cell_recorded(dataset_dir, model_dir, planned, rows_root, process_start_time(), checkpoint_dir)


def join_grid(cells: Sequence[GridCell], rows_root: str, price_table: Optional[str] = None) -> GridReport:
    """The tables from the rows the planned cells wrote; a cell without a row is a failed one.

    Args:
        cells: the planned cells (:func:`plan_cells`).
        rows_root: where the cells wrote their rows.
        price_table: a YAML price table over the defaults; None or empty for the defaults.
    """
    rows = build_rows(collect_results(cells, rows_root), load_price_table(price_table or None))
    return GridReport(render_grid_markdown(rows), render_grid_html(rows), best_cells(rows))


def run_notebook_sweep(
    dataset_dir: str,
    name: str,
    batch_sizes: Sequence[int],
    epochs: int,
    steps_per_epoch: Optional[int] = None,
    strategy: str = "auto",
    model: str = "mnist_cnn",
) -> SweepRun:
    """The GPU-vs-TPU notebook's sweep on this machine: one ``train()`` per batch size, epochs timed.

    Args:
        dataset_dir: the converted dataset (its train split is trained on).
        name: the name this machine is reported under (``tpu-v2-8``, ``gpu-1``, ``cpu``).
        batch_sizes: global batch sizes.
        epochs: epochs per batch size, >= 2 (the first, compiling, one is excluded).
        steps_per_epoch: steps per epoch; None for one pass over the split.
        strategy: ``auto``, ``tpu``, ``gpu`` or ``cpu``.
        model: the model builder (``mnist_cnn`` is the notebook's CNN).
    """
    entry = {"accelerator": name, "strategy": strategy}
    cells = plan_notebook_cells([entry], batch_sizes, epochs, steps_per_epoch or 0, model)
    results = [r for cell in cells for r in run_notebook_cell(dataset_dir, cell).results]
    return SweepRun(name, tuple(results))
