"""One grid cell: train, evaluate on the test split, time it all, and record the row.

The cell task always succeeds when the cell's own run fails (out of memory, a batch the data cannot
fill, a bad model option): on a cluster a failed task publishes no outputs for later tasks, so
the row, ``status: failed`` with the reason, is the cell's output and is also written straight to
``<rows_root>/<key>.json``. That file is written first with ``status: running``: a pod killed from
outside (out of memory, a preempted TPU out of retries) leaves it so, and the join reports the
cell as failed with what it knows. TensorFlow is imported only inside :func:`run_cell`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import traceback
from typing import Any, Optional

from components.sweep.grid import GridCell, GridError
from trainer import model_folder, records, storage

log = logging.getLogger(__name__)

STATUSES = ("ok", "failed", "running")


def quality_metrics(task_name: Optional[str]) -> tuple[str, ...]:
    """The task's quality metrics, in the tables' order: the first ranks the cells (none: no task)."""
    from trainer.tasks import get_task

    return get_task(task_name).quality_metrics if task_name else ()


def quality_label(metric: str) -> str:
    """A quality metric's column title in the tables, as its task names it (else the metric's name)."""
    from trainer.tasks import task_types

    titles = {m.name: m.column for task in task_types().values() for m in task.metrics}
    return titles.get(metric, metric)


def process_start_time() -> float:
    """When this process started (Unix time), from ``/proc``; where that is missing, now.

    The billed time of a cell is the pod's life, not only the fit: Python's start-up, the imports,
    the first (compiling) epoch, the export and the evaluation all hold the accelerator. Inside a
    KFP pod this process is the executor the launcher starts once the container runs, so the
    figure misses only scheduling and the image pull.
    """
    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            # Field 22 (after the parenthesised command, which may hold spaces): start time in ticks since boot.
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        log.warning("no /proc here: the billed time counts from the cell's start, not the process's")
        return time.time()
    return time.time() - uptime + start_ticks / os.sysconf("SC_CLK_TCK")


@dataclasses.dataclass(frozen=True)
class CellResult(records.Record):
    """What one cell measured (or why it has no figures): the cell task's output and its row file.

    A strict record: its JSON is every field, the cell's nested under ``cell`` (``dsl.Collected``
    and kfp.local floats read back as ints).

    Attributes:
        cell: the cell that ran.
        status: ``ok``, ``failed`` (``reason`` says why) or ``running`` (the file of a cell still
            running, or killed before it could finish).
        reason: why it failed; None when ok.
        task: the dataset's task (``detection``, ``classification``); None when it never got there.
        fit_s: the fit loop's wall time (``TrainingSummary.train_seconds``).
        billed_s: the process's whole life up to the end of the evaluation.
        epoch_s: one steady epoch's time (first epoch excluded when there are two or more).
        examples_per_sec: training throughput (first epoch excluded when there are two or more).
        steps: optimizer steps.
        global_batch_size: examples per step over all replicas.
        batch_size_per_replica: examples per step per replica.
        replicas: replicas in sync.
        device: what the trainer found (``tpu``, ``gpu``, ``cpu``).
        metrics: the evaluation's scalar metrics on the test split.
        started_at: Unix time the process started.
    """

    _error = GridError
    _what = "cell result"

    cell: GridCell
    status: str
    reason: Optional[str] = None
    task: Optional[str] = None
    fit_s: Optional[float] = None
    billed_s: Optional[float] = None
    epoch_s: Optional[float] = None
    examples_per_sec: Optional[float] = None
    steps: Optional[int] = None
    global_batch_size: Optional[int] = None
    batch_size_per_replica: Optional[int] = None
    replicas: Optional[int] = None
    device: Optional[str] = None
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    started_at: Optional[float] = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise GridError(f"cell {self.cell.name}: status must be one of {', '.join(STATUSES)}, got {self.status!r}")
        if (self.status == "failed") != (self.reason is not None):
            raise GridError(f"cell {self.cell.name}: a reason comes with status failed only, got {self.status!r}")


def resolve_rows_root(rows_root: str, pipeline_root: str) -> str:
    """The rows' folder: ``rows_root``, or ``<pipeline_root>/sweep-rows`` when it is empty.

    Keyed by the cell (not the run), so a re-run whose cells KFP answers from the cache finds the
    rows those cells wrote the first time.

    Raises:
        GridError: both are empty.
    """
    if rows_root:
        return rows_root
    if not pipeline_root:
        raise GridError("sweep rows: rows_root and pipeline_root are both empty; pass dsl.PIPELINE_ROOT_PLACEHOLDER")
    return storage.join(pipeline_root, "sweep-rows")


def row_uri(rows_root: str, key: str) -> str:
    """Where the row of the cell with this key is written."""
    return storage.join(rows_root, f"{key}.json")


def write_row(rows_root: str, result: CellResult) -> None:
    """Writes a cell's row to ``<rows_root>/<key>.json`` (local path or gs://)."""
    storage.write_json(row_uri(rows_root, result.cell.key), result.to_dict())


def read_row(rows_root: str, cell: GridCell) -> Optional[CellResult]:
    """The row of a cell, or None when none was written."""
    uri = row_uri(rows_root, cell.key)
    if not storage.exists(uri):
        return None
    return CellResult.from_dict(storage.read_json(uri))


def _steady_epoch(summary: Any) -> tuple[float, Optional[float]]:
    examples_per_epoch = summary.steps_per_epoch * summary.global_batch_size
    if summary.images_per_sec:
        # images_per_sec already leaves the compiling first epoch out (two or more epochs).
        return examples_per_epoch / summary.images_per_sec, summary.images_per_sec
    epoch_s = summary.train_seconds / max(1, summary.epochs)
    return epoch_s, (examples_per_epoch / epoch_s if epoch_s > 0 else None)


def run_cell(
    dataset_dir: str, model_dir: str, cell: GridCell, started_at: float, checkpoint_dir: Optional[str] = None
) -> CellResult:
    """Trains the cell's model, scores it on the test split and returns the row (``ok``).

    Args:
        dataset_dir: the converted dataset (the same for every cell: the same test split).
        model_dir: where the model folder goes.
        cell: the cell.
        started_at: when the billed time starts (:func:`process_start_time`).
        checkpoint_dir: where checkpoints go (None: under the model folder).

    Raises:
        GridError: ``image_size`` on a task without one (classification trains at the dataset's size).
        Exception: whatever training or evaluation raised (see :func:`run_cell_recorded`).
    """
    from components.launchers.training import run_training
    from trainer import tfrecords
    from trainer.config import EvaluateConfig, TrainConfig
    from trainer.tasks import task_of_manifest

    task = task_of_manifest(tfrecords.load_dataset_info(dataset_dir))
    if cell.image_size is not None and not task.accepts_image_size():
        raise GridError(
            f"cell {cell.name}: image_size {cell.image_size} applies to tasks that resize their input (detection "
            f"letterboxes to it); a {task.name} model trains at the dataset's image size: convert the data at that "
            "size instead"
        )
    config = TrainConfig.from_dict(cell.train_fields())
    summary = run_training(dataset_dir, model_dir, config, checkpoint_dir=checkpoint_dir)
    result = task.evaluate(model_folder.saved_model_dir(model_dir), dataset_dir, EvaluateConfig(split="test"))
    epoch_s, per_sec = _steady_epoch(summary)
    return CellResult(
        cell=cell,
        status="ok",
        task=task.name,
        fit_s=summary.train_seconds,
        billed_s=time.time() - started_at,
        epoch_s=epoch_s,
        examples_per_sec=per_sec,
        steps=summary.steps,
        global_batch_size=summary.global_batch_size,
        batch_size_per_replica=summary.batch_size_per_replica,
        replicas=summary.replicas,
        device=summary.accelerator,
        metrics={k: float(v) for k, v in result.metrics.items()},
        started_at=started_at,
    )


def run_cell_recorded(
    dataset_dir: str,
    model_dir: str,
    cell: GridCell,
    rows_root: str,
    started_at: Optional[float] = None,
    checkpoint_dir: Optional[str] = None,
) -> CellResult:
    """:func:`run_cell` with its row on record: ``running`` first, then ``ok`` or ``failed``.

    A failure of the cell's run is its result, not the task's: the exception's type and message
    become the row's reason (and the traceback goes to the log), so the join still gets the row.
    Only a failure to write the row itself propagates.
    """
    started_at = process_start_time() if started_at is None else started_at
    write_row(rows_root, CellResult(cell=cell, status="running", started_at=started_at))
    try:
        result = run_cell(dataset_dir, model_dir, cell, started_at, checkpoint_dir)
    except Exception as err:  # noqa: BLE001 (recorded as the cell's result: the row says why)
        log.error("cell %s failed:\n%s", cell.name, traceback.format_exc())
        reason = f"{type(err).__name__}: {err}".strip()
        result = CellResult(
            cell=cell,
            status="failed",
            reason=reason[:2000],
            billed_s=time.time() - started_at,
            started_at=started_at,
        )
    write_row(rows_root, result)
    return result
