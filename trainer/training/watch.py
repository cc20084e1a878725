"""Watching a training's epochs: the task's validation scoring, early stopping with the best
weights kept, the budget's guard and a rung's stop, and the progress.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from typing import Any, Optional

from trainer import storage
from trainer.budget import limits
from trainer.training.run import Fit, Run

log = logging.getLogger(__name__)

# The progress's last line, by why the training ended early.
# The progress's last line, by why the training ended early.
STOP_NOTES = {
    "early stopping": "stopped early",
    limits.BUDGET_SPENT: "budget spent",
    limits.RUNG_STOP: "stopped at the rung's budget",
}


def watch(run: Run, fit: Fit, on_progress: Optional[Callable[..., None]] = None) -> Fit:
    """The fit with what watches the epochs: the task's validation scoring, early stopping, the
    budget's guard, and the progress (last: it reports the figures the others put in the logs).
    """
    from trainer import callbacks, multiworker
    from trainer.budget import stopping

    watchers: list[Any] = []
    stopper = None
    patience = limits.resolve_patience(run.config.limits.patience, run.settings.epochs)
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
    stop_step = run.config.limits.stop_step
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


def _time_left(run: Run) -> Optional[Callable[[], float]]:
    """The seconds this process has left to train (its budget's, or its stop's where sooner); None: no budget."""
    deadline, stop = run.deadline, run.stop
    if deadline is None:
        return None
    if stop is None:
        return lambda: max(deadline.left_s(), 0.0)
    return lambda: max(min(deadline.left_s(), stop.left_s()), 0.0)


def stopped_early(fit: Fit) -> Optional[tuple[str, int]]:
    """(why, at which step) the training ended before its last step; None: it did not.

    Why: ``early stopping``, ``budget`` (the budget spent) or ``rung stop`` (``stop_at`` reached).
    """
    from trainer.budget import stopping

    for callback in fit.callbacks:
        if isinstance(callback, stopping.EarlyStopping) and callback.stopped_at is not None:
            return "early stopping", callback.stopped_at
        if isinstance(callback, stopping.BudgetGuard) and callback.stopped_at is not None:
            return callback.reason or limits.BUDGET_SPENT, callback.stopped_at
    return None


def _best_prefix(run: Run) -> str:
    return storage.join(run.prepared.ckpt_dir, "best", "weights")


def _save_best(run: Run, model: Any, step: int) -> None:
    """Keeps the weights of a new best evaluation (the chief's folder; the export restores them)."""
    import tensorflow as tf

    if run.chief:
        tf.train.Checkpoint(model=model).write(_best_prefix(run))


def restore_best(run: Run, fit: Fit, step: int) -> None:
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
