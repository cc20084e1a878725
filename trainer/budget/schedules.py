"""Learning-rate schedules whose length is fixed after the model is compiled.

A time budget knows its steps only once the compiled step has been timed; recompiling then would
cost what the calibration measured. :class:`WarmupCosine` keeps its total in a variable that the
traced training step reads, so :func:`set_total_steps` changes it without a retrace.

The schedule is a function of the step alone, for a total laid out once: a run stopped at any
step (a budget's guard, early stopping, a search's rung) took exactly the first steps of the
whole run, and one resumed from its checkpoint goes on as if it had not stopped.
"""

from __future__ import annotations

import math
from typing import Any

import keras


@keras.saving.register_keras_serializable(package="lean_tpu")
class WarmupCosine(keras.optimizers.schedules.LearningRateSchedule):
    """A linear warm-up from 0 to ``peak`` over ``warmup_steps``, then a cosine to 0 at ``total_steps``.

    The warm-up is at most a quarter of the total.

    Args:
        peak: the learning rate at the end of the warm-up.
        warmup_steps: the warm-up's steps (capped at a quarter of the total).
        total_steps: the schedule's steps (changed later with :meth:`set_total`).
    """

    def __init__(self, peak: float, warmup_steps: int, total_steps: int) -> None:
        self.peak = float(peak)
        self.warmup_steps = int(warmup_steps)
        self._total = keras.Variable(float(max(1, total_steps)), trainable=False, dtype="float32", name="total_steps")

    @property
    def total_steps(self) -> int:
        """The schedule's steps."""
        return int(self._total.numpy())

    def set_total(self, total_steps: int) -> None:
        """Lays the schedule out over ``total_steps`` (read by the traced step: no recompilation)."""
        self._total.assign(float(max(1, total_steps)))

    def __call__(self, step: Any) -> Any:
        ops = keras.ops
        step = ops.cast(step, "float32")
        total = ops.convert_to_tensor(self._total)
        warmup = ops.minimum(float(max(1, self.warmup_steps)), ops.maximum(1.0, ops.floor(total / 4.0)))
        rising = self.peak * step / warmup
        progress = ops.clip((step - warmup) / ops.maximum(total - warmup, 1.0), 0.0, 1.0)
        falling = 0.5 * self.peak * (1.0 + ops.cos(math.pi * progress))
        return ops.where(step < warmup, rising, falling)

    def get_config(self) -> dict[str, Any]:
        return {"peak": self.peak, "warmup_steps": self.warmup_steps, "total_steps": self.total_steps}


def set_total_steps(optimizer: Any, total_steps: int) -> bool:
    """Lays the optimizer's schedule out over ``total_steps``, when it has one that can be; True if it had.

    A loss-scaling wrapper (``mixed_float16``) is looked through.
    """
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    schedule = getattr(inner, "_learning_rate", None)
    if isinstance(schedule, WarmupCosine):
        schedule.set_total(total_steps)
        return True
    return False
