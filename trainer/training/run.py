"""A training's state: what one ``train()`` call knows and decides, and ``state.json`` beside its checkpoints.

Every step of :func:`trainer.train.train` after the checks takes a :class:`Run` and returns a new
one with what it decided (the fitted task, the budget's plan, the precision measured); the epochs
fit with a :class:`Fit`. ``state.json`` keeps what a restarted process needs: the fingerprints
that tie the checkpoints to this training, the history, the budget's plan and clock, and early
stopping's best.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

from trainer import storage
from trainer.budget import layout
from trainer.config import TrainConfig
from trainer.tasks import Task
from trainer.tfrecords import DatasetInfo

if TYPE_CHECKING:
    from trainer.multiworker import WorkerRole

STATE_NAME = "state.json"


def gfile():
    """TensorFlow's file API (local and gs://), imported when first needed."""
    import tensorflow as tf

    return tf.io.gfile


@dataclasses.dataclass(frozen=True)
class Prepared:
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
class Settings:
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
class Run:
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
    prepared: Prepared
    settings: Settings
    strategy: Any
    role: Optional[WorkerRole] = None
    plan: Optional[layout.BudgetPlan] = None
    deadline: Optional[layout.Deadline] = None
    stop: Optional[layout.Deadline] = None

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
        """The optimizer steps of the whole training (a budget's plan: its last interval may be longer or shorter)."""
        return self.plan.steps if self.plan is not None else self.settings.epochs * self.settings.steps_per_epoch


@dataclasses.dataclass(frozen=True)
class Fit:
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


def write_state(run: Run, history: list[dict[str, Any]], fit: Optional[Fit] = None) -> None:
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
    storage.write_text(storage.join(prepared.ckpt_dir, STATE_NAME), json.dumps(state, indent=1))
