"""Timed inference: the case study's measurement (docs/evaluation.md, "Inference benchmark").

N images in batches of B through the exported SavedModel, in process and through the model
server's REST API. Warm-up batches run first and are not timed; every batch is timed with
``time.perf_counter`` (monotonic); the result gives images/s, per-batch latency percentiles and
their spread. (The GPU-vs-TPU notebook's training sweep runs on the trainer: components/sweep.)

The timing core (:func:`time_batches`, :func:`summarize`) is plain Python and NumPy;
TensorFlow is imported inside the functions that need it.
"""

from __future__ import annotations

import base64
import dataclasses
import http.client
import json
import time
import urllib.parse
from collections.abc import Callable, Sequence
from typing import Any, Optional

import numpy as np
import orjson

from trainer.records import Record


class BenchmarkError(ValueError):
    """A benchmark cannot run with these inputs; the message says why and how to fix it."""


@dataclasses.dataclass(frozen=True)
class TimingStats(Record):
    """Timing of one benchmark run (warm-up excluded); a strict record (``dsl.Collected``'s floats read back).

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

    _what = "timing statistics"
    _error = BenchmarkError

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


class RestClient:
    """One HTTP/1.1 keep-alive connection to a ``:predict`` URL, as real clients and load balancers keep.

    Opening a connection per request would time the TCP handshake with every batch; TensorFlow
    Serving's clients do not pay it either. The connection is reopened once if the server closed it.
    """

    def __init__(self, predict_url: str, timeout_s: float = 60.0):
        parts = urllib.parse.urlsplit(predict_url)
        if parts.scheme != "http" or not parts.hostname:
            raise BenchmarkError(f"expected an http://host:port/v1/models/<name>:predict URL, got {predict_url!r}")
        self.url = predict_url
        self.path = parts.path
        self._connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout_s)

    def predict(self, body: bytes) -> dict[str, Any]:
        """POSTs one ``:predict`` body and returns the parsed JSON answer.

        Raises:
            BenchmarkError: the server answered with a status other than 200.
        """
        try:
            status, data = self._post(body)
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            self._connection.close()  # the server closed the idle connection: open a new one
            status, data = self._post(body)
        if status != 200:
            raise BenchmarkError(f"the server at {self.url} answered {status}: {data[:300]!r}")
        return orjson.loads(data)  # a detector's answer is tens of thousands of numbers: parse them fast

    def _post(self, body: bytes) -> tuple[int, bytes]:
        self._connection.request("POST", self.path, body=body, headers={"Content-Type": "application/json"})
        response = self._connection.getresponse()
        return response.status, response.read()

    def close(self) -> None:
        """Closes the connection."""
        self._connection.close()


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
    each timed call includes sending, the server's work, and reading and parsing the response, over
    one keep-alive connection (:class:`RestClient`).

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

    client = RestClient(predict_url)

    def run(body):
        result = client.predict(body)
        if "predictions" not in result:
            raise BenchmarkError(f"the server at {predict_url} answered without 'predictions': {str(result)[:200]}")
        return result

    try:
        return time_batches(run, bodies, [b - a for a, b in plan], warmup, rounds, on_batch)
    finally:
        client.close()
