"""What ends a training before its last step: the budget's guard and early stopping (Keras callbacks).

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

from trainer.callbacks import optimizer_step

log = logging.getLogger(__name__)


class BudgetGuard(keras.callbacks.Callback):
    """Stops the training once what is left of the budget is what the last validation and the export need.

    Args:
        left_s: seconds left of the budget (``trainer.budget.Deadline.left_s``).
        reserve_s: the seconds kept for the last validation and the export.
    """

    def __init__(self, left_s: Callable[[], float], reserve_s: float) -> None:
        super().__init__()
        self.left_s, self.reserve_s = left_s, reserve_s
        self.stopped_at: Optional[int] = None

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.stopped_at is None and self.left_s() <= self.reserve_s:
            self.stopped_at = optimizer_step(self.model.optimizer)
            self.model.stop_training = True
            log.info("budget spent at step %d: stopping (the last validation and the export remain)", self.stopped_at)


class SharedBudgetGuard(BudgetGuard):
    """The budget's guard for a set of workers: every ``every`` steps the chief's clock decides, and
    every worker takes its decision (``decide``: an all-reduce in which the chief alone counts), so
    all stop at the same step.

    Args:
        left_s: seconds left of the budget (meaningful on the chief).
        reserve_s: the seconds kept for the last validation and the export.
        decide: ``[value] -> [the chief's value]`` on every worker (``trainer.multiworker.from_chief``).
        every: batches between two decisions.
    """

    def __init__(self, left_s: Callable[[], float], reserve_s: float, decide: Callable, every: int = 8) -> None:
        super().__init__(left_s, reserve_s)
        self.decide, self.every = decide, every

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.stopped_at is not None or (batch + 1) % self.every:
            return
        if self.decide([1.0 if self.left_s() <= self.reserve_s else 0.0])[0] > 0.5:
            self.stopped_at = optimizer_step(self.model.optimizer)
            self.model.stop_training = True
            log.info("budget spent at step %d (the chief's clock): stopping", self.stopped_at)


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
