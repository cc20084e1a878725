"""The training loop's Keras callbacks: divergence guard, checkpoints, throughput, TensorBoard scalars,
live progress.

Imported by ``trainer.train`` once TensorFlow is needed (this module imports Keras at the top).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any, Optional

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


class TrainingProgress(keras.callbacks.Callback):
    """Reports the training's progress through ``on_progress(done, total, **fields)``, now and then.

    ``done`` is the optimizer's step and ``total`` the step at which training ends, so a resumed
    training and one fitted to the data (``epochs`` 0) count the same way; the fields are those of
    the progress-line protocol (``components/progress.py``): ``images_per_sec`` (over the steps
    since the last report), ``loss`` (the epoch's running training loss), ``metric`` and ``value``
    (the validation figure of the last epoch that measured one), ``eta_s`` and a ``note``.

    A report is due on the first batch (``note`` "calibrating": that step carries the tracing),
    then every ``every_s`` seconds, and at every epoch's end (with the validation figures). The
    optimizer's step is read only when a report is due: reading it waits for the device. Only
    ``on_train_batch_end`` and ``on_epoch_end`` are used, which both ``model.fit`` and the
    multi-worker loop's ``CallbackList`` call; the chief alone should get this callback.

    Args:
        on_progress: the callback (``components.progress.reporter``'s, with ``every_s=0``: this
            callback throttles itself and its epoch lines must not be dropped).
        total_steps: the optimizer step at which training ends (:meth:`set_total` changes it:
            a time budget fixes it once the step time is measured).
        global_batch: images per optimizer step (all replicas).
        start_step: the step the training resumed from (0 for a fresh start).
        every_s: the least time between two reports within an epoch.
        clock: seconds, monotonic (tests pass a fake one).
        deadline: seconds left of the training's time budget, or None when it has none or does
            not know yet; when it answers, the ETA is its answer.
        metric: the validation figure to report (``val_accuracy``); None, or a name the logs lack,
            reports the first ``val_*`` figure other than ``val_loss``, else ``val_loss``.
    """

    def __init__(
        self,
        on_progress: Callable[..., None],
        total_steps: int,
        global_batch: int,
        start_step: int = 0,
        every_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        deadline: Optional[Callable[[], Optional[float]]] = None,
        metric: Optional[str] = None,
    ) -> None:
        super().__init__()
        self.on_progress = on_progress
        self.total_steps = int(total_steps)
        self.global_batch = int(global_batch)
        self.every_s = every_s
        self.clock = clock
        self.deadline = deadline
        self.metric = metric
        self.step = int(start_step)
        # (time, step) of the first report (the rate excludes the first step's tracing) and the last.
        self._calibrated: Optional[tuple[float, int]] = None
        self._last: Optional[tuple[float, int]] = None
        self._images_per_sec: Optional[float] = None
        self._loss: Optional[float] = None
        self._validation: Optional[tuple[str, float]] = None

    def set_total(self, total_steps: int) -> None:
        """The step at which training now ends (a time budget's, once calibrated)."""
        self.total_steps = int(total_steps)

    def steps_per_sec(self) -> Optional[float]:
        """Steps per second since the first report (None before two reports at different steps)."""
        if self._calibrated is None or self._last is None:
            return None
        (t0, s0), (t1, s1) = self._calibrated, self._last
        return (s1 - s0) / (t1 - t0) if s1 > s0 and t1 > t0 else None

    def eta_s(self) -> Optional[float]:
        """Seconds left: the deadline's answer when it gives one, else the steps left at the rate so far."""
        if self.deadline is not None:
            left = self.deadline()
            if left is not None:
                return max(float(left), 0.0)
        rate = self.steps_per_sec()
        return None if rate is None else max(self.total_steps - self.step, 0) / rate

    def on_train_batch_end(self, batch, logs=None):
        now = self.clock()
        if self._last is not None and now - self._last[0] < self.every_s:
            return
        if logs and "loss" in logs:
            self._loss = logs["loss"]
        self._measure(now)
        self._report()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if "loss" in logs:
            self._loss = logs["loss"]
        validation = validation_figure(logs, self.metric)
        if validation is not None:
            self._validation = validation
        # The time since the last batch's report holds the validation: no figure of the training's speed.
        self._measure(self.clock(), throughput=False)
        self._report()

    def finish(self, step: int, note: str = "stopped early") -> None:
        """Reports the end of a training that stopped before ``total_steps`` (early stopping, a budget).

        Args:
            step: the optimizer step it stopped at; it becomes the total.
            note: why it stopped.
        """
        self.step = self.total_steps = int(step)
        self._report(note=note, eta_s=0.0)

    def _measure(self, now: float, throughput: bool = True) -> None:
        """Reads the optimizer's step and, with ``throughput``, the images per second since the last measurement."""
        step = optimizer_step(self.model.optimizer)
        if throughput and self._last is not None and now > self._last[0] and step > self._last[1]:
            self._images_per_sec = (step - self._last[1]) * self.global_batch / (now - self._last[0])
        if self._calibrated is None:
            self._calibrated = (now, step)
        self.step, self._last = step, (now, step)

    def _report(self, **override: Any) -> None:
        fields: dict[str, Any] = {"images_per_sec": self._images_per_sec, "loss": self._loss}
        if self._validation is not None:
            fields["metric"], fields["value"] = self._validation
        eta = self.eta_s()
        if eta is not None:
            fields["eta_s"] = eta
        elif self.step < self.total_steps:
            fields["note"] = "calibrating"
        fields.update(override)
        self.on_progress(self.step, max(self.total_steps, self.step), **_plain(fields))


def validation_figure(logs: Mapping[str, Any], metric: Optional[str] = None) -> Optional[tuple[str, float]]:
    """The validation figure of an epoch's logs: ``metric`` when the logs have it, else the first
    ``val_*`` figure other than ``val_loss``, else ``val_loss``; None when the epoch did not validate.
    """
    if metric is not None and metric in logs:
        return metric, logs[metric]
    names = [k for k in logs if k.startswith("val_") and k != "val_loss"]
    name = names[0] if names else ("val_loss" if "val_loss" in logs else None)
    return None if name is None else (name, logs[name])


def _plain(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The fields with the logs' scalars (NumPy, eager tensors) as Python floats; None left out."""
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if value is None:
            continue
        out[key] = value if isinstance(value, (str, float)) else float(value)
    return out
