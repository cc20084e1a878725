"""The GPU-vs-TPU notebook's sweep on the grid: its cells, one training each, and its two tables.

The sweep is a grid of accelerator x batch size (:func:`plan_notebook_cells`, through
``plan_grid``); each cell trains the model with the trainer's ``train()`` (:func:`run_notebook_cell`)
and reports the notebook's figures from its per-epoch times, the first (compiling) epoch
excluded (:func:`sweep_result`). A :class:`SweepRun` holds one accelerator's results; the tables
(epoch time, step time per example) index them by accelerator and batch size. The records cross
task boundaries as JSON (strict records, ``trainer.records``: ``dsl.Collected`` hands counts back
as floats, read as ints again). TensorFlow is imported only inside :func:`run_notebook_cell`.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

from components import charts, markdown, pages
from components.pages import Markup
from components.sweep.grid import AcceleratorEntry, GridCell, as_int, plan_grid
from trainer import records
from trainer.benchmark import BenchmarkError

# The notebook's optimizer runs at Adam's 1e-3 whatever the batch; the trainer scales a cell's
# learning rate with its global batch (x global / 128), so each cell asks for 1e-3 x 128 / global.
NOTEBOOK_LEARNING_RATE = 1e-3
REFERENCE_BATCH = 128
MIN_EPOCHS = 2


def _num(value: Optional[float], fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


@dataclasses.dataclass(frozen=True)
class SweepResult(records.Record):
    """One batch size of a training sweep: the notebook's epoch time and step time per example.

    Attributes:
        batch_size: the global batch size.
        epoch_times_s: wall time of every epoch, the first (compiling) one included.
        epoch_time_s: mean epoch time without the first epoch.
        step_time_per_example_us: ``epoch_time_s`` per example, microseconds.
        examples_per_epoch: ``steps_per_epoch * batch_size``.
        steps_per_epoch: steps per epoch.
        accelerator: what actually ran (``tpu``, ``gpu``, ``cpu``).
    """

    _error = BenchmarkError
    _what = "training sweep result"

    batch_size: int
    epoch_times_s: tuple[float, ...]
    epoch_time_s: float
    step_time_per_example_us: float
    examples_per_epoch: int
    steps_per_epoch: int
    accelerator: str


@dataclasses.dataclass(frozen=True)
class SweepRun(records.Record):
    """One accelerator's training sweep: the name it is reported under and a result per batch size.

    Its JSON, ``{"accelerator": ..., "results": [...]}``, is the time_training_cell component's output.

    Attributes:
        accelerator: the name in the tables (a preset: ``tpu-v2-8``, ``gpu-1``, ``cpu``, ...).
        results: one per batch size (:func:`sweep_result`).
    """

    _error = BenchmarkError
    _what = "training sweep"

    accelerator: str
    results: tuple[SweepResult, ...]


def as_sweep(sweep: SweepRun | Mapping[str, Any]) -> SweepRun:
    """A sweep as a :class:`SweepRun`, from itself or from its JSON."""
    return sweep if isinstance(sweep, SweepRun) else SweepRun.from_dict(sweep)


Sweeps = Sequence[Union[SweepRun, Mapping[str, Any]]]


def sweep_tables(sweeps: Sweeps) -> tuple[list[int], list[str], dict[str, dict[int, SweepResult]]]:
    """Indexes sweep results by accelerator and batch size.

    Args:
        sweeps: runs, typed or as JSON (``SweepRun.to_dict``, the time_training_cell component's
            output, ``dsl.Collected`` copies included); runs under one accelerator name are merged.

    Returns:
        (sorted batch sizes, accelerator names in order, name -> batch size -> result).
    """
    by_acc: dict[str, dict[int, SweepResult]] = {}
    for sweep in (as_sweep(s) for s in sweeps):
        # One run per cell (accelerator x batch size) or per accelerator: the same name is one column.
        by_acc.setdefault(sweep.accelerator, {}).update({r.batch_size: r for r in sweep.results})
    sizes = sorted({b for results in by_acc.values() for b in results})
    return sizes, list(by_acc), by_acc


def _figure(result: Optional[SweepResult], key: str) -> Optional[float]:
    return None if result is None else getattr(result, key)


def render_sweep_markdown(sweeps: Sweeps, title: str = "GPU vs TPU training sweep") -> str:
    """The notebook's two tables: epoch time (s) and step time per example (us), first epoch excluded."""
    sizes, names, by_acc = sweep_tables(sweeps)
    lines = [f"# {title}", "", "The first (compiling) epoch is excluded from every figure.", ""]
    for heading, key, fmt in (
        ("Epoch time (s)", "epoch_time_s", ".2f"),
        ("Step time per example (us)", "step_time_per_example_us", ".1f"),
    ):
        body = [[str(size), *(_num(_figure(by_acc[n].get(size), key), fmt) for n in names)] for size in sizes]
        lines += [f"## {heading}", "", *markdown.table(["batch size", *names], body, "r" * (len(names) + 1)), ""]
    details = []
    for n in names:
        for size in sizes:
            r = by_acc[n].get(size)
            if r:
                details.append(
                    f"- {n}, batch {size}: ran on {r.accelerator}, {r.steps_per_epoch} steps "
                    f"({r.examples_per_epoch:,} examples) per epoch, epoch times "
                    + ", ".join(f"{t:.2f}" for t in r.epoch_times_s)
                    + " s"
                )
    lines += ["## Runs", "", *details]
    return "\n".join(lines) + "\n"


def render_sweep_html(sweeps: Sweeps, title: str = "GPU vs TPU training sweep") -> str:
    """Both sweep charts (grouped by batch size, one colour per accelerator) as one page."""
    sizes, names, by_acc = sweep_tables(sweeps)
    groups = [f"batch {s}" for s in sizes]
    charts_ = []
    for heading, key, unit in (
        ("Epoch time (lower is faster)", "epoch_time_s", "s"),
        ("Step time per example (lower is faster)", "step_time_per_example_us", "us"),
    ):
        series = {n: [_figure(by_acc[n].get(s), key) for s in sizes] for n in names}
        charts_.append(charts.grouped_bars(heading, groups, series, unit))
    epoch, step = (Markup(c) for c in charts_)
    return pages.page(
        title, [Markup("<p>The first (compiling) epoch is excluded.</p>"), epoch, Markup("<br/>"), step], pages.GRID_CSS
    )


# --------------------------------------------------------------------------- the sweep on the grid


def plan_notebook_cells(
    accelerators: Sequence[Mapping[str, Any]],
    batch_sizes: Sequence[Any],
    epochs: int,
    steps_per_epoch: int = 0,
    model: str = "mnist_cnn",
) -> list[GridCell]:
    """The sweep as a grid: one cell per accelerator x batch size, in that order.

    Args:
        accelerators: entries ``{accelerator, accelerator_type, accelerator_count, strategy}``
            (``AcceleratorEntry.to_dict``; the pipeline's ``accelerators_to_try``).
        batch_sizes: global batch sizes.
        epochs: epochs per cell, >= 2 (the first, compiling, one is excluded from the figures).
        steps_per_epoch: steps per epoch; 0 for one pass over the training split.
        model: the model builder (``mnist_cnn`` is the notebook's CNN).

    Raises:
        BenchmarkError: fewer than 2 epochs, or no batch sizes or one below 1.
        GridError: a malformed accelerator entry, or an accelerator named twice.
    """
    if as_int("epochs", epochs) < MIN_EPOCHS:
        raise BenchmarkError(f"epochs must be >= {MIN_EPOCHS}: the first (compiling) epoch is excluded, got {epochs}")
    sizes = [as_int(f"batch_sizes[{i}]", b) for i, b in enumerate(batch_sizes)]
    if not sizes or min(sizes) < 1:
        raise BenchmarkError(f"batch_sizes must be positive integers, got {list(batch_sizes)}")
    grid = []
    for index, raw in enumerate(accelerators):
        entry = AcceleratorEntry.of_cell(raw, f"accelerators_to_try[{index}]")
        for size in sizes:
            grid.append(
                {
                    **entry.to_dict(),
                    "name": f"{entry.accelerator} batch {size}",
                    "global_batch_size": size,
                    "learning_rate": NOTEBOOK_LEARNING_RATE * REFERENCE_BATCH / size,
                }
            )
    defaults = {"model": model, "epochs": epochs, "steps_per_epoch": steps_per_epoch}
    return plan_grid(grid, defaults, {"sweep": "gpu_vs_tpu"})


def sweep_result(summary: Any) -> SweepResult:
    """The notebook's figures of one training (``trainer.train.TrainingSummary``), first epoch excluded.

    Raises:
        BenchmarkError: fewer than 2 epochs were timed in the training's process.
    """
    times = [float(t) for t in summary.epoch_seconds]
    if len(times) < MIN_EPOCHS:
        raise BenchmarkError(
            f"the training timed {len(times)} epoch(s) in this process; the sweep leaves the first (compiling) "
            f"one out and needs at least {MIN_EPOCHS} (train into a fresh folder: a resumed run times only its own)"
        )
    epoch_time = statistics.fmean(times[1:])
    examples = summary.steps_per_epoch * summary.global_batch_size
    return SweepResult(
        batch_size=summary.global_batch_size,
        epoch_times_s=tuple(times),
        epoch_time_s=epoch_time,
        step_time_per_example_us=epoch_time / examples * 1e6,
        examples_per_epoch=examples,
        steps_per_epoch=summary.steps_per_epoch,
        accelerator=summary.accelerator,
    )


def run_notebook_cell(dataset_dir: str, cell: GridCell) -> SweepRun:
    """Trains one cell with the trainer's ``train()`` (into a temporary folder, no validation) and times its epochs.

    Returns:
        The cell's accelerator with its one result (the join merges the cells of an accelerator).
    """
    from trainer.config import TrainConfig
    from trainer.train import train

    # No validation, as in the notebook: the epochs time the training steps alone.
    config = TrainConfig.from_dict({**cell.train_fields(), "validation_split": None})
    with tempfile.TemporaryDirectory(prefix="gpu-vs-tpu-") as work:
        # The model is not kept: the sweep measures the hardware, not the weights.
        summary = train(dataset_dir, os.path.join(work, "model"), config)
    return SweepRun(cell.accelerator, (sweep_result(summary),))
