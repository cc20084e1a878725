"""The training loop's Keras callbacks: divergence guard, checkpoints, throughput, TensorBoard scalars.

Imported by ``trainer.train`` once TensorFlow is needed (this module imports Keras at the top).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import Any

import keras

from trainer.errors import TrainingDivergedError

log = logging.getLogger(__name__)

# A loss this many times the first one seen is treated as diverged.
EXPLODE_FACTOR = 1e4


def optimizer_step(optimizer: Any) -> int:
    """The optimizer's step count (the training step), as a Python int."""
    # .numpy() rather than int(): under MirroredStrategy/TPUStrategy the variable is distributed.
    return int(optimizer.iterations.numpy())


class DivergenceGuard(keras.callbacks.Callback):
    """Stops training with an error when the loss is NaN/inf or explodes."""

    def __init__(self) -> None:
        super().__init__()
        self.first: float | None = None

    def _check(self, logs: Mapping[str, Any] | None, where: str) -> None:
        if not logs or "loss" not in logs:
            return
        loss = float(logs["loss"])
        step = optimizer_step(self.model.optimizer)
        if not math.isfinite(loss):
            raise TrainingDivergedError(
                f"the training loss became {loss} at step {step} ({where}); nothing was exported. "
                "Lower train.learning_rate, check the data (labels in range, images in [0, 1]), or try "
                "precision: float32"
            )
        if self.first is None:
            self.first = max(loss, 1e-3)
        elif loss > EXPLODE_FACTOR * self.first:
            raise TrainingDivergedError(
                f"the training loss exploded to {loss:.4g} at step {step} ({where}), from {self.first:.4g} at "
                "the start; nothing was exported. Lower train.learning_rate"
            )

    def on_train_batch_end(self, batch, logs=None):
        self._check(logs, f"batch {batch}")

    def on_epoch_end(self, epoch, logs=None):
        self._check(logs, f"end of epoch {epoch + 1}")


class Checkpointer(keras.callbacks.Callback):
    """Saves a checkpoint every N steps and/or seconds."""

    def __init__(self, manager, every_steps: int, every_seconds: float | None) -> None:
        super().__init__()
        self.manager = manager
        self.every_steps = every_steps
        self.every_seconds = every_seconds
        self.last_step = 0
        self.last_time = time.monotonic()

    def save(self, step: int) -> None:
        self.manager.save(checkpoint_number=step)
        self.last_step, self.last_time = step, time.monotonic()
        log.debug("checkpoint at step %d", step)

    def on_train_begin(self, logs=None):
        self.last_step = optimizer_step(self.model.optimizer)
        self.last_time = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        step = optimizer_step(self.model.optimizer)
        due = step - self.last_step >= self.every_steps
        if self.every_seconds is not None:
            due = due or time.monotonic() - self.last_time >= self.every_seconds
        if due and step > self.last_step:
            self.save(step)


class Throughput(keras.callbacks.Callback):
    """Training images/s the way the GPU-vs-TPU notebook counts: epoch time, first epoch excluded.

    An epoch's time runs from its start to its last training step (validation excluded). The
    first epoch of a process carries the tracing/compilation; it is left out when there are
    later ones. With a single epoch, the time from its first step end (after tracing) to its
    last is used, or the whole epoch if it ran a single execution.
    """

    def __init__(self, global_batch: int) -> None:
        super().__init__()
        self.global_batch = global_batch
        self.epochs: list[tuple[float, int]] = []  # (seconds, steps) per epoch
        self.steady: tuple[float, int] | None = None  # first epoch after its first step end

    def _now(self) -> tuple[float, int]:
        return time.perf_counter(), optimizer_step(self.model.optimizer)

    def on_epoch_begin(self, epoch, logs=None):
        self._begin = self._now()
        self._first = self._last = None

    def on_train_batch_end(self, batch, logs=None):
        self._last = self._now()
        if self._first is None:
            self._first = self._last

    def on_epoch_end(self, epoch, logs=None):
        if self._last is None:
            return
        if not self.epochs and self._last[1] > self._first[1]:
            self.steady = (self._last[0] - self._first[0], self._last[1] - self._first[1])
        self.epochs.append((self._last[0] - self._begin[0], self._last[1] - self._begin[1]))

    @property
    def epoch_seconds(self) -> list[float]:
        """Each epoch's time in this process (start to last training step), the compiling first one included."""
        return [seconds for seconds, _ in self.epochs]

    @property
    def images_per_sec(self) -> float | None:
        timed = self.epochs[1:] or ([self.steady] if self.steady else self.epochs)
        seconds = sum(t for t, _ in timed)
        return sum(n for _, n in timed) * self.global_batch / seconds if seconds > 0 else None


class ScalarLogger(keras.callbacks.Callback):
    """TensorBoard scalars (losses, metrics, images/s) per epoch, under ``logs/train``.

    Written with TensorFlow's own summary writer and the ``scalars`` plugin tag, so the event
    files open in TensorBoard without the ``tensorboard`` package installed in the training image
    (Keras' TensorBoard callback needs it just to write).
    """

    def __init__(self, log_dir: str, meter: Any) -> None:
        super().__init__()
        import tensorflow as tf
        from tensorflow.core.framework import summary_pb2

        self.tf = tf
        self.writer = tf.summary.create_file_writer(log_dir)
        self.metadata = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
        )
        self.meter = meter

    def write(self, values: Mapping[str, float], step: int) -> None:
        with self.writer.as_default():
            for tag, value in values.items():
                self.tf.summary.write(
                    tag, self.tf.constant(float(value), self.tf.float32), step=step, metadata=self.metadata
                )
        self.writer.flush()

    def on_epoch_end(self, epoch, logs=None):
        values = {f"epoch_{k}": v for k, v in (logs or {}).items() if isinstance(v, (int, float))}
        if self.meter.images_per_sec:
            values["images_per_sec"] = self.meter.images_per_sec
        self.write(values, epoch + 1)
