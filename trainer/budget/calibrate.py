"""The budget's calibration: real steps of the compiled model timed, then undone.

The training runs a few executions of its own compiled step on its own input (the first one
traces and compiles, which the training would pay anyway: the traced function is kept), times the
steady ones, times one evaluation as the epochs run it, and puts the weights and the optimizer
back as they were: the training then starts from step 0 with its schedule laid out over the
steps the budget buys (``trainer.budget``).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics
import time
from collections.abc import Callable
from typing import Any, Optional

import keras

log = logging.getLogger(__name__)

# Timed steps: as many as fill this many seconds, within these bounds.
TIMED_SECONDS = 2.0
MIN_TIMED_STEPS = 8
MAX_TIMED_STEPS = 200
# The export is traced and written like the serving functions of the first evaluation: kept at
# this multiple of that compile time, at least EXPORT_FLOOR_S.
EXPORT_FACTOR = 1.5
EXPORT_FLOOR_S = 3.0


@dataclasses.dataclass(frozen=True)
class Timing:
    """What the calibration measured.

    Attributes:
        step_s: seconds of one optimizer step, steady state (the median execution).
        eval_s: the fixed seconds of one evaluation interval: the evaluation (0 without
            validation) and a fresh pass's start over the training input.
        export_s: the seconds to keep for the export.
        seconds: what the calibration took in all.
    """

    step_s: float
    eval_s: float
    export_s: float
    seconds: float


class _Clock(keras.callbacks.Callback):
    """Notes when each execution ends."""

    def __init__(self) -> None:
        super().__init__()
        self.ends: list[float] = []

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self.ends.append(time.perf_counter())


def _snapshot(model: Any) -> tuple[list[Any], list[Any]]:
    optimizer = model.optimizer
    return [v.numpy() for v in model.variables], [v.numpy() for v in optimizer.variables]


def _put_back(model: Any, saved: tuple[list[Any], list[Any]]) -> None:
    weights, slots = saved
    for variable, value in zip(model.variables, weights, strict=True):
        variable.assign(value)
    for variable, value in zip(model.optimizer.variables, slots, strict=True):
        variable.assign(value)


def _timed_fit(model: Any, train_ds: Any, steps: int) -> list[float]:
    """Seconds of each execution of a ``fit`` of ``steps`` steps (the first includes the iterator's start)."""
    clock = _Clock()
    started = time.perf_counter()
    model.fit(train_ds, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[clock])
    ends = [started, *clock.ends]
    return [b - a for a, b in zip(ends, ends[1:], strict=False)]


def measure(
    model: Any, train_ds: Any, steps_per_execution: int, evaluate: Optional[Callable[[], None]] = None
) -> Timing:
    """Times the compiled model's steps (then undone) and one evaluation.

    Args:
        model: the compiled model (its optimizer built).
        train_ds: the training input.
        steps_per_execution: steps per execution of the compiled step.
        evaluate: one evaluation as the epochs run it; None without validation.
    """
    started = time.perf_counter()
    step_s = time_steps(model, train_ds, steps_per_execution)
    eval_s, compile_s = 0.0, 0.0
    if evaluate is not None:
        once = _seconds(evaluate)  # traces the evaluation's functions (kept for the epochs)
        eval_s = _seconds(evaluate)
        compile_s = max(once - eval_s, 0.0)
    # Each interval starts a fresh pass over the input (one ``fit`` per interval): its shuffle
    # buffer fills again before the first step. An interval's fixed cost, with the evaluation.
    eval_s += restart_s(train_ds)
    export_s = max(EXPORT_FLOOR_S, EXPORT_FACTOR * compile_s)
    seconds = time.perf_counter() - started
    log.info(
        "calibration: %.1f ms/step, evaluation %.2fs (its first, compiling, %.2fs); %.1fs in all",
        1000 * step_s, eval_s, eval_s + compile_s, seconds,
    )  # fmt: skip
    return Timing(step_s, eval_s, export_s, seconds)


def restart_s(dataset: Any) -> float:
    """Seconds from a fresh iterator over ``dataset`` to its first batch (the shuffle buffer's fill)."""
    started = time.perf_counter()
    next(iter(dataset))
    return time.perf_counter() - started


def _seconds(work: Callable[[], None]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


# ---------------------------------------------------------------------------------------------
# Precision by measurement, remembered per device and model.
# ---------------------------------------------------------------------------------------------

PRECISION_CACHE = "precision.json"
# Another policy replaces the rule's only when faster by more than this share (the timing's noise).
NOISE = 0.03


@dataclasses.dataclass(frozen=True)
class PrecisionMeasurement:
    """What timing the candidate policies found.

    Attributes:
        chosen: the faster policy (the rule's unless another beat it beyond ``NOISE``).
        step_s: seconds per step of each policy timed.
        cached: whether the figures come from an earlier run on this device.
    """

    chosen: str
    step_s: dict[str, float]
    cached: bool = False

    def reason(self) -> str:
        """The choice in words, for ``training.json``'s ``precision_reason`` and the model card."""
        times = ", ".join(f"{p} {1000 * s:.1f} ms/step" for p, s in self.step_s.items())
        where = " (measured on this device before)" if self.cached else ""
        return f"measured at the fitted size and batch: {times}; kept the faster{where}"


def choose(step_s: dict[str, float]) -> str:
    """The policy to train in: the first (the rule's) unless another is faster beyond the noise."""
    first, *others = step_s
    best = min(others, key=step_s.__getitem__, default=first)
    return best if step_s[best] < (1 - NOISE) * step_s[first] else first


def device_name(kind: str, cpuinfo_path: str = "/proc/cpuinfo") -> str:
    """What identifies this device's speed: the CPU's model and flags, or the GPU's name."""
    if kind == "gpu":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        details = tf.config.experimental.get_device_details(gpus[0]) if gpus else {}
        return f"gpu {details.get('device_name', 'unknown')} x{len(gpus)}"
    try:
        with open(cpuinfo_path) as f:
            text = f.read()
    except OSError:
        return "cpu unknown"
    fields = dict(
        (k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in text.split("\n\n")[0].splitlines())
    )
    return f"cpu {fields.get('model name', '')} {fields.get('flags', '')}"


def precision_key(device: str, **settings: Any) -> str:
    """The cache key of a measurement: the device and every setting that changes a step's speed."""
    import hashlib
    import json

    blob = json.dumps({"device": device, **settings}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _cache_path() -> str:
    """The machine's precision measurements: ``LTP_PRECISION_CACHE``, else ``precision.json`` in the cache root."""
    import os

    from trainer import storage

    return os.environ.get("LTP_PRECISION_CACHE") or storage.join(storage.cache_root(), PRECISION_CACHE)


def cached_precision(key: str) -> Optional[PrecisionMeasurement]:
    """The measurement kept for ``key`` on this machine, or None (none, or an unreadable cache)."""
    import json

    try:
        with open(_cache_path()) as f:
            entry = json.load(f).get(key)
        return PrecisionMeasurement(entry["chosen"], dict(entry["step_s"]), cached=True) if entry else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def keep_precision(key: str, measurement: PrecisionMeasurement) -> None:
    """Remembers a measurement on this machine (best effort: a read-only home only loses the cache)."""
    import json
    import os
    import tempfile

    path = _cache_path()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            with open(path) as f:
                table = json.load(f)
        except (OSError, ValueError):
            table = {}
        table[key] = {"chosen": measurement.chosen, "step_s": measurement.step_s}
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".precision.")
        with os.fdopen(fd, "w") as f:
            json.dump(table, f, indent=1)
        os.replace(tmp, path)
    except OSError as err:
        log.warning("could not keep the precision measurement in %s: %s", path, err)


def time_steps(model: Any, train_ds: Any, steps_per_execution: int) -> float:
    """Seconds per step of the compiled model, steady state: a few executions traced and timed, then undone.

    The first execution traces and compiles (the traced step is kept for the training); then as
    many steps as fill ``TIMED_SECONDS`` are timed; the median execution counts.
    """
    saved = _snapshot(model)
    spe = max(1, steps_per_execution)
    first = _timed_fit(model, train_ds, 2 * spe)
    rough = max(first[-1] / spe, 1e-4)
    timed = -(-max(MIN_TIMED_STEPS, min(MAX_TIMED_STEPS, math.ceil(TIMED_SECONDS / rough))) // spe) * spe
    executions = _timed_fit(model, train_ds, timed)
    _put_back(model, saved)
    return statistics.median(executions[1:] or executions) / spe
