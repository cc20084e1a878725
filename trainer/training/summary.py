"""What a finished training reports and leaves: ``training.json``, the exported model, the card.

:class:`TrainingSummary` is the record of ``training.json``; :func:`export` writes the SavedModel,
the Keras file and (the chief) the effective config, the model card and the summary, last.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import logging
import time
from collections.abc import Mapping
from typing import Any, Optional

from trainer import distribute, model_folder, records, storage
from trainer.budget import layout
from trainer.config import TrainConfig
from trainer.tasks import DEFAULT_TASK, Task
from trainer.tfrecords import DatasetInfo
from trainer.training.run import Fit, Run, gfile
from trainer.training.watch import stopped_early

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class TrainingSummary(records.Record):
    """What a finished training reports; written to ``training.json`` (keys as in docs/CONTRACTS.md).

    A forward-compatible record (``trainer.records``): the keys of a newer version's file are kept
    in ``extra`` and written back, and an earlier version's file loads (without ``task``: a
    classification's; without ``metrics``: the figures from the keys that held them).

    Attributes:
        task: the task trained (``classification``, ...).
        model: the model builder's name.
        steps: optimizer steps taken (the whole training, resumed parts included).
        epochs: epochs trained.
        steps_per_epoch: steps per epoch.
        global_batch_size: examples per step over all replicas.
        batch_size_per_replica: examples per step per replica.
        replicas: replicas in sync, over every worker.
        accelerator: ``tpu``, ``gpu`` or ``cpu``.
        strategy: the tf.distribute strategy's class name.
        precision: the Keras mixed-precision policy.
        steps_per_execution: steps per host round trip.
        jit_compile: whether XLA compiled the step.
        input_cached: whether decoded training images were cached in memory.
        learning_rate: the learning rate after scaling with the global batch.
        images_per_sec: epoch-timed throughput, first epoch excluded (the notebook's way).
        train_seconds: wall time of the fit loop in this process.
        resumed_from_step: the checkpoint step this process started from (0 for a fresh start).
        train_loss: the last epoch's training loss.
        val_loss: the last epoch's validation loss, when validated.
        class_names: class names, index = label.
        image_shape: ``[height, width, channels]``.
        dataset: the dataset folder trained on.
        dataset_fingerprint: the dataset's fingerprint (source fingerprint or shard checksums).
        config_fingerprint: the training config's fingerprint.
        history: one row per epoch: ``epoch``, ``step`` and Keras' logs.
        finished_at: ISO time in UTC.
        precision_reason: why that policy (``precision: auto`` decides per device).
        model_reason: why that model, when the task chose it (``model: auto``); None: as configured.
        epoch_seconds: each epoch's time in this process (start to last training step, validation
            excluded), the first (compiling) one included; a resumed run lists only its own epochs.
        workers: training processes (pods) under ``MultiWorkerMirroredStrategy``; 1 for one process.
        fit: what the task fitted to the training data (the options left on ``auto``, the
            schedule) and why: coverage, object sizes in pixels, steps; its ``lines`` say it in words.
        metrics: the task's figures of the last epoch (``Task.summary_metrics``, named by
            ``Task.training_metrics``: a classifier's accuracies, a detector's box and class
            losses); None where the training did not report one.
        budget: what a time or cost budget bought (``trainer.budget.layout.BudgetPlan``'s keys: the
            measured step time, the steps, the evaluations, predicted time and cost) and, under
            ``actual_s`` and ``actual_cost``, what the step took; None without a budget.
        stopping: where the training ended and why: ``step``, ``planned_steps``, ``reason``
            (``completed``, ``early stopping``, ``budget``, or ``rung stop``: this process's
            ``stop_at`` reached, a later process goes on from the checkpoints), the metric watched
            (``monitor``), its ``best`` value at ``best_step`` (the weights exported), the
            ``patience``, and ``stop_at`` where one was set; None for a training recorded before it.
        extra: keys this code does not know (written by a newer version), kept as they were.
    """

    _mode = records.FORWARD_COMPATIBLE
    _what = "training.json"
    # The task figures held as top-level keys before ``metrics``: still written, for their readers.
    _moved = {"metrics": ("train_accuracy", "val_accuracy")}

    model: str
    steps: int
    epochs: int
    steps_per_epoch: int
    global_batch_size: int
    batch_size_per_replica: int
    replicas: int
    accelerator: str
    strategy: str
    precision: str
    steps_per_execution: int
    jit_compile: bool
    input_cached: bool
    learning_rate: float
    images_per_sec: Optional[float]
    train_seconds: float
    resumed_from_step: int
    train_loss: Optional[float]
    val_loss: Optional[float]
    class_names: list[str]
    image_shape: list[int]
    dataset: str
    dataset_fingerprint: str
    config_fingerprint: str
    history: list[dict[str, Any]]
    finished_at: str
    task: str = DEFAULT_TASK
    epoch_seconds: list[float] = dataclasses.field(default_factory=list)
    precision_reason: Optional[str] = None
    workers: int = 1
    model_reason: Optional[str] = None
    fit: Optional[dict[str, Any]] = None
    metrics: dict[str, Optional[float]] = dataclasses.field(default_factory=dict)
    budget: Optional[dict[str, Any]] = None
    stopping: Optional[dict[str, Any]] = None
    extra: Mapping[str, Any] = records.extra_field()


def summarize(run: Run, fit: Fit, step: int, train_seconds: float) -> TrainingSummary:
    """What the training reports, at the end of its epochs.

    Args:
        run: the training.
        fit: what its epochs fitted with (the meter, the history, the step resumed from).
        step: the optimizer's step at the end.
        train_seconds: the wall time of the epochs in this process.
    """
    prepared, settings, history, meter = run.prepared, run.settings, fit.history, fit.meter
    last = history[-1] if history else {}
    return TrainingSummary(
        task=prepared.task.name,
        model=prepared.model,
        model_reason=prepared.model_reason,
        steps=step,
        epochs=settings.epochs,
        steps_per_epoch=settings.steps_per_epoch,
        global_batch_size=settings.global_batch,
        batch_size_per_replica=settings.global_batch // settings.replicas,
        replicas=settings.replicas,
        accelerator=settings.kind,
        strategy=distribute.strategy_name(run.strategy),
        precision=settings.precision,
        precision_reason=settings.precision_reason,
        workers=settings.workers,
        steps_per_execution=settings.steps_per_execution,
        jit_compile=bool(settings.jit_compile),
        input_cached=fit.input_cached,
        learning_rate=settings.learning_rate,
        images_per_sec=meter.images_per_sec,
        epoch_seconds=meter.epoch_seconds,
        train_seconds=train_seconds,
        resumed_from_step=fit.resumed_from,
        train_loss=last.get("loss"),
        val_loss=last.get("val_loss"),
        metrics=dict(prepared.task.summary_metrics(history)),
        class_names=list(prepared.info.classes),
        image_shape=list(prepared.task.input_shape(prepared.info)),
        dataset=run.dataset_dir,
        dataset_fingerprint=prepared.dataset_fp,
        config_fingerprint=prepared.fingerprint,
        history=history,
        finished_at=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        fit=prepared.fit,
        budget=run.plan.to_dict() if run.plan is not None else None,
        stopping=_stopping_record(run, fit, step),
    )


def _stopping_record(run: Run, fit: Fit, step: int) -> dict[str, Any]:
    """Where the training ended and why, and the best evaluation (``TrainingSummary.stopping``)."""
    stopped = stopped_early(fit)
    stopper = fit.stopper
    record: dict[str, Any] = {
        "step": step,
        "planned_steps": run.total_steps,
        "reason": stopped[0] if stopped else "completed",
        "patience": stopper.patience if stopper is not None else None,
    }
    if run.config.limits.stop is not None:
        record["stop_at"] = run.config.stop_at  # where this process was to stop (a search's rung)
    if stopper is not None and stopper.best_step is not None:
        record.update(monitor=stopper.monitor, best=stopper.best, best_step=stopper.best_step)
    return record


def _effective_config(run: Run) -> TrainConfig:
    """The config with the settings left to the device (``None``, ``auto``) as they were resolved.

    The task's options are written whole where some were fitted to the data.
    """
    config, prepared, settings = run.config, run.prepared, run.settings
    resolved = {
        "model": prepared.model,
        "precision": settings.precision,
        "steps_per_execution": settings.steps_per_execution,
        "jit_compile": settings.jit_compile,
        # With a budget the schedule is the budget's (the plan, in training.json), not epochs.
        **({} if config.limits.budgeted else {"epochs": settings.epochs}),
    }
    effective = config.replace(**{k: v for k, v in resolved.items() if getattr(config, k) in (None, "auto")})
    if prepared.fit is not None:
        effective = effective.replace(model_options=prepared.task.options.to_dict())
    return effective


def export(model: Any, run: Run, summary: TrainingSummary) -> TrainingSummary:
    """The SavedModel and the Keras file, then (the chief only) the config, the card and the summary.

    Written into the run's ``out_dir``: the model folder, or a worker's scratch folder.

    Returns:
        The summary, with the time the step took in all where it had a budget.
    """
    fs = gfile()
    model_dir, prepared = run.out_dir, run.prepared
    saved = model_folder.saved_model_dir(model_dir)
    if fs.exists(saved):
        # A previous run died during export (training.json is written last): start it over.
        fs.rmtree(saved)
    # Every worker of a set saves (saving may run collectives); the others into their scratch folder.
    export_started = time.perf_counter()
    prepared.task.export(model, saved, prepared.info)
    model.save(storage.join(model_dir, model_folder.KERAS_MODEL))
    preset = prepared.task.save_preset(model, model_folder.preset_dir(model_dir))
    if not run.chief:
        return summary
    if preset is not None:
        log.info("saved a keras-hub preset to %s (model_options.weights can start from it)", preset)
    if run.deadline is not None and summary.budget is not None:
        took = _actual(run, summary.budget, time.perf_counter() - export_started)
        summary = dataclasses.replace(summary, budget=took)
        log.info("budget: %s", layout.budget_line(summary.budget))
    storage.write_text(storage.join(model_dir, model_folder.CONFIG), _effective_config(run).to_yaml())
    storage.write_text(
        storage.join(model_dir, model_folder.MODEL_CARD), model_card(summary, prepared.info, prepared.task)
    )
    storage.write_text(model_folder.summary_path(model_dir), json.dumps(summary.to_dict(), indent=1))
    return summary


def _actual(run: Run, plan: Mapping[str, Any], export_s: float) -> dict[str, Any]:
    """The plan with what the step took: ``actual_s`` (all its processes), its cost, the export's time."""
    spent = run.deadline.spent_s()
    per_hour = plan.get("price_per_hour")
    return {
        **plan,
        "actual_s": round(spent, 3),
        "actual_export_s": round(export_s, 3),
        "actual_cost": None if per_hour is None else round(spent * per_hour / 3600.0, 6),
    }


def _fmt(value: Any, spec: str = ".4f") -> str:
    return "n/a" if value is None else format(value, spec)


def model_card(summary: TrainingSummary, info: DatasetInfo, task: Task) -> str:
    """A short Markdown model card: dataset, accelerator, steps, the task's final metrics, serving."""
    counts = {s: v.count for s, v in info.splits.items()}
    classes = summary.class_names
    outputs = " and ".join(f"`{name}`" for name in task.serving.outputs)
    lines = [
        f"# Model card: {summary.model}",
        "",
        "## Dataset",
        f"- location: `{summary.dataset}` (source `{info.source.uri}`, fingerprint `{summary.dataset_fingerprint}`)",
        f"- examples per split: {', '.join(f'{k} {v}' for k, v in counts.items())}",
        f"- images: {'x'.join(str(v) for v in summary.image_shape)}; {len(classes)} classes: "
        f"{', '.join(classes[:20])}{' ...' if len(classes) > 20 else ''}",
        "",
        "## Training",
        f"- task: {summary.task}",
        *([f"- model chosen: {summary.model_reason}"] if summary.model_reason else []),
        f"- accelerator: {summary.accelerator} ({summary.strategy}, {summary.replicas} replicas"
        f"{f' over {summary.workers} workers' if summary.workers > 1 else ''}), "
        f"precision {summary.precision}, XLA {summary.jit_compile}",
        f"- {summary.steps} steps = {summary.epochs} epochs x {summary.steps_per_epoch} steps, global "
        f"batch {summary.global_batch_size}, learning rate {summary.learning_rate:.4g}",
        f"- throughput: {_fmt(summary.images_per_sec, '.0f')} images/s; config `{summary.config_fingerprint}`",
        f"- precision: {summary.precision} ({summary.precision_reason or 'as configured'})",
        *([f"- budget: {layout.budget_line(summary.budget)}"] if summary.budget else []),
        *([f"- stopping: {layout.stopping_line(summary.stopping)}"] if summary.stopping else []),
        *(
            ["", "## Fitted to the data", *(f"- {line}" for line in summary.fit.get("lines", []))]
            if summary.fit
            else []
        ),
        "",
        "## Final metrics",
        *task.describe(summary.to_dict()),
        "",
        "## Serving",
        f"`saved_model/` signatures: `serving_default` (encoded image bytes in) and `{task.serving.tensor_signature}` "
        f"(float32 images in [0, 1]); both return {outputs}.",
        "",
    ]
    return "\n".join(lines)
