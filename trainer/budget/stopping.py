"""What ends a training before its last step: the budget's guard (the budget spent, or a search
rung's stop reached) and early stopping (Keras callbacks).

Both set ``model.stop_training``; the epoch loops of ``trainer.train`` and ``trainer.multiworker``
end there. Their state lives across the loop's ``model.fit`` calls (one per evaluation interval),
unlike Keras' own ``EarlyStopping``, which starts over with each ``fit``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any, Optional

import keras

from trainer.budget.limits import BUDGET_SPENT, RUNG_STOP
from trainer.callbacks import optimizer_step

log = logging.getLogger(__name__)


_REASONS = (None, BUDGET_SPENT, RUNG_STOP)  # a decision as a number, for the workers' all-reduce


class BudgetGuard(keras.callbacks.Callback):
    """Stops the training once what is left of the budget, or of the time to its stop (a search's
    rung, ``TrainConfig.stop_at``), is what the last validation and the export need.

    Args:
        left_s: seconds left of the budget (``trainer.budget.Deadline.left_s``).
        reserve_s: the seconds kept for the last validation and the export.
        stop_left_s: seconds left until the stop (the ``left_s`` of the budget's deadline at
            ``stop_at``, ``trainer.budget.Deadline.with_limit``); None: no stop before the budget.

    Attributes:
        stopped_at: the optimizer's step it stopped at; None: it did not stop the training.
        reason: why: ``BUDGET_SPENT`` or ``RUNG_STOP`` (``trainer.budget``); None: it did not stop the training.
    """

    def __init__(
        self, left_s: Callable[[], float], reserve_s: float, stop_left_s: Optional[Callable[[], float]] = None
    ) -> None:
        super().__init__()
        self.left_s, self.reserve_s, self.stop_left_s = left_s, reserve_s, stop_left_s
        self.stopped_at: Optional[int] = None
        self.reason: Optional[str] = None

    def due(self) -> Optional[str]:
        """Why the training should stop now (``BUDGET_SPENT``, ``RUNG_STOP``); None: not yet."""
        budget_left = self.left_s()
        stop_left = self.stop_left_s() if self.stop_left_s is not None else math.inf
        if min(budget_left, stop_left) > self.reserve_s:
            return None
        # The tighter limit names it; where both end together (stop_at is the budget) the budget is spent.
        return RUNG_STOP if stop_left < budget_left else BUDGET_SPENT

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.stopped_at is None:
            reason = self.due()
            if reason is not None:
                self._stop(reason, "")

    def _stop(self, reason: str, whose: str) -> None:
        self.stopped_at, self.reason = optimizer_step(self.model.optimizer), reason
        self.model.stop_training = True
        what = "the rung's stop (stop_at) reached" if reason == RUNG_STOP else "budget spent"
        log.info("%s at step %d%s: stopping (the last validation and the export remain)", what, self.stopped_at, whose)


class SharedBudgetGuard(BudgetGuard):
    """The budget's guard for a set of workers: every ``every`` steps the chief's clock decides, and
    every worker takes its decision (``decide``: an all-reduce in which the chief alone counts), so
    all stop at the same step, for the same reason.

    Args:
        left_s: seconds left of the budget (meaningful on the chief).
        reserve_s: the seconds kept for the last validation and the export.
        decide: ``[value] -> [the chief's value]`` on every worker (``trainer.multiworker.from_chief``).
        every: batches between two decisions.
        stop_left_s: seconds left until the stop (meaningful on the chief); None: no stop before the budget.
    """

    def __init__(
        self,
        left_s: Callable[[], float],
        reserve_s: float,
        decide: Callable,
        every: int = 8,
        stop_left_s: Optional[Callable[[], float]] = None,
    ) -> None:
        super().__init__(left_s, reserve_s, stop_left_s)
        self.decide, self.every = decide, every

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.stopped_at is not None or (batch + 1) % self.every:
            return
        decided = _REASONS[int(round(self.decide([float(_REASONS.index(self.due()))])[0]))]
        if decided is not None:
            self._stop(decided, " (the chief's clock)")


class StepStop(BudgetGuard):
    """Stops this process at an optimizer step (``TrainConfig.stop_at`` in steps, a search's rung),
    the last validation and the export after it. Every worker of a set counts the same steps, so
    each stops at the same one on its own.

    Args:
        step: the step to stop at (at the first batch end at or past it, with several steps per execution).
    """

    def __init__(self, step: int) -> None:
        super().__init__(lambda: math.inf, 0.0)
        self.step = step

    def due(self) -> Optional[str]:
        return RUNG_STOP if optimizer_step(self.model.optimizer) >= self.step else None


class EarlyStopping(keras.callbacks.Callback):
    """Watches a figure of the epoch logs, keeps the best weights, stops after ``patience`` evaluations in vain.

    Args:
        monitor: the key of the epoch logs (``val_accuracy``, ``val_ap``, ``val_loss``).
        higher_is_better: the figure's direction.
        patience: evaluations without improvement that stop the training; None never stops (the
            best weights are still kept).
        on_best: called with the step of each new best (the trainer saves the weights there).
        best: the best value of an earlier process of this training (a resumed run), or None.
        best_step: its step.
        wait: evaluations since that best.
        min_delta: an improvement smaller than this does not count.
    """

    def __init__(
        self,
        monitor: str,
        higher_is_better: bool,
        patience: Optional[int],
        on_best: Callable[[int], None],
        best: Optional[float] = None,
        best_step: Optional[int] = None,
        wait: int = 0,
        min_delta: float = 0.0,
    ) -> None:
        super().__init__()
        self.monitor, self.higher_is_better, self.patience = monitor, higher_is_better, patience
        self.on_best, self.best, self.best_step, self.wait, self.min_delta = on_best, best, best_step, wait, min_delta
        self.stopped_at: Optional[int] = None

    def improves(self, value: float) -> bool:
        """Whether ``value`` beats the best so far by more than ``min_delta``."""
        if self.best is None:
            return True
        return value > self.best + self.min_delta if self.higher_is_better else value < self.best - self.min_delta

    def on_epoch_end(self, epoch: int, logs: Optional[dict[str, Any]] = None) -> None:
        value = (logs or {}).get(self.monitor)
        if value is None or not math.isfinite(float(value)):
            return
        step = optimizer_step(self.model.optimizer)
        if self.improves(float(value)):
            self.best, self.best_step, self.wait = float(value), step, 0
            self.on_best(step)
            return
        self.wait += 1
        if self.patience is not None and self.wait >= self.patience and self.stopped_at is None:
            self.stopped_at = step
            self.model.stop_training = True
            log.info(
                "early stop at step %d: %s has not improved for %d evaluations (best %.4g at step %d)",
                step, self.monitor, self.wait, self.best, self.best_step,
            )  # fmt: skip

    def state(self) -> dict[str, Any]:
        """What a resumed run needs to go on watching (kept in ``state.json``)."""
        return {"monitor": self.monitor, "best": self.best, "best_step": self.best_step, "wait": self.wait}
