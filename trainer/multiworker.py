"""Training under ``MultiWorkerMirroredStrategy``: one worker's part of a training across processes or pods.

Keras 3's ``fit`` fails under this strategy with TensorFlow 2.21 ("Attempt to convert a value
(PerReplica ...) to a Tensor" while it builds the model, keras-team/keras#20585, then again when it
reduces the step's logs), and so do several steps per execution (keras-team/keras#19246). So the
epochs run in :func:`run_epochs`, a loop of our own: each step runs the model's own ``train_step``
(a ``GradientTape`` step with the task's compiled loss and metrics, the optimizer all-reducing the
gradients) under ``strategy.run``, then reads the metrics in cross-replica context, where their
per-replica sums are all-reduced: every worker sees the same loss and metrics, so the divergence
guard and the checkpoints decide alike on every worker and no worker waits alone in a collective.

The rest is ``trainer.train``'s, with the roles of :class:`WorkerRole`: every worker saves the
checkpoints and runs the export (saving may run collectives), the chief (worker 0) into the real
folders, the others into a temporary folder they delete; every worker restores from the chief's
checkpoints; only the chief writes ``state.json``, ``training.json`` and the model card.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any, Optional

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class WorkerRole:
    """One worker's place in the set, as ``trainer.train.train`` needs it.

    Attributes:
        strategy: the ``MultiWorkerMirroredStrategy``.
        index: this worker's index (0 is the chief).
        workers: how many workers the set has.
        scratch_dir: where a non-chief worker writes its checkpoints, logs and export (deleted at
            the end); ``None`` on the chief, which writes the real folders.
    """

    strategy: Any
    index: int
    workers: int
    scratch_dir: Optional[str] = None

    @property
    def chief(self) -> bool:
        """Whether this worker writes the model folder."""
        return self.index == 0


def multiworker_strategy(timeout_s: float) -> Any:
    """A ``MultiWorkerMirroredStrategy`` from ``TF_CONFIG``; a collective waits at most ``timeout_s``.

    The timeout makes a lost peer fail the survivors instead of leaving them waiting for ever.
    """
    import tensorflow as tf

    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=timeout_s)
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def apply_threads(environ: Optional[dict[str, str]] = None) -> None:
    """Sets intra-op threads from ``LTP_INTRA_OP_THREADS`` (the local launcher shares the cores)."""
    import tensorflow as tf

    raw = (os.environ if environ is None else environ).get("LTP_INTRA_OP_THREADS", "").strip()
    if raw:
        tf.config.threading.set_intra_op_parallelism_threads(int(raw))


# --------------------------------------------------------------------------- the epoch loop


def _step_functions(strategy: Any, model: Any, jit_compile: bool) -> tuple[Callable, Callable]:
    """The distributed train and validation steps; each returns the all-reduced metrics."""
    import tensorflow as tf

    # As Keras' own fit: the per-replica step compiled (XLA where asked), the strategy around it.
    train_one = tf.function(model.train_step, reduce_retracing=True, jit_compile=jit_compile)
    test_one = tf.function(model.test_step, reduce_retracing=True, jit_compile=jit_compile)

    @tf.function
    def train_step(iterator):
        strategy.run(train_one, args=(next(iterator),))
        # Cross-replica context: the metrics' per-replica sums are all-reduced over every worker.
        return model.get_metrics_result()

    @tf.function
    def test_step(iterator):
        strategy.run(test_one, args=(next(iterator),))
        return model.get_metrics_result()

    return train_step, test_step


def _all_layers(layer: Any) -> Iterator[Any]:
    yield layer
    for sub in getattr(layer, "layers", ()):
        yield from _all_layers(sub)


@contextlib.contextmanager
def synchronized_batch_norm(model: Any) -> Iterator[int]:
    """Batch normalization over the global batch while training (yields how many layers it set).

    Each replica would otherwise normalise with, and average into its moving statistics, the
    moments of its own share of the batch: the workers' moving statistics would drift apart, and
    neither would be one process's. Keras' ``synchronized`` all-reduces the moments instead; it is
    set back afterwards, so the saved model is configured as one process would save it.
    """
    import keras

    layers = [layer for layer in _all_layers(model) if isinstance(layer, keras.layers.BatchNormalization)]
    previous = [layer.synchronized for layer in layers]
    for layer in layers:
        layer.synchronized = True
    try:
        yield len(layers)
    finally:
        for layer, value in zip(layers, previous, strict=True):
            layer.synchronized = value


def _logs(values: dict[str, Any]) -> dict[str, float]:
    return {name: float(value) for name, value in values.items()}


def _validate(model: Any, test_step: Callable, val_ds: Any, val_steps: int) -> dict[str, float]:
    model.reset_metrics()
    iterator = iter(val_ds)
    logs: dict[str, float] = {}
    for _ in range(val_steps):
        logs = _logs(test_step(iterator))
    return {f"val_{name}": value for name, value in logs.items()}


def time_steps(fit: Any, strategy: Any, jit_compile: bool, steps: int, seconds: float) -> tuple[float, float]:
    """(seconds per step, an interval's fixed seconds) of this worker's distributed steps, the steps undone.

    The budget's calibration in a set of workers (Keras' ``fit`` cannot run here): one step
    traces, then at least ``steps`` steps are timed and as many more as fill ``seconds`` on the
    chief (their median); an interval's fixed cost is one validation (timed after a first that
    traces) and a fresh pass's start over the input. The weights and the optimizer are put back.
    """
    import statistics
    import time

    from trainer.budget.calibrate import _put_back, _snapshot

    model = fit.model
    saved = _snapshot(model)
    train_step, test_step = _step_functions(strategy, model, jit_compile)
    iterator = iter(strategy.experimental_distribute_dataset(fit.train_ds))
    with synchronized_batch_norm(model):
        _logs(train_step(iterator))  # traces
        times: list[float] = []
        # At least ``steps`` steps, as many as fill ``seconds``: the chief's count decides for all,
        # asked every ``steps`` steps.
        while len(times) < steps or (len(times) % steps or from_chief(strategy, [float(sum(times) < seconds)])[0]):
            started = time.perf_counter()
            _logs(train_step(iterator))
            times.append(time.perf_counter() - started)
        eval_s = 0.0
        if fit.val_ds is not None:
            val_ds = strategy.experimental_distribute_dataset(fit.val_ds)
            _validate(model, test_step, val_ds, fit.val_steps)  # traces
            started = time.perf_counter()
            _validate(model, test_step, val_ds, fit.val_steps)
            eval_s = time.perf_counter() - started
        started = time.perf_counter()
        next(iter(strategy.experimental_distribute_dataset(fit.train_ds)))  # an interval's fresh pass
        eval_s += time.perf_counter() - started
    _put_back(model, saved)
    model.reset_metrics()
    return statistics.median(times), eval_s


_FROM_CHIEF: dict[tuple[int, int], Callable] = {}


def from_chief(strategy: Any, values: list[float]) -> list[float]:
    """The chief's ``values`` on every worker (an all-reduce in which only the first replica of the
    set contributes): what the chief decides, every worker follows.

    The collective is one traced function per strategy and length, reused: an eager collective
    per call would build new ops (and threads) each time.
    """
    import tensorflow as tf

    key = (id(strategy), len(values))
    if key not in _FROM_CHIEF:

        def contribute(given):
            first = tf.distribute.get_replica_context().replica_id_in_sync_group == 0
            return tf.where(first, given, tf.zeros_like(given))

        @tf.function
        def broadcast(given):
            return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(contribute, args=(given,)), axis=None)

        _FROM_CHIEF[key] = broadcast
    return [float(v) for v in _FROM_CHIEF[key](tf.constant(values, tf.float64)).numpy()]


@dataclasses.dataclass(frozen=True)
class EpochPlan:
    """Which epochs to run and how.

    Attributes:
        epochs: the training's epochs.
        steps_per_epoch: steps per epoch.
        resumed_from: the step the restored checkpoint is at.
        jit_compile: XLA for the per-replica steps.
    """

    epochs: int
    steps_per_epoch: int
    resumed_from: int
    jit_compile: bool


def run_epochs(fit: Any, strategy: Any, plan: EpochPlan, on_epoch: Callable[[int, int, dict[str, float]], None]) -> int:
    """Trains the epochs not done yet with ``fit``'s model, inputs and callbacks (``trainer.train._Fit``).

    Each epoch starts a fresh pass over the input (as one ``model.fit`` per epoch does) and ends
    with the validation, a checkpoint and ``on_epoch(epoch, step, logs)``.

    Returns:
        The optimizer's step at the end.
    """
    import keras

    model = fit.model
    train_ds = strategy.experimental_distribute_dataset(fit.train_ds)
    val_ds = strategy.experimental_distribute_dataset(fit.val_ds) if fit.val_ds is not None else None
    train_step, test_step = _step_functions(strategy, model, plan.jit_compile)
    hooks = keras.callbacks.CallbackList(fit.callbacks, model=model)
    with synchronized_batch_norm(model):
        step = _epochs(fit, plan, hooks, (train_step, test_step), (train_ds, val_ds), on_epoch)
    return step


def _epochs(
    fit: Any,
    plan: EpochPlan,
    hooks: Any,
    steps: tuple[Callable, Callable],
    inputs: tuple[Any, Any],
    on_epoch: Callable[[int, int, dict[str, float]], None],
) -> int:
    from trainer import callbacks

    model, (train_step, test_step), (train_ds, val_ds) = fit.model, steps, inputs
    step = plan.resumed_from
    hooks.on_train_begin()
    model.stop_training = False
    for epoch in range(step // plan.steps_per_epoch, plan.epochs):
        remaining = (epoch + 1) * plan.steps_per_epoch - step
        if remaining <= 0:
            continue
        model.reset_metrics()
        hooks.on_epoch_begin(epoch)
        iterator = iter(train_ds)
        logs: dict[str, float] = {}
        for batch in range(remaining):
            hooks.on_train_batch_begin(batch)
            logs = _logs(train_step(iterator))
            hooks.on_train_batch_end(batch, logs)
            if model.stop_training:  # the budget's guard: every worker took the chief's decision
                break
        if val_ds is not None:
            logs.update(_validate(model, test_step, val_ds, fit.val_steps))
        hooks.on_epoch_end(epoch, logs)
        step = callbacks.optimizer_step(fit.optimizer)
        fit.saver.save(step)
        on_epoch(epoch, step, logs)
        if model.stop_training:  # early stopping: the figures are all-reduced, every worker stops alike
            break
    hooks.on_train_end()
    return step
