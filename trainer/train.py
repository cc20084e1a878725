"""Training: one Keras code path for TPU, GPU and CPU, with checkpoints, resume and export.

``train(dataset_dir, model_dir, config)`` checks everything it can before the first step (the
dataset's manifest and splits, batch sizes against the replicas, the model against the dataset's
image shape and classes, that the model folder is writable), then trains with ``model.fit``
under the accelerator's strategy and writes the model folder of docs/CONTRACTS.md:

    saved_model/  model.keras  config.yaml  model_card.md  checkpoints/  logs/  training.json

``training.json`` is written last: it marks a finished training. A re-run on a finished folder
returns it without training again; a re-run on a half-trained folder (a preempted TPU, a killed
pod) restores the last checkpoint and trains only the remaining steps, to the same final count.

This module is the loop; its parts are ``trainer.training``'s modules, one job each: ``checks``
(before TensorFlow), ``setup`` (strategy settings, the fit to the data, model, inputs),
``budgeting`` (the budget's clock, calibration and plan), ``watch`` (validation, early stopping,
the guard, progress), ``summary`` (``training.json``, the export, the model card) and ``run``
(the state they pass along, ``state.json``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Optional

from trainer import distribute
from trainer.budget import limits
from trainer.config import TrainConfig
from trainer.errors import TrainingError
from trainer.training.budgeting import cached_precision, lay_out_budget, replan, with_budget
from trainer.training.checks import check_role, prepare
from trainer.training.run import Fit, Run, write_state
from trainer.training.setup import build, fit_to_data, resolve_settings, start
from trainer.training.summary import TrainingSummary, export, summarize
from trainer.training.watch import STOP_NOTES, restore_best, stopped_early, watch

if TYPE_CHECKING:
    from trainer.multiworker import WorkerRole

log = logging.getLogger(__name__)

__all__ = ["TrainingError", "TrainingSummary", "train"]


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
            start (``trainer.budget.layout.process_started_at``), which counts the imports before this
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
    check_role(config, role)
    dataset_dir, model_dir = str(dataset_dir), str(model_dir)
    prepared = prepare(dataset_dir, model_dir, config, checkpoint_dir)
    if isinstance(prepared, TrainingSummary):
        return prepared
    strategy = role.strategy if role is not None else distribute.get_strategy(config.accelerator)
    settings = resolve_settings(config, prepared.info, strategy)
    run = fit_to_data(Run(dataset_dir, model_dir, config, prepared, settings, strategy, role))
    run = cached_precision(with_budget(run, time.time() if started_at is None else started_at))
    built = build(run)
    fit = start(run, built)
    report = on_progress if run.chief else None
    if run.deadline is not None and run.plan is None:
        if report is not None:
            report(fit.resumed_from, run.total_steps, note="calibrating")
        run, fit = lay_out_budget(run, fit)
        if report is not None:  # before the first step it buys: a person sees what it will spend
            report(fit.resumed_from, run.total_steps, plan=run.plan.headline())
    fit = watch(run, fit, report)
    started = time.perf_counter()
    run, step = _run_epochs(run, fit)
    train_seconds = time.perf_counter() - started
    stopped = stopped_early(fit)
    if step != run.total_steps and stopped is None:
        raise TrainingError(f"training ended at step {step}, expected {run.total_steps}; re-run to resume")
    if stopped is not None and fit.progress is not None:
        fit.progress.finish(step, STOP_NOTES.get(stopped[0], "stopped early"))
    restore_best(run, fit, step)
    summary = export(fit.model, run, summarize(run, fit, step, train_seconds))
    if stopped is not None and stopped[0] == limits.RUNG_STOP and run.chief:
        # The next rung's process counts this one's time from state.json: its export too.
        write_state(run, fit.history, fit)
    return summary


def _fit_epochs(run: Run, fit: Fit) -> tuple[Run, int]:
    """Fits the epochs not done yet, one ``model.fit`` each, saving a checkpoint and the history after each.

    A budget's plan is laid out again after each interval from its intervals as they ran
    (``budgeting.replan``).

    Returns:
        The run (with its plan as trained) and the optimizer's step at the end.
    """
    step = fit.resumed_from
    epoch, intervals = step // run.settings.steps_per_epoch, []
    while epoch < run.settings.epochs:
        last = epoch == run.settings.epochs - 1  # a budget's last interval takes what its plan has left
        remaining = (run.total_steps if last else (epoch + 1) * run.settings.steps_per_epoch) - step
        if remaining > 0:
            started = time.perf_counter()
            step = _fit_one_epoch(run, fit, epoch, remaining)
            if fit.model.stop_training:  # the budget's guard or early stopping
                break
            intervals.append(time.perf_counter() - started)
            run = replan(run, fit, intervals)
        epoch += 1
    return run, step


def _fit_one_epoch(run: Run, fit: Fit, epoch: int, remaining: int) -> int:
    """One ``model.fit`` of the epoch's ``remaining`` steps, then its checkpoint and history; the step after."""
    from trainer import callbacks

    if remaining % run.settings.steps_per_execution:
        # Keras runs whole executions only; checkpoints of this config always fall on them.
        raise TrainingError(
            f"the checkpoint at step {fit.resumed_from} is not on a multiple of steps_per_execution "
            f"({run.settings.steps_per_execution}); it was written with other settings. Train into a new "
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
    write_state(run, fit.history, fit)
    return step


def _run_epochs(run: Run, fit: Fit) -> tuple[Run, int]:
    """The epochs: ``model.fit`` in one process, the multi-worker loop in a worker of a set.

    Returns:
        The run (its plan as trained) and the optimizer's step at the end.
    """
    if run.role is None:
        return _fit_epochs(run, fit)
    from trainer import multiworker

    def on_epoch(epoch: int, step: int, logs: dict[str, float]) -> None:
        fit.history.append({"epoch": epoch + 1, "step": step, **logs})
        if run.chief:
            write_state(run, fit.history, fit)

    settings = run.settings
    plan = multiworker.EpochPlan(
        settings.epochs, settings.steps_per_epoch, fit.resumed_from, bool(settings.jit_compile)
    )
    return run, multiworker.run_epochs(fit, run.role.strategy, plan, on_epoch)
