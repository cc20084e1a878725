"""Timed inference and training sweeps (DESIGN.md section 5).

Inference: the case study's measurement, N images in batches of B through the exported
SavedModel, in process and through the model server's REST API. Warm-up batches run first and are
not timed; every batch is timed with ``time.perf_counter`` (monotonic); the result gives
images/s, per-batch latency percentiles and their spread.

Training: the GPU-vs-TPU notebook's sweep, the CNN trained with ``model.fit`` on in-memory arrays
at several batch sizes; the first (compiling) epoch is excluded from the averages.

The timing core (:func:`time_batches`, :func:`summarize`) is plain Python and NumPy;
TensorFlow is imported inside the functions that need it.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

import numpy as np


class BenchmarkError(ValueError):
    """A benchmark cannot run with these inputs; the message says why and how to fix it."""


@dataclasses.dataclass(frozen=True)
class TimingStats:
    """Timing of one benchmark run (warm-up excluded).

    Attributes:
        num_images: images timed.
        batch_size: images per batch (the last batch may be smaller).
        num_batches: batches timed.
        total_s: wall time of the timed batches, seconds.
        images_per_sec: ``num_images / total_s``.
        latency_ms: per-batch latency: ``p50``, ``p95``, ``p99``, ``mean``, ``std``, ``min``, ``max``.
        spread: coefficient of variation of the per-batch latency (std / mean).
        warmup_batches: batches run before timing.
        warmup_s: their wall time (the first one includes tracing/compilation).
        rounds: how often the timed batches were run; ``total_s`` is the median round's wall time
            and the latency percentiles pool every round (one short round is at the mercy of a
            noisy machine, the median of several is not).
    """

    num_images: int
    batch_size: int
    num_batches: int
    total_s: float
    images_per_sec: float
    latency_ms: dict[str, float]
    spread: float
    warmup_batches: int
    warmup_s: float
    rounds: int = 1

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TimingStats:
        """The inverse of :meth:`to_dict`; ints that JSON tooling turned into floats come back as ints.

        Raises:
            BenchmarkError: a field is missing or unknown.
        """
        values = _fields_of(cls, data, "timing statistics")
        values.update({k: _as_int(k, values[k]) for k in _TIMING_INTS if k in values})
        values["latency_ms"] = {str(k): float(v) for k, v in values["latency_ms"].items()}
        return cls(**values)


# TimingStats fields that are counts (kfp's dsl.Collected hands them back as floats).
_TIMING_INTS = ("num_images", "batch_size", "num_batches", "warmup_batches", "rounds")


def _as_int(name: str, value: Any) -> int:
    """An int from JSON data, where ``3.0`` (a count passed through kfp's ``dsl.Collected``) means 3."""
    if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
        raise BenchmarkError(f"{name}: expected an integer, got {value!r}")
    return int(value)


def _fields_of(cls: type, data: Mapping[str, Any], what: str) -> dict[str, Any]:
    """The mapping's entries for a dataclass; missing required fields and unknown keys are errors."""
    if not isinstance(data, Mapping):
        raise BenchmarkError(f"{what}: expected a mapping, got {type(data).__name__}: {str(data)[:200]}")
    fields = dataclasses.fields(cls)
    names = [f.name for f in fields]
    unknown = sorted(set(data) - set(names))
    required = [f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    missing = [n for n in required if n not in data]
    if unknown or missing:
        raise BenchmarkError(
            f"{what}: unknown keys {unknown} and missing keys {missing}; expected the keys {', '.join(names)} "
            f"(got {', '.join(map(str, data))})"
        )
    return dict(data)


def summarize(
    latencies_s: Sequence[float],
    images: int,
    batch_size: int,
    total_s: Optional[float] = None,
    warmup_batches: int = 0,
    warmup_s: float = 0.0,
    rounds: int = 1,
) -> TimingStats:
    """Turns per-batch latencies into throughput and percentiles.

    Args:
        latencies_s: seconds per timed batch, of every round.
        images: images in the timed batches of one round.
        batch_size: images per batch.
        total_s: wall time of one round of the timed loop; None uses the latencies' sum per round.
        warmup_batches: batches run before timing.
        warmup_s: their wall time.
        rounds: rounds the latencies cover.

    Returns:
        The statistics.

    Raises:
        BenchmarkError: no batches were timed.
    """
    lat = np.asarray(latencies_s, dtype=np.float64)
    if lat.size == 0:
        raise BenchmarkError("no batches were timed: num_images must be at least 1")
    total = float(lat.sum()) / rounds if total_s is None else float(total_s)
    ms = lat * 1000.0
    mean = float(ms.mean())
    return TimingStats(
        num_images=int(images),
        batch_size=int(batch_size),
        num_batches=int(lat.size) // rounds,
        total_s=total,
        images_per_sec=images / total if total > 0 else float("inf"),
        latency_ms={
            "p50": float(np.percentile(ms, 50)),
            "p95": float(np.percentile(ms, 95)),
            "p99": float(np.percentile(ms, 99)),
            "mean": mean,
            "std": float(ms.std()),
            "min": float(ms.min()),
            "max": float(ms.max()),
        },
        spread=float(ms.std() / mean) if mean > 0 else 0.0,
        warmup_batches=int(warmup_batches),
        warmup_s=float(warmup_s),
        rounds=int(rounds),
    )


def plan_batches(available: int, num_images: int, batch_size: int) -> list[tuple[int, int]]:
    """Index ranges of the timed batches, cycling over the available images when there are fewer.

    Args:
        available: how many distinct images there are.
        num_images: how many to time.
        batch_size: images per batch.

    Returns:
        ``(start, stop)`` index pairs into a list of ``available`` images repeated as needed; the
        last batch is smaller when ``batch_size`` does not divide ``num_images``.
    """
    if available < 1:
        raise BenchmarkError("no images to benchmark with: the dataset split is empty")
    if num_images < 1 or batch_size < 1:
        raise BenchmarkError(f"num_images and batch_size must be >= 1, got {num_images} and {batch_size}")
    return [(s, min(s + batch_size, num_images)) for s in range(0, num_images, batch_size)]


def cycle(items: Sequence[Any], count: int) -> list[Any]:
    """The first ``count`` items of ``items`` repeated end to end."""
    reps = -(-count // len(items))
    return (list(items) * reps)[:count]


def time_batches(
    run: Callable[[Any], Any],
    batches: Sequence[Any],
    sizes: Sequence[int],
    warmup: int,
    rounds: int = 1,
    on_batch: Optional[Callable[[], None]] = None,
) -> TimingStats:
    """Times ``run`` on each batch after ``warmup`` untimed calls on the first batches.

    Args:
        run: called with one prepared batch; must block until the result is ready (return
            NumPy, not a lazy tensor).
        batches: the prepared batches (tensors, request bodies): preparing is not timed.
        sizes: images in each batch.
        warmup: untimed calls first (cycling over the batches).
        rounds: run the timed batches this many times and report the median round.
        on_batch: called after each timed batch (progress; outside the timed interval).

    Returns:
        The statistics.
    """
    if rounds < 1:
        raise BenchmarkError(f"rounds must be >= 1, got {rounds}")
    start = time.perf_counter()
    for i in range(warmup):
        run(batches[i % len(batches)])
    warmup_s = time.perf_counter() - start
    latencies = []
    round_s = []
    for _ in range(rounds):
        loop_start = time.perf_counter()
        for batch in batches:
            t0 = time.perf_counter()
            run(batch)
            latencies.append(time.perf_counter() - t0)
            if on_batch is not None:
                on_batch()
        round_s.append(time.perf_counter() - loop_start)
    return summarize(latencies, sum(sizes), max(sizes), float(np.median(round_s)), warmup, warmup_s, rounds)


# --------------------------------------------------------------------------- inference


def benchmark_signature(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    input_name: str,
    num_images: int = 3200,
    batch_size: int = 64,
    warmup: int = 3,
    rounds: int = 3,
    on_batch: Optional[Callable[[], None]] = None,
) -> TimingStats:
    """Times a SavedModel signature (or any ``fn(**{input_name: batch})``) on batches of inputs.

    Args:
        fn: the concrete function, e.g. ``loaded.signatures["serving_default"]``.
        inputs: encoded images (bytes) for ``image_bytes``, or float arrays [H, W, C] for ``images``.
        input_name: the signature's input name.
        num_images: images to time (the inputs are cycled when there are fewer).
        batch_size: images per call.
        warmup: untimed calls first.
        rounds: timed rounds over all batches; the median round is reported.
        on_batch: called after each timed batch (progress).

    Returns:
        The statistics.
    """
    import tensorflow as tf

    plan = plan_batches(len(inputs), num_images, batch_size)
    items = cycle(inputs, num_images)
    if isinstance(items[0], bytes):
        batches = [tf.constant(items[a:b], dtype=tf.string) for a, b in plan]
    else:
        batches = [tf.constant(np.stack(items[a:b]), dtype=tf.float32) for a, b in plan]

    def run(batch):
        # .numpy() waits for the results: the call is timed to completion, not to dispatch. Every
        # output is fetched, whatever the task returns.
        return [out.numpy() for out in fn(**{input_name: batch}).values()]

    return time_batches(run, batches, [b - a for a, b in plan], warmup, rounds, on_batch)


def benchmark_keras_predict(
    model: Any,
    images: Sequence[np.ndarray],
    num_images: int = 3200,
    batch_size: int = 64,
    warmup: int = 3,
    rounds: int = 3,
) -> TimingStats:
    """Times ``model.predict`` on the same batches as :func:`benchmark_signature` (tensors path)."""
    plan = plan_batches(len(images), num_images, batch_size)
    items = cycle(images, num_images)
    batches = [np.stack(items[a:b]).astype(np.float32) for a, b in plan]

    def run(batch):
        return model.predict(batch, batch_size=len(batch), verbose=0)

    return time_batches(run, batches, [b - a for a, b in plan], warmup, rounds)


def rest_request_body(images: Sequence[bytes]) -> bytes:
    """A TensorFlow Serving REST ``:predict`` body for encoded images (``serving_default``)."""
    instances = [{"b64": base64.b64encode(img).decode("ascii")} for img in images]
    return json.dumps({"instances": instances}).encode()


def predict_rest(predict_url: str, body: bytes, timeout_s: float = 60.0) -> dict[str, Any]:
    """POSTs one ``:predict`` request and returns the parsed JSON; an HTTP error raises."""
    request = urllib.request.Request(predict_url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return json.loads(response.read())


def benchmark_http(
    predict_url: str,
    images: Sequence[bytes],
    num_images: int = 3200,
    batch_size: int = 64,
    warmup: int = 3,
    rounds: int = 3,
    on_batch: Optional[Callable[[], None]] = None,
) -> TimingStats:
    """Times the served path: REST ``:predict`` requests of ``batch_size`` encoded images.

    The request bodies are built before timing (client-side encoding is not the server's cost);
    each timed call includes sending, the server's work, and reading and parsing the response.

    Args:
        predict_url: ``http://host:port/v1/models/<name>:predict``.
        images: encoded images.
        num_images: images to time.
        batch_size: images per request.
        warmup: untimed requests first.
        rounds: timed rounds over all requests; the median round is reported.
        on_batch: called after each timed batch (progress).

    Returns:
        The statistics.
    """
    plan = plan_batches(len(images), num_images, batch_size)
    items = cycle(images, num_images)
    bodies = [rest_request_body(items[a:b]) for a, b in plan]

    def run(body):
        result = predict_rest(predict_url, body)
        if "predictions" not in result:
            raise BenchmarkError(f"the server at {predict_url} answered without 'predictions': {str(result)[:200]}")
        return result

    return time_batches(run, bodies, [b - a for a, b in plan], warmup, rounds, on_batch)


# --------------------------------------------------------------------------- training sweep


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """One batch size of a training sweep: the notebook's epoch time and step time per example.

    Attributes:
        batch_size: the global batch size.
        epoch_times_s: wall time of every epoch, the first (compiling) one included.
        epoch_time_s: mean epoch time without the first epoch.
        step_time_per_example_us: ``epoch_time_s`` per example, microseconds.
        examples_per_epoch: ``steps_per_epoch * batch_size``.
        steps_per_epoch: steps per epoch.
        accelerator: what actually ran (``tpu``, ``gpu``, ``cpu``).
    """

    batch_size: int
    epoch_times_s: tuple[float, ...]
    epoch_time_s: float
    step_time_per_example_us: float
    examples_per_epoch: int
    steps_per_epoch: int
    accelerator: str

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (the keys the sweep's join step reads)."""
        return {**dataclasses.asdict(self), "epoch_times_s": list(self.epoch_times_s)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepResult:
        """The inverse of :meth:`to_dict`; counts that came back as floats are ints again.

        Raises:
            BenchmarkError: a field is missing or unknown.
        """
        values = _fields_of(cls, data, "training sweep result")
        return cls(
            batch_size=_as_int("batch_size", values["batch_size"]),
            epoch_times_s=tuple(float(t) for t in values["epoch_times_s"]),
            epoch_time_s=float(values["epoch_time_s"]),
            step_time_per_example_us=float(values["step_time_per_example_us"]),
            examples_per_epoch=_as_int("examples_per_epoch", values["examples_per_epoch"]),
            steps_per_epoch=_as_int("steps_per_epoch", values["steps_per_epoch"]),
            accelerator=str(values["accelerator"]),
        )


def _load_arrays(dataset_dir: str, split: str, limit: Optional[int]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Decodes a split into float32 images in [0, 1] and int labels (the notebook's in-memory arrays)."""
    import tensorflow as tf

    from trainer.evaluate import read_encoded_split

    encoded, labels, manifest = read_encoded_split(dataset_dir, split, limit)
    shape = manifest.get("image")
    if not shape:
        raise BenchmarkError(
            f"dataset {dataset_dir} has images of different sizes (dataset.json 'image' is null); the "
            "training sweep needs one size: convert with resize=[height, width]"
        )
    channels = int(shape["channels"])
    images = (
        np.stack([tf.io.decode_image(e, channels=channels, expand_animations=False).numpy() for e in encoded]).astype(
            np.float32
        )
        / 255.0
    )
    return images, labels, list(manifest["classes"])


def training_sweep(
    dataset_dir: str,
    batch_sizes: Sequence[int] = (256, 512, 1024),
    epochs: int = 3,
    steps_per_epoch: Optional[int] = None,
    accelerator: str = "auto",
    model_name: str = "mnist_cnn",
    split: str = "train",
    limit: Optional[int] = None,
) -> list[SweepResult]:
    """Trains the model at each batch size and times its epochs, as the GPU-vs-TPU notebook does.

    Args:
        dataset_dir: the dataset folder; the split is decoded into memory first (not timed).
        batch_sizes: global batch sizes to sweep.
        epochs: epochs per batch size, at least 2 (the first, compiling, one is excluded).
        steps_per_epoch: steps per epoch; None for one pass over the examples.
        accelerator: ``auto``, ``tpu``, ``gpu`` or ``cpu`` (``trainer.distribute.get_strategy``).
        model_name: the model builder (``mnist_cnn`` is the notebook's CNN).
        split: the split to train on.
        limit: decode at most this many examples.

    Returns:
        One result per batch size, in the order given.

    Raises:
        BenchmarkError: fewer than 2 epochs, a bad batch size, or too few examples.
    """
    if epochs < 2:
        raise BenchmarkError(f"epochs must be >= 2: the first (compiling) epoch is excluded, got {epochs}")
    if not batch_sizes or any(int(b) < 1 for b in batch_sizes):
        raise BenchmarkError(f"batch_sizes must be positive integers, got {list(batch_sizes)}")
    import keras
    import tensorflow as tf

    from trainer.distribute import accelerator_kind, get_strategy
    from trainer.tasks.classification.model import build_model

    images, labels, classes = _load_arrays(dataset_dir, split, limit)
    strategy = get_strategy(accelerator)
    kind = accelerator_kind(strategy)
    results = []
    for batch_size in (int(b) for b in batch_sizes):
        steps = steps_per_epoch or len(images) // batch_size
        if steps < 1:
            raise BenchmarkError(
                f"{len(images)} examples in split {split!r} make no full batch of {batch_size}; give "
                "steps_per_epoch (the data repeats) or more examples"
            )
        # Repeat so that steps_per_epoch may ask for more than one pass; drop_remainder keeps one
        # batch shape, so only the first epoch compiles (on TPU a ragged batch recompiles).
        data = (
            tf.data.Dataset.from_tensor_slices((images, labels))
            .repeat()
            .batch(batch_size, drop_remainder=True)
            .prefetch(tf.data.AUTOTUNE)
        )
        with strategy.scope():
            model = build_model(model_name, images.shape[1:], len(classes))
            model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        timer = _EpochTimer(keras)
        model.fit(data, epochs=epochs, steps_per_epoch=steps, callbacks=[timer.callback], verbose=0)
        timed = timer.times[1:]
        epoch_time = float(np.mean(timed))
        examples = steps * batch_size
        results.append(
            SweepResult(
                batch_size=batch_size,
                epoch_times_s=tuple(float(t) for t in timer.times),
                epoch_time_s=epoch_time,
                step_time_per_example_us=epoch_time / examples * 1e6,
                examples_per_epoch=examples,
                steps_per_epoch=steps,
                accelerator=kind,
            )
        )
        keras.backend.clear_session()
    return results


class _EpochTimer:
    """Epoch wall times with a monotonic clock (a Keras callback built lazily, keras is heavy)."""

    def __init__(self, keras_module: Any) -> None:
        self.times: list[float] = []
        timer = self

        class Callback(keras_module.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                timer._start = time.perf_counter()

            def on_epoch_end(self, epoch, logs=None):
                timer.times.append(time.perf_counter() - timer._start)

        self.callback = Callback()
        self._start = 0.0
