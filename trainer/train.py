"""Training: one Keras code path for TPU, GPU and CPU, with checkpoints, resume and export.

``train(dataset_dir, model_dir, config)`` checks everything it can before the first step (the
dataset's manifest and splits, batch sizes against the replicas, the model against the dataset's
image shape and classes, that the model folder is writable), then trains with ``model.fit``
under the accelerator's strategy and writes the model folder of docs/CONTRACTS.md:

    saved_model/  model.keras  config.yaml  model_card.md  checkpoints/  logs/  training.json

``training.json`` is written last: it marks a finished training. A re-run on a finished folder
returns it without training again; a re-run on a half-trained folder (a preempted TPU, a killed
pod) restores the last checkpoint and trains only the remaining steps, to the same final count.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import functools
import json
import logging
import math
import time
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Optional

from trainer import budget as budget_lib
from trainer import data, distribute, model_folder, records, storage, tfrecords
from trainer.config import TrainConfig
from trainer.errors import TrainingError
from trainer.tasks import DEFAULT_TASK, Task, TaskError, task_of_manifest
from trainer.tfrecords import DatasetInfo

if TYPE_CHECKING:
    from trainer.multiworker import WorkerRole

log = logging.getLogger(__name__)

STATE_NAME = "state.json"
# The progress's last line, by why the training ended early.
_STOP_NOTES = {
    "early stopping": "stopped early",
    budget_lib.BUDGET_SPENT: "budget spent",
    budget_lib.RUNG_STOP: "stopped at the rung's budget",
}
# The learning rate in the config is for this global batch; larger batches scale it linearly.
BASE_BATCH = 128


# ---------------------------------------------------------------------------------------------
# Small helpers (no TensorFlow at import time).
# ---------------------------------------------------------------------------------------------


def _join(base: str, *names: str) -> str:
    return "/".join([base.rstrip("/"), *names])


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


def check_writable(model_dir: str) -> None:
    """Creates ``model_dir`` and writes a probe file, so a bad URI fails before training, not after.

    Raises:
        TrainingError: the folder cannot be created or written.
    """
    gfile = _gfile()
    probe = _join(model_dir, f".write-probe-{uuid.uuid4().hex[:8]}")
    try:
        gfile.makedirs(model_dir)
        with gfile.GFile(probe, "w") as f:
            f.write("ok")
        gfile.remove(probe)
    except Exception as err:  # noqa: BLE001 - every filesystem failure means the same thing here
        raise TrainingError(
            f"model_dir: cannot write to {model_dir!r} ({type(err).__name__}: {err}); give a folder or gs:// "
            "URI this process can write (on GKE: the pod's service account needs storage.objectAdmin)"
        ) from err


def resolve_global_batch(config: TrainConfig, replicas: int) -> int:
    """The global batch: ``global_batch_size``, or ``batch_size_per_replica`` x replicas.

    Raises:
        TrainingError: ``global_batch_size`` does not divide evenly by the replicas (refused, not
            adjusted: a silently different batch changes the learning-rate scaling and the results).
    """
    if config.global_batch_size is None:
        return config.batch_size_per_replica * replicas
    if config.global_batch_size % replicas:
        lower = max(replicas, config.global_batch_size // replicas * replicas)
        raise TrainingError(
            f"train.global_batch_size: {config.global_batch_size} does not divide evenly over {replicas} "
            f"replicas; use a multiple of {replicas} (e.g. {lower} or {lower + replicas}), or set "
            "batch_size_per_replica and leave global_batch_size null"
        )
    return config.global_batch_size


def scaled_learning_rate(config: TrainConfig, global_batch: int) -> float:
    """The learning rate scaled linearly from a global batch of 128 (``BASE_BATCH``)."""
    return config.learning_rate * global_batch / BASE_BATCH


# ---------------------------------------------------------------------------------------------
# The training run.
# ---------------------------------------------------------------------------------------------


def _align_steps(
    config: TrainConfig, spe: int, info: DatasetInfo, global_batch: int, drop_remainder: bool
) -> tuple[int, int]:
    """Steps per epoch and steps per execution that fit each other.

    Keras runs whole executions only (``steps_per_epoch`` 3 with 4 steps per execution trains 4),
    so an epoch must be a multiple of ``steps_per_execution``: a one-pass epoch is rounded down to
    whole executions (the input repeats, so the next epoch reads on where this one stopped), and
    an explicit ``steps_per_epoch`` keeps its count with fewer steps per execution.
    """
    if config.steps_per_epoch is None:
        steps = data.steps_per_epoch(info, config.train_split, global_batch, drop_remainder)
        if steps < spe:
            return steps, steps
        return steps - steps % spe, spe
    steps = config.steps_per_epoch
    aligned = math.gcd(spe, steps)
    if aligned != spe and config.steps_per_execution is not None:
        log.warning("steps_per_execution %d does not divide steps_per_epoch %d; using %d", spe, steps, aligned)
    return steps, aligned


def _dataset_fingerprint(info: DatasetInfo) -> str:
    """The source's fingerprint, or (a source without one) a hash of the shards' checksums."""
    if info.source.fingerprint:
        return str(info.source.fingerprint)
    import hashlib

    shards = {s: [sh.crc32c or sh.sha256 or sh.file for sh in v.shards] for s, v in info.splits.items()}
    return hashlib.sha256(json.dumps(shards, sort_keys=True).encode()).hexdigest()[:16]


# The task figures ``training.json`` held as top-level keys before the ``metrics`` mapping: still
# written (from ``metrics``) for the readers of that format, and read from files without ``metrics``.
LEGACY_METRIC_KEYS = ("train_accuracy", "val_accuracy")


def recorded_metrics(data: Mapping[str, Any]) -> dict[str, Optional[float]]:
    """The task's figures of a ``training.json`` (its ``metrics``), also of one written before that mapping."""
    if "metrics" in data:
        return dict(data["metrics"] or {})
    return {k: data[k] for k in LEGACY_METRIC_KEYS if data.get(k) is not None}


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
        budget: what a time or cost budget bought (``trainer.budget.BudgetPlan``'s keys: the
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

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (``training.json``): every field, and the keys earlier versions wrote."""
        # Readers of the format before ``metrics`` find its figures where they were (None if absent).
        return {**super().to_dict(), **{key: self.metrics.get(key) for key in LEGACY_METRIC_KEYS}}

    @classmethod
    def from_dict(cls, data: Optional[Mapping[str, Any]], _prefix: str = "") -> TrainingSummary:
        """Reads ``training.json``, also as earlier versions wrote it.

        The legacy figures (``LEGACY_METRIC_KEYS``) are ``metrics``' copies, or its source in a file
        written before it: read into ``metrics``, not kept as unknown keys.
        """
        if isinstance(data, Mapping):
            figures = recorded_metrics(data)
            data = {**{k: v for k, v in data.items() if k not in LEGACY_METRIC_KEYS}, "metrics": figures}
        return super().from_dict(data, _prefix)


@dataclasses.dataclass(frozen=True)
class _Prepared:
    """What is known before TensorFlow starts: the dataset, the task, the folders, the fingerprints."""

    info: DatasetInfo
    task: Task
    model: str  # the model to build: the config's, or the task's choice for ``auto``
    model_reason: Optional[str]
    val_split: Optional[str]
    ckpt_dir: str
    fingerprint: str
    dataset_fp: str
    history: list[dict[str, Any]]
    fit: Optional[dict[str, Any]] = None
    state: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # state.json of a half-finished training


@dataclasses.dataclass(frozen=True)
class _Settings:
    """The accelerator-dependent settings, resolved against the strategy."""

    kind: str
    replicas: int
    global_batch: int
    precision: str
    precision_reason: str
    steps_per_execution: int
    jit_compile: Any
    drop_remainder: bool
    steps_per_epoch: int
    learning_rate: float
    epochs: int
    workers: int = 1
    precision_candidates: tuple[str, ...] = ()  # the policies worth timing (``precision: auto``)


@dataclasses.dataclass(frozen=True)
class _Run:
    """One training: where it reads and writes, its config, and what was decided for it.

    Every step of :func:`train` after the checks takes the run; what one step adds (the fitted
    task and epochs) comes back as a new run.

    Attributes:
        dataset_dir: the dataset folder.
        model_dir: the chief's model folder (``train``'s ``model_dir``).
        config: the training settings as given.
        prepared: what was known before TensorFlow started: the dataset, the task, the model,
            the checkpoints' folder, the fingerprints, the history of a half-finished training.
        settings: what was decided for the strategy: batch, precision, steps, learning rate, epochs.
        strategy: the ``tf.distribute`` strategy.
        role: this process's place in a set of workers; None: it trains alone.
        plan: what the budget bought (laid out after the calibration, or read back on resume);
            None without a budget.
        deadline: the budget's clock; None without a budget.
        stop: the clock of this process's stop (``TrainConfig.stop_at``, a search's rung): the
            budget's, with the stop as its limit; None: no stop before the budget.
    """

    dataset_dir: str
    model_dir: str
    config: TrainConfig
    prepared: _Prepared
    settings: _Settings
    strategy: Any
    role: Optional[WorkerRole] = None
    plan: Optional[budget_lib.BudgetPlan] = None
    deadline: Optional[budget_lib.Deadline] = None
    stop: Optional[budget_lib.Deadline] = None

    @property
    def chief(self) -> bool:
        """Whether this process writes the model folder (alone, or the set's chief)."""
        return self.role is None or self.role.chief

    @property
    def out_dir(self) -> str:
        """Where this process saves: the model folder, or (a worker other than the chief) its scratch folder."""
        return self.model_dir if self.chief else self.role.scratch_dir

    @property
    def total_steps(self) -> int:
        """The optimizer steps of the whole training."""
        return self.settings.epochs * self.settings.steps_per_epoch


@dataclasses.dataclass(frozen=True)
class _Fit:
    """What the epoch loop fits with, and where it starts.

    Attributes:
        model: the compiled model.
        optimizer: its optimizer (the loss-scaling wrapper under ``mixed_float16``).
        train_ds: the training input.
        val_ds: the validation input; None: no validation.
        val_steps: validation steps per epoch.
        callbacks: the fit's callbacks (``saver`` and ``meter`` among them).
        saver: the checkpointer.
        meter: the throughput meter (images per second, epoch times).
        input_cached: whether the decoded training images are cached in memory.
        resumed_from: the step of the checkpoint restored (0: a fresh start).
        history: one row per finished epoch, those of a restored checkpoint first; the epochs
            append theirs.
        validation: the task's callbacks that score the validation split each evaluation.
        stopper: early stopping (None: off).
        progress: what reports the progress (None: nothing does).
    """

    model: Any
    optimizer: Any
    train_ds: Any
    val_ds: Any
    val_steps: Optional[int]
    callbacks: list[Any]
    saver: Any
    meter: Any
    input_cached: bool
    resumed_from: int
    history: list[dict[str, Any]]
    validation: list[Any] = dataclasses.field(default_factory=list)
    stopper: Any = None
    progress: Any = None


def _restore(checkpoint: Any, ckpt_dir: str, optimizer: Any, total_steps: int) -> int:
    """Restores the latest checkpoint in ``ckpt_dir``, if any; returns the step it was at (0 without one).

    Every worker of a set restores from the chief's folder, so all start from the same step.
    """
    import tensorflow as tf

    from trainer import callbacks

    latest = tf.train.latest_checkpoint(ckpt_dir)
    if not latest:
        return 0
    checkpoint.restore(latest).assert_existing_objects_matched()
    resumed_from = callbacks.optimizer_step(optimizer)
    log.info("resuming from %s at step %d of %d", latest, resumed_from, total_steps)
    return resumed_from


def _fit_epochs(run: _Run, fit: _Fit) -> int:
    """Fits the epochs not done yet, one ``model.fit`` each, saving a checkpoint and the history after each.

    Returns:
        The optimizer's step at the end.
    """
    from trainer import callbacks

    settings = run.settings
    step = fit.resumed_from
    for epoch in range(step // settings.steps_per_epoch, settings.epochs):
        remaining = (epoch + 1) * settings.steps_per_epoch - step
        if remaining <= 0:
            continue
        if remaining % settings.steps_per_execution:
            # Keras runs whole executions only; checkpoints of this config always fall on them.
            raise TrainingError(
                f"the checkpoint at step {step} is not on a multiple of steps_per_execution "
                f"({settings.steps_per_execution}); it was written with other settings. Train into a new "
                "folder (or delete the checkpoints)"
            )
        result = fit.model.fit(
            fit.train_ds,
            initial_epoch=epoch,
            epochs=epoch + 1,
            steps_per_epoch=remaining,
            validation_data=fit.val_ds,
            validation_steps=fit.val_steps,
            callbacks=fit.callbacks,
            shuffle=False,  # the tf.data pipeline shuffles
            verbose=2,
        )
        step = callbacks.optimizer_step(fit.optimizer)
        fit.saver.save(step)
        fit.history.append({"epoch": epoch + 1, "step": step, **{k: float(v[-1]) for k, v in result.history.items()}})
        _write_state(run, fit.history, fit)
        if fit.model.stop_training:  # the budget's guard or early stopping
            break
    return step


def _run_epochs(run: _Run, fit: _Fit) -> int:
    """The epochs: ``model.fit`` in one process, the multi-worker loop in a worker of a set.

    Returns:
        The optimizer's step at the end.
    """
    if run.role is None:
        return _fit_epochs(run, fit)
    from trainer import multiworker

    def on_epoch(epoch: int, step: int, logs: dict[str, float]) -> None:
        fit.history.append({"epoch": epoch + 1, "step": step, **logs})
        if run.chief:
            _write_state(run, fit.history, fit)

    settings = run.settings
    plan = multiworker.EpochPlan(
        settings.epochs, settings.steps_per_epoch, fit.resumed_from, bool(settings.jit_compile)
    )
    return multiworker.run_epochs(fit, run.role.strategy, plan, on_epoch)


def train(
    dataset_dir: str,
    model_dir: str,
    config: TrainConfig,
    checkpoint_dir: str | None = None,
    *,
    role: Optional[WorkerRole] = None,
    on_progress: Optional[Callable[..., None]] = None,
    started_at: Optional[float] = None,
) -> TrainingSummary:
    """Trains a model on a TFRecord dataset for the dataset's task and writes the model folder.

    Args:
        dataset_dir: the dataset folder (local or gs://) with ``dataset.json``.
        model_dir: the model folder to write (local or gs://); also holds checkpoints for resume.
        config: the training settings.
        checkpoint_dir: where checkpoints go; ``None`` for ``<model_dir>/checkpoints``. On a cluster
            KFP hands a component a *local* path that it uploads only when the step ends, so the
            component passes a folder under the artifact's gs:// URI here: checkpoints then
            survive a preempted pod, and the retried one (same URI) resumes from them.
        role: this process's place in a set of workers (``trainer.worker`` passes it); ``None``
            trains in this process alone. ``model_dir`` and ``checkpoint_dir`` are then the chief's.
        on_progress: ``(done, total, **fields)``, told the steps done of the total now and then,
            with images/s, the loss, the validation figure and the time left
            (``trainer.callbacks.TrainingProgress``; the train step prints progress lines with
            it); called by the chief only. None: no progress.
        started_at: when the budget's clock started (``time.time()`` seconds): a step's process
            start (``trainer.budget.process_started_at``), which counts the imports before this
            call; None: now (a notebook's or a test's process is older than its training).

    Returns:
        The training summary, also written to ``training.json`` (by the chief only).

    Raises:
        tfrecords.DatasetError: no/bad ``dataset.json``, a missing or empty split, images of mixed size.
        TrainingError: an unwritable ``model_dir``, a batch the replicas cannot divide, a model
            that does not fit the dataset, a folder holding a different training, or
            ``workers`` > 1 without a worker role.
        TrainingDivergedError: the loss became NaN/inf or exploded.
        distribute.AcceleratorNotFoundError: an accelerator asked for is not there.
    """
    if not isinstance(config, TrainConfig):
        raise TypeError(f"config must be a TrainConfig, got {type(config).__name__}")
    _check_role(config, role)
    dataset_dir, model_dir = str(dataset_dir), str(model_dir)
    prepared = _prepare(dataset_dir, model_dir, config, checkpoint_dir)
    if isinstance(prepared, TrainingSummary):
        return prepared
    strategy = role.strategy if role is not None else distribute.get_strategy(config.accelerator)
    settings = _settings(config, prepared.info, strategy)
    run = _fit_to_data(_Run(dataset_dir, model_dir, config, prepared, settings, strategy, role))
    run = _cached_precision(_budget_of(run, time.time() if started_at is None else started_at))
    built = _build(run)
    fit = _start(run, built)
    report = on_progress if run.chief else None
    if run.deadline is not None and run.plan is None:
        if report is not None:
            report(fit.resumed_from, run.total_steps, note="calibrating")
        run, fit = _calibrate(run, fit)
    fit = _watch(run, fit, report)
    started = time.perf_counter()
    step = _run_epochs(run, fit)
    train_seconds = time.perf_counter() - started
    stopped = _stopped_early(fit)
    if step != run.total_steps and stopped is None:
        raise TrainingError(f"training ended at step {step}, expected {run.total_steps}; re-run to resume")
    if stopped is not None and fit.progress is not None:
        fit.progress.finish(step, _STOP_NOTES.get(stopped[0], "stopped early"))
    _restore_best(run, fit, step)
    summary = _export(fit.model, run, _summary(run, fit, step, train_seconds))
    if stopped is not None and stopped[0] == budget_lib.RUNG_STOP and run.chief:
        # The next rung's process counts this one's time from state.json: its export too.
        _write_state(run, fit.history, fit)
    return summary


def _budget_of(run: _Run, started_at: float) -> _Run:
    """The run with its budget's clock (and its stop's), and the plan of a resumed training (its
    schedule as laid out).

    A training resumed after a restart, or continued by a search's next rung, keeps its plan (the
    same steps, so the same schedule) and counts the time its earlier processes spent
    (``state.json``'s ``spent_s``). A ``stop_at`` changes no plan: it stops this process on the
    same clock.
    """
    config, prepared = run.config, run.prepared
    if not config.has_budget:
        return run
    budget = config.budget()
    deadline = budget_lib.Deadline(budget.limit_s, started_at, _spent_before(prepared.state, started_at))
    stop_s = config.stop_at_s()
    stop = deadline.with_limit(stop_s) if stop_s is not None else None
    run = dataclasses.replace(run, deadline=deadline, stop=stop)
    spent = deadline.spent_before_s
    if stop_s is not None:
        log.info("stopping this process at %.0fs of the training's time (stop_at %s; %.0fs spent before it)",
                 stop_s, config.stop_at, spent)  # fmt: skip
    saved = prepared.state.get("budget")
    if not saved:
        return run
    plan = budget_lib.BudgetPlan.from_dict(saved)
    log.info("resuming the budget's plan (%.0fs spent before this process): %s", spent, plan.line())
    return _with_plan(run, plan)


def _spent_before(state: Mapping[str, Any], started_at: float) -> float:
    """The seconds earlier processes of this training spent that this one's clock does not count.

    A step retried in a new pod starts a new clock: all its predecessors spent counts. Workers
    restarted by the same step keep the step's clock (``started_at``), which already counts the
    time since the step started: only what was spent before that.
    """
    if not state.get("spent_s"):
        return 0.0
    if abs(float(state.get("clock_started_at") or 0.0) - started_at) < 1.0:
        return float(state.get("spent_before_s") or 0.0)
    return float(state["spent_s"])


def _with_plan(run: _Run, plan: budget_lib.BudgetPlan) -> _Run:
    """The run with the plan's evaluation intervals as its epochs."""
    settings = dataclasses.replace(run.settings, epochs=plan.evaluations, steps_per_epoch=plan.steps_per_evaluation)
    return dataclasses.replace(run, plan=plan, settings=settings)


def _precision_key(run: _Run) -> str:
    """The cache key of a precision measurement: the device and what sets a step's speed."""
    from trainer import calibrate

    prepared, settings = run.prepared, run.settings
    return calibrate.precision_key(
        calibrate.device_name(settings.kind),
        model=prepared.model,
        options=prepared.task.options.to_dict(),
        shape=list(prepared.task.input_shape(prepared.info)),
        batch=settings.global_batch,
        replicas=settings.replicas,
        steps_per_execution=settings.steps_per_execution,
        jit=bool(settings.jit_compile),
        candidates=list(settings.precision_candidates),
    )


def _with_precision(run: _Run, policy: str, reason: str) -> _Run:
    return dataclasses.replace(
        run, settings=dataclasses.replace(run.settings, precision=policy, precision_reason=reason)
    )


def _cached_precision(run: _Run) -> _Run:
    """The run in the policy an earlier run measured faster on this device, where the device offers a choice."""
    from trainer import calibrate

    if len(run.settings.precision_candidates) < 2:
        return run
    measured = calibrate.cached_precision(_precision_key(run))
    if measured is None or measured.chosen not in run.settings.precision_candidates:
        return run
    log.info("precision %s: %s", measured.chosen, measured.reason())
    return _with_precision(run, measured.chosen, measured.reason())


def _measure_precision(run: _Run, fit: _Fit, step_s: float) -> tuple[_Run, _Fit, float]:
    """Times the other candidate policies at the fitted size and batch and keeps the faster
    (remembered on this machine); returns the run, its fit and its seconds per step.
    """
    from trainer import calibrate

    timed = {run.settings.precision: step_s}
    runs = {run.settings.precision: (run, fit)}
    for policy in run.settings.precision_candidates[1:]:
        other = _with_precision(run, policy, "")
        other_fit = _start(other, _build(other))
        timed[policy] = calibrate.time_steps(other_fit.model, other_fit.train_ds, run.settings.steps_per_execution)
        runs[policy] = (other, other_fit)
    measured = calibrate.PrecisionMeasurement(calibrate.choose(timed), timed)
    calibrate.keep_precision(_precision_key(run), measured)
    log.info("precision %s: %s", measured.chosen, measured.reason())
    # Another policy's model has not traced its validation yet: its first one takes longer than
    # the plan's estimate, which the budget's guard absorbs.
    chosen, chosen_fit = runs[measured.chosen]
    return _with_precision(chosen, measured.chosen, measured.reason()), chosen_fit, timed[measured.chosen]


def _calibrate_workers(run: _Run, fit: _Fit) -> tuple[Any, float, float]:
    """(timing, seconds per step, seconds elapsed) of a set of workers: each times its distributed
    steps, and every worker takes the chief's figures, so all lay out the same plan.
    """
    from trainer import calibrate, multiworker

    started = time.perf_counter()
    step_s, eval_s = multiworker.time_steps(
        fit, run.role.strategy, bool(run.settings.jit_compile), calibrate.MIN_TIMED_STEPS, calibrate.TIMED_SECONDS
    )
    elapsed = run.deadline.clock() - run.deadline.started_at
    export_s = max(calibrate.EXPORT_FLOOR_S, calibrate.EXPORT_FACTOR * eval_s)
    step_s, eval_s, export_s, elapsed, seconds = multiworker.from_chief(
        run.role.strategy, [step_s, eval_s, export_s, elapsed, time.perf_counter() - started]
    )
    return calibrate.Timing(step_s, eval_s, export_s, seconds), step_s, elapsed


def _calibrate(run: _Run, fit: _Fit) -> tuple[_Run, _Fit]:
    """Times real steps of the compiled model (in each precision worth timing, keeping the
    faster), lays the budget out over the steps that fit, and sets the schedule's length; the
    calibration's steps are undone (weights and optimizer).

    Raises:
        TrainingError: the budget cannot buy one evaluation interval (naming the least that can).
    """
    from trainer import calibrate, schedules

    started = time.perf_counter()
    if run.role is not None:
        timing, step_s, elapsed = _calibrate_workers(run, fit)
    else:
        timing = calibrate.measure(fit.model, fit.train_ds, run.settings.steps_per_execution, _evaluation(fit))
        step_s = timing.step_s
        measured = run.settings.precision_reason.startswith("measured")
        if len(run.settings.precision_candidates) > 1 and not measured:
            run, fit, step_s = _measure_precision(run, fit, step_s)
        elapsed = run.deadline.clock() - run.deadline.started_at
    own = run.config.epochs is not None or run.prepared.fit is not None
    try:
        plan = budget_lib.plan(
            run.config.budget(),
            elapsed_s=elapsed,
            calibration_s=time.perf_counter() - started,
            step_s=step_s,
            eval_s=timing.eval_s,
            export_s=timing.export_s,
            steps_per_execution=run.settings.steps_per_execution,
            spent_before_s=run.deadline.spent_before_s,
            # The run's own schedule, where it has one (the configured epochs, or the task's fitted
            # schedule): what a cap (<=5m) keeps where it fits.
            own_steps=run.total_steps if own else None,
            own_evaluations=run.settings.epochs if run.config.epochs is not None else None,
        )
    except budget_lib.BudgetError as err:
        raise TrainingError(f"train.time_budget: {err}") from None
    log.info("%s", plan.line())
    if not schedules.set_total_steps(fit.optimizer, plan.steps):
        log.info("the %s task's schedule does not depend on its length", run.prepared.task.name)
    run = _with_plan(run, plan)
    if run.chief:
        _write_state(run, fit.history, fit)
    return run, fit


def _evaluation(fit: _Fit) -> Optional[Any]:
    """One evaluation as the epochs run it (the validation split, the task's scoring), or None."""
    if fit.val_ds is None:
        return None

    def evaluate() -> None:
        logs = fit.model.evaluate(fit.val_ds, steps=fit.val_steps, verbose=0, return_dict=True)
        for callback in fit.validation:
            callback.set_model(fit.model)
            callback.on_epoch_end(0, logs)

    return evaluate


def _watch(run: _Run, fit: _Fit, on_progress: Optional[Callable[..., None]] = None) -> _Fit:
    """The fit with what watches the epochs: the task's validation scoring, early stopping, the
    budget's guard, and the progress (last: it reports the figures the others put in the logs).
    """
    from trainer import callbacks, multiworker, stopping

    watchers: list[Any] = []
    stopper = None
    patience = budget_lib.resolve_patience(budget_lib.parse_patience(run.config.patience), run.settings.epochs)
    if fit.val_ds is not None and patience is not None:
        # The task's own scoring each evaluation (a detector's COCO AP) is what early stopping watches.
        watchers += fit.validation
        monitor, higher = run.prepared.task.validation_metric(run.settings.kind)
        saved = run.prepared.state.get("stopping") or {}
        same = saved.get("monitor") == monitor and (saved.get("best_step") or 0) <= fit.resumed_from
        stopper = stopping.EarlyStopping(
            monitor,
            higher,
            patience,
            on_best=lambda step: _save_best(run, fit.model, step),
            best=saved.get("best") if same else None,
            best_step=saved.get("best_step") if same else None,
            wait=int(saved.get("wait") or 0) if same else 0,
        )
        watchers.append(stopper)
    stop_left = run.stop.left_s if run.stop is not None else None
    if run.plan is not None:
        # The rung's stop keeps the same reserve inside it as the budget: its model is exported too.
        reserve = run.plan.eval_s + run.plan.export_s
        if run.role is None:
            watchers.append(stopping.BudgetGuard(run.deadline.left_s, reserve, stop_left))
        else:  # the workers' clocks differ and all must stop at the same step: the chief's decides
            decide = functools.partial(multiworker.from_chief, run.role.strategy)
            watchers.append(stopping.SharedBudgetGuard(run.deadline.left_s, reserve, decide, stop_left_s=stop_left))
    stop_step = run.config.stop_at_step()
    if stop_step is not None and stop_step < run.total_steps:  # at the end or past it the schedule ends anyway
        watchers.append(stopping.StepStop(stop_step))
    progress = None
    if on_progress is not None:
        progress = callbacks.TrainingProgress(
            on_progress,
            run.total_steps,
            run.settings.global_batch,
            start_step=fit.resumed_from,
            deadline=_time_left(run),
            metric=run.prepared.task.validation_metric(run.settings.kind)[0],
        )
    # Before the checkpointer and the history: the validation figures are in the logs they see.
    ordered = watchers + fit.callbacks + ([progress] if progress is not None else [])
    return dataclasses.replace(fit, callbacks=ordered, stopper=stopper, progress=progress)


def _time_left(run: _Run) -> Optional[Callable[[], float]]:
    """The seconds this process has left to train (its budget's, or its stop's where sooner); None: no budget."""
    deadline, stop = run.deadline, run.stop
    if deadline is None:
        return None
    if stop is None:
        return lambda: max(deadline.left_s(), 0.0)
    return lambda: max(min(deadline.left_s(), stop.left_s()), 0.0)


def _stopped_early(fit: _Fit) -> Optional[tuple[str, int]]:
    """(why, at which step) the training ended before its last step; None: it did not.

    Why: ``early stopping``, ``budget`` (the budget spent) or ``rung stop`` (``stop_at`` reached).
    """
    from trainer import stopping

    for callback in fit.callbacks:
        if isinstance(callback, stopping.EarlyStopping) and callback.stopped_at is not None:
            return "early stopping", callback.stopped_at
        if isinstance(callback, stopping.BudgetGuard) and callback.stopped_at is not None:
            return callback.reason or budget_lib.BUDGET_SPENT, callback.stopped_at
    return None


def _best_prefix(run: _Run) -> str:
    return _join(run.prepared.ckpt_dir, "best", "weights")


def _save_best(run: _Run, model: Any, step: int) -> None:
    """Keeps the weights of a new best evaluation (the chief's folder; the export restores them)."""
    import tensorflow as tf

    if run.chief:
        tf.train.Checkpoint(model=model).write(_best_prefix(run))


def _restore_best(run: _Run, fit: _Fit, step: int) -> None:
    """Puts back the best evaluated weights when the last step's are not the best."""
    import tensorflow as tf

    stopper = fit.stopper
    if stopper is None or stopper.best_step is None or stopper.best_step == step:
        return
    tf.train.Checkpoint(model=fit.model).read(_best_prefix(run)).expect_partial()
    log.info(
        "exporting the best evaluated weights: %s %.4g at step %d (the last step, %d, scored lower)",
        stopper.monitor, stopper.best, stopper.best_step, step,
    )  # fmt: skip


def _check_role(config: TrainConfig, role: Optional[WorkerRole]) -> None:
    if role is None and config.workers > 1:
        raise TrainingError(
            f"train.workers: {config.workers} workers are started by the train step's launcher "
            "(python -m components.train, the pipeline's train step); trainer.train alone trains in one "
            "process: set workers: 1, or run the set"
        )
    if role is not None and role.workers != config.workers:
        raise TrainingError(f"train.workers: the config says {config.workers}, the worker set has {role.workers}")
    if role is not None and not role.chief and role.scratch_dir is None:
        raise TrainingError(f"worker {role.index}: a worker other than the chief needs a scratch folder")


def _start(run: _Run, built: tuple[Any, Any, Any]) -> _Fit:
    """Restores the checkpoint, writes the state, makes the inputs and callbacks.

    Checkpoints are restored from ``prepared.ckpt_dir`` (the chief's) and saved into the folder
    of the run's ``out_dir`` (the chief's own, or a worker's scratch folder).

    Args:
        run: the training.
        built: the model, its optimizer and their checkpoint (:func:`_build`).

    Returns:
        What the epochs fit with, from the step resumed from, with the history of the epochs the
        restored weights finished.
    """
    import tensorflow as tf

    from trainer import callbacks

    model, optimizer, checkpoint = built
    prepared, config = run.prepared, run.config
    own_ckpt = prepared.ckpt_dir if run.chief else model_folder.checkpoints_dir(run.out_dir)
    manager = tf.train.CheckpointManager(checkpoint, own_ckpt, max_to_keep=3)
    resumed_from = _restore(checkpoint, prepared.ckpt_dir, optimizer, run.total_steps)
    # Keep only the epochs the restored weights have actually finished.
    history = [h for h in prepared.history if h["epoch"] * run.settings.steps_per_epoch <= resumed_from]
    _gfile().makedirs(own_ckpt)
    if run.chief:
        _write_state(run, history)
    train_ds, val_ds, val_steps, cache = _inputs(run)
    validation = []
    if val_ds is not None:
        validation = prepared.task.validation_callbacks(
            prepared.info, run.dataset_dir, prepared.val_split, run.settings.kind
        )
    every_seconds = config.checkpoint_every_seconds
    if every_seconds is not None and run.settings.workers > 1:
        # A clock differs between workers, and every worker must save at the same step.
        log.warning("checkpoint_every_seconds is ignored with several workers; checkpoints follow steps")
        every_seconds = None
    saver = callbacks.Checkpointer(manager, config.checkpoint_every_steps, every_seconds)
    meter = callbacks.Throughput(run.settings.global_batch)
    fit_callbacks = [
        callbacks.DivergenceGuard(),
        saver,
        meter,
        callbacks.ScalarLogger(_join(run.out_dir, "logs", "train"), meter),
    ]
    return _Fit(
        model=model,
        optimizer=optimizer,
        train_ds=train_ds,
        val_ds=val_ds,
        val_steps=val_steps,
        callbacks=fit_callbacks,
        saver=saver,
        meter=meter,
        input_cached=cache,
        resumed_from=resumed_from,
        history=history,
        validation=validation,
    )


def _prepare(
    dataset_dir: str, model_dir: str, config: TrainConfig, checkpoint_dir: str | None
) -> _Prepared | TrainingSummary:
    """Checks everything that can be checked before TensorFlow builds anything.

    Returns the finished training's summary when ``model_dir`` already holds this very training.
    """
    info = tfrecords.load_dataset_info(dataset_dir)
    try:
        task_type = type(task_of_manifest(info))
    except TaskError as err:
        raise TrainingError(f"{dataset_dir}: {err}") from err
    task = task_type(config.model_options)  # a bad option is the task's error, naming the option
    task.check_dataset(info)
    if config.epochs is None and not config.has_budget and type(task).fit_to_data is Task.fit_to_data:
        raise TrainingError(
            f"train.epochs: null (fitted to the data) but the {task.name} task fits no schedule; set epochs"
        )
    info.split_count(config.train_split)
    val_split = _validation_split(info, config.validation_split)
    check_writable(model_dir)
    model, model_reason = task.resolve_model(config.model, info)
    if model_reason is not None:
        log.info("model %s: %s", model, model_reason)

    fingerprint = config.fingerprint()
    dataset_fp = _dataset_fingerprint(info)
    finished = storage.read_json(model_folder.summary_path(model_dir))
    if finished is not None:
        if finished.get("config_fingerprint") == fingerprint and finished.get("dataset_fingerprint") == dataset_fp:
            _check_same_stop(model_dir, finished, config, checkpoint_dir or model_folder.checkpoints_dir(model_dir))
            log.info(
                "%s already holds a finished training (step %s); not training again", model_dir, finished.get("steps")
            )
            return TrainingSummary.from_dict(finished)
        raise TrainingError(
            f"model_dir: {model_dir} already holds a model trained with another config or dataset "
            f"(config {finished.get('config_fingerprint')} vs {fingerprint}, dataset "
            f"{finished.get('dataset_fingerprint')} vs {dataset_fp}); train into a new folder"
        )
    ckpt_dir = checkpoint_dir or model_folder.checkpoints_dir(model_dir)
    if checkpoint_dir is not None:
        check_writable(checkpoint_dir)
    state = storage.read_json(_join(ckpt_dir, STATE_NAME))
    if state is not None and (state.get("config_fingerprint"), state.get("dataset_fingerprint")) != (
        fingerprint,
        dataset_fp,
    ):
        raise TrainingError(
            f"model_dir: {ckpt_dir} holds checkpoints of another config or dataset; resuming from them "
            "would mix two trainings. Train into a new folder (or delete the checkpoints)"
        )
    return _Prepared(
        info=info,
        task=task,
        model=model,
        model_reason=model_reason,
        val_split=val_split,
        ckpt_dir=ckpt_dir,
        fingerprint=fingerprint,
        dataset_fp=dataset_fp,
        history=list((state or {}).get("history", [])),
        state=dict(state or {}),
    )


def _check_same_stop(model_dir: str, finished: Mapping[str, Any], config: TrainConfig, ckpt_dir: str) -> None:
    """Refuses a finished folder that a search's rung stopped at another ``stop_at``.

    ``stop_at`` is not in the fingerprint, so the folder would otherwise pass for this training's
    end: a retried rung (the same ``stop_at``) gets its result back, a later rung must go on.

    Raises:
        TrainingError: the folder's training stopped at another ``stop_at``.
    """
    stopping = finished.get("stopping") or {}
    if stopping.get("reason") != budget_lib.RUNG_STOP:
        return
    try:
        same = budget_lib.parse_stop(stopping.get("stop_at")) == budget_lib.parse_stop(config.stop_at)
    except budget_lib.BudgetError:
        same = False  # unreadable: not this stop
    if not same:
        raise TrainingError(
            f"model_dir: {model_dir} holds this training stopped at stop_at {stopping.get('stop_at')} (step "
            f"{stopping.get('step')}), not at {config.stop_at}; to go on from there, train into a new model folder "
            f"with checkpoint_dir={ckpt_dir}"
        )


def _validation_split(info: tfrecords.DatasetInfo, split: Optional[str]) -> Optional[str]:
    """The validation split to use: ``split`` when the dataset has it (and it is not empty), else None."""
    if split is not None and split not in info.splits:
        log.warning(
            "validation split %r is not in the dataset (%s); training without validation", split, sorted(info.splits)
        )
        return None
    if split is not None:
        info.split_count(split)
    return split


def _precision(config: TrainConfig, kind: str) -> distribute.PrecisionChoice:
    """The mixed-precision policy: the config's, or the one that suits the device (``auto``)."""
    capability = distribute.gpu_capability() if kind == "gpu" else None
    choice = distribute.choose_precision(config.precision, kind, gpu_capability=capability)
    log.info("precision %s: %s", choice.policy, choice.reason)
    return choice


def _settings(config: TrainConfig, info: DatasetInfo, strategy: Any) -> _Settings:
    """Batch, precision, steps per execution, XLA and steps per epoch for the strategy."""
    import tensorflow as tf

    kind = distribute.accelerator_kind(strategy)
    precision = _precision(config, kind)
    defaults = distribute.DEFAULTS[kind]
    replicas = strategy.num_replicas_in_sync
    global_batch = resolve_global_batch(config, replicas)
    spe = config.steps_per_execution or defaults.steps_per_execution
    mirrored = (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)
    if spe > 1 and isinstance(strategy, mirrored):
        # Keras 3 fails under MirroredStrategy with several steps per execution ("You must feed a
        # value for placeholder tensor", keras-team/keras#19246, reproduced here with 2 replicas),
        # and so does it under MultiWorkerMirroredStrategy, which is not its subclass.
        log.warning(
            "steps_per_execution %d is not supported by Keras under %s; using 1",
            spe,
            distribute.strategy_name(strategy),
        )
        spe = 1
    steps_per_epoch, spe = _align_steps(config, spe, info, global_batch, defaults.drop_remainder)
    train_count = info.split_count(config.train_split)
    if global_batch > train_count:
        log.warning(
            "the global batch (%d) is larger than the %r split (%d examples)",
            global_batch,
            config.train_split,
            train_count,
        )
    settings = _Settings(
        kind=kind,
        replicas=replicas,
        global_batch=global_batch,
        precision=precision.policy,
        precision_reason=precision.reason,
        steps_per_execution=spe,
        jit_compile=defaults.jit_compile if config.jit_compile is None else config.jit_compile,
        drop_remainder=defaults.drop_remainder,
        steps_per_epoch=steps_per_epoch,
        learning_rate=scaled_learning_rate(config, global_batch),
        workers=config.workers,
        # Several workers would each time and choose alone: they keep the rule's policy.
        precision_candidates=distribute.precision_candidates(config.precision, precision, kind, config.workers),
        epochs=config.epochs or 0,  # None: fitted to the data (_fit_to_data)
    )
    log.info(
        "training %s on %s (%s, %d replicas): global batch %d, lr %.3g, %s, steps_per_execution %d, "
        "jit %s, %s epochs x %d steps",
        config.model,
        kind,
        distribute.strategy_name(strategy),
        replicas,
        global_batch,
        settings.learning_rate,
        settings.precision,
        spe,
        settings.jit_compile,
        config.epochs or "fitted",
        steps_per_epoch,
    )
    return settings


def _fit_to_data(run: _Run) -> _Run:
    """The run with its task's ``auto`` options fitted to the training split, and the fitted epochs.

    Raises:
        TrainingError: the data cannot be fitted, or ``epochs`` is null for a task that fits no schedule.
    """
    prepared, config, settings = run.prepared, run.config, run.settings
    try:
        fitted = prepared.task.fit_to_data(
            prepared.info,
            config.train_split,
            global_batch=settings.global_batch,
            steps_per_epoch=settings.steps_per_epoch,
            epochs=config.epochs,
            learning_rate=settings.learning_rate,
        )
    except TaskError as err:
        raise TrainingError(str(err)) from err
    epochs = config.epochs or (fitted.epochs if fitted is not None else None)
    if epochs is None and config.has_budget:
        epochs = 1  # laid out by the budget once the step is timed (_calibrate)
    if epochs is None:
        raise TrainingError(
            f"train.epochs: null (fitted to the data) but the {prepared.task.name} task fits no schedule; set epochs"
        )
    if fitted is None:
        return dataclasses.replace(run, settings=dataclasses.replace(settings, epochs=epochs))
    return dataclasses.replace(
        run,
        prepared=dataclasses.replace(prepared, task=fitted.task, fit=fitted.record),
        settings=dataclasses.replace(settings, epochs=epochs),
    )


def _build(run: _Run) -> tuple[Any, Any, Any]:
    """The task's model, compiled, with its optimizer and a checkpoint of both, under the strategy."""
    import keras
    import tensorflow as tf

    prepared, settings = run.prepared, run.settings
    keras.utils.set_random_seed(run.config.seed)
    previous_policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(settings.precision)
    try:
        with run.strategy.scope():
            try:
                model = prepared.task.build_model(prepared.model, prepared.info)
            except TaskError as err:
                raise TrainingError(str(err)) from err
            prepared.task.compile(
                model,
                prepared.task.optimizer(settings.learning_rate, run.total_steps),
                steps_per_execution=settings.steps_per_execution,
                jit_compile=settings.jit_compile,
            )
            # Under mixed_float16 Keras wraps the optimizer in a LossScaleOptimizer: use the
            # wrapper, whose step count includes the steps it skipped on overflow.
            optimizer = model.optimizer
            optimizer.build(model.trainable_variables)
            checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)
    return model, optimizer, checkpoint


def _inputs(run: _Run) -> tuple[Any, Any, Optional[int], bool]:
    """The training input, the validation input (or None) with its step count, and whether it caches."""
    dataset_dir, config, prepared, settings = run.dataset_dir, run.config, run.prepared, run.settings
    info, task = prepared.info, prepared.task
    shape = task.input_shape(info)
    cache = 0 < data.cached_size_mb(info, config.train_split, shape) <= config.cache_max_mb
    train_ds = data.make_dataset(
        dataset_dir,
        config.train_split,
        settings.global_batch,
        training=True,
        drop_remainder=settings.drop_remainder,
        shuffle_buffer=config.shuffle_buffer,
        augment=config.augment,
        seed=config.seed,
        cache=cache,
        info=info,
        task=task,
    )
    if prepared.val_split is None:
        return train_ds, None, config.validation_steps, cache
    val_ds = data.make_dataset(
        dataset_dir,
        prepared.val_split,
        settings.global_batch,
        training=False,
        drop_remainder=settings.drop_remainder,
        info=info,
        task=task,
    )
    val_count = info.split_count(prepared.val_split)
    batch = settings.global_batch
    # Several workers split a short last batch unevenly, and a replica with no example would
    # score nothing as NaN: they validate on whole batches.
    whole_batches = settings.drop_remainder or settings.workers > 1
    full = val_count // batch if whole_batches else math.ceil(val_count / batch)
    # A bounded count: Keras then neither warns about running out of data nor reads past the end.
    val_steps = min(config.validation_steps or full, full)
    if val_steps < 1:
        log.warning("validation split %r is smaller than one global batch; no validation", prepared.val_split)
        return train_ds, None, None, cache
    return train_ds, val_ds, val_steps, cache


def _write_state(run: _Run, history: list[dict[str, Any]], fit: Optional[_Fit] = None) -> None:
    """Writes the training's state beside its checkpoints (``state.json``).

    The fingerprints tie the checkpoints to this training; the history, the budget's plan and the
    time spent so far, and early stopping's best survive a restart.
    """
    prepared = run.prepared
    state: dict[str, Any] = {
        "config_fingerprint": prepared.fingerprint,
        "dataset_fingerprint": prepared.dataset_fp,
        "history": history,
    }
    if run.plan is not None:
        state["budget"] = run.plan.to_dict()
    if run.deadline is not None:
        deadline = run.deadline
        state.update(
            spent_s=round(deadline.spent_s(), 3),
            clock_started_at=deadline.started_at,
            spent_before_s=deadline.spent_before_s,
        )
    stopper = fit.stopper if fit is not None else None
    if stopper is not None:
        state["stopping"] = stopper.state()
    elif prepared.state.get("stopping"):
        state["stopping"] = prepared.state["stopping"]
    storage.write_text(_join(prepared.ckpt_dir, STATE_NAME), json.dumps(state, indent=1))


def _summary(run: _Run, fit: _Fit, step: int, train_seconds: float) -> TrainingSummary:
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


def _stopping_record(run: _Run, fit: _Fit, step: int) -> dict[str, Any]:
    """Where the training ended and why, and the best evaluation (``TrainingSummary.stopping``)."""
    stopped = _stopped_early(fit)
    stopper = fit.stopper
    record: dict[str, Any] = {
        "step": step,
        "planned_steps": run.total_steps,
        "reason": stopped[0] if stopped else "completed",
        "patience": stopper.patience if stopper is not None else None,
    }
    if budget_lib.is_set(run.config.stop_at):
        record["stop_at"] = run.config.stop_at  # where this process was to stop (a search's rung)
    if stopper is not None and stopper.best_step is not None:
        record.update(monitor=stopper.monitor, best=stopper.best, best_step=stopper.best_step)
    return record


def _effective_config(run: _Run) -> TrainConfig:
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
        **({} if config.has_budget else {"epochs": settings.epochs}),
    }
    effective = config.replace(**{k: v for k, v in resolved.items() if getattr(config, k) in (None, "auto")})
    if prepared.fit is not None:
        effective = effective.replace(model_options=prepared.task.options.to_dict())
    return effective


def _export(model: Any, run: _Run, summary: TrainingSummary) -> TrainingSummary:
    """The SavedModel and the Keras file, then (the chief only) the config, the card and the summary.

    Written into the run's ``out_dir``: the model folder, or a worker's scratch folder.

    Returns:
        The summary, with the time the step took in all where it had a budget.
    """
    gfile = _gfile()
    model_dir, prepared = run.out_dir, run.prepared
    saved = model_folder.saved_model_dir(model_dir)
    if gfile.exists(saved):
        # A previous run died during export (training.json is written last): start it over.
        gfile.rmtree(saved)
    # Every worker of a set saves (saving may run collectives); the others into their scratch folder.
    export_started = time.perf_counter()
    prepared.task.export(model, saved, prepared.info)
    model.save(_join(model_dir, model_folder.KERAS_MODEL))
    preset = prepared.task.save_preset(model, model_folder.preset_dir(model_dir))
    if not run.chief:
        return summary
    if preset is not None:
        log.info("saved a keras-hub preset to %s (model_options.weights can start from it)", preset)
    if run.deadline is not None and summary.budget is not None:
        took = _actual(run, summary.budget, time.perf_counter() - export_started)
        summary = dataclasses.replace(summary, budget=took)
        log.info("budget: %s", budget_lib.budget_line(summary.budget))
    storage.write_text(_join(model_dir, model_folder.CONFIG), _effective_config(run).to_yaml())
    storage.write_text(_join(model_dir, model_folder.MODEL_CARD), model_card(summary, prepared.info, prepared.task))
    storage.write_text(model_folder.summary_path(model_dir), json.dumps(summary.to_dict(), indent=1))
    return summary


def _actual(run: _Run, plan: Mapping[str, Any], export_s: float) -> dict[str, Any]:
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
        *([f"- budget: {budget_lib.budget_line(summary.budget)}"] if summary.budget else []),
        *([f"- stopping: {budget_lib.stopping_line(summary.stopping)}"] if summary.stopping else []),
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
