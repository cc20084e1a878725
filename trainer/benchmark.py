"""Timed inference: the case study's measurement (docs/evaluation.md, "Inference benchmark").

N images in batches of B through the exported SavedModel, in process and through the model
server's REST API. Warm-up batches run first and are not timed; every batch is timed with
``time.perf_counter`` (monotonic); the result gives images/s, per-batch latency percentiles and
their spread. The timed batches run in rounds and the median round counts; with a target spread
the rounds stop once they agree that closely (:func:`enough_rounds`), ``rounds`` being the most.
(The GPU-vs-TPU notebook's training sweep runs on the trainer: components/sweep.)

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
        round_spread: (slowest round - fastest round) / median round (:func:`round_spread`);
            None for a single round (and in records written before it was kept).
    """

    _what = "timing statistics"
    _error = BenchmarkError
    _omit_empty = ("round_spread",)

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
    round_spread: Optional[float] = None


def round_spread(round_seconds: Sequence[float]) -> Optional[float]:
    """How far the rounds' times are apart: (slowest - fastest) / median; None for fewer than two rounds."""
    if len(round_seconds) < 2:
        return None
    median = float(np.median(round_seconds))
    return (max(round_seconds) - min(round_seconds)) / median if median > 0 else 0.0


def enough_rounds(round_seconds: Sequence[float], target_spread: Optional[float], cap: int) -> bool:
    """Whether timing can stop after these rounds.

    Args:
        round_seconds: the wall time of each round run so far.
        target_spread: stop once at least two rounds agree within this share
            (:func:`round_spread` ``<= target_spread``); None runs ``cap`` rounds.
        cap: the most rounds.

    Returns:
        True when ``cap`` rounds ran, or the rounds so far agree within ``target_spread``.
    """
    if len(round_seconds) >= cap:
        return True
    spread = round_spread(round_seconds) if target_spread is not None else None
    return spread is not None and spread <= target_spread


def summarize(
    latencies_s: Sequence[float],
    images: int,
    batch_size: int,
    total_s: Optional[float] = None,
    warmup_batches: int = 0,
    warmup_s: float = 0.0,
    rounds: int = 1,
    spread_of_rounds: Optional[float] = None,
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
        spread_of_rounds: the rounds' :func:`round_spread` (None for one round).

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
        round_spread=spread_of_rounds,
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
    target_spread: Optional[float] = None,
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> TimingStats:
    """Times ``run`` on each batch after ``warmup`` untimed calls on the first batches.

    Args:
        run: called with one prepared batch; must block until the result is ready (return
            NumPy, not a lazy tensor).
        batches: the prepared batches (tensors, request bodies): preparing is not timed.
        sizes: images in each batch.
        warmup: untimed calls first (cycling over the batches).
        rounds: run the timed batches this many times and report the median round; with
            ``target_spread``, the most rounds.
        on_batch: called after each timed batch (progress; outside the timed interval).
        target_spread: stop after a round once the rounds so far agree within this share
            (:func:`enough_rounds`); None runs ``rounds`` rounds.
        clock: seconds, monotonic and fine-grained (tests pass a fake one).

    Returns:
        The statistics, with the rounds actually run and their spread.
    """
    if rounds < 1:
        raise BenchmarkError(f"rounds must be >= 1, got {rounds}")
    start = clock()
    for i in range(warmup):
        run(batches[i % len(batches)])
    warmup_s = clock() - start
    latencies = []
    round_s: list[float] = []
    while not enough_rounds(round_s, target_spread, rounds):
        loop_start = clock()
        for batch in batches:
            t0 = clock()
            run(batch)
            latencies.append(clock() - t0)
            if on_batch is not None:
                on_batch()
        round_s.append(clock() - loop_start)
    return summarize(
        latencies, sum(sizes), max(sizes), float(np.median(round_s)), warmup, warmup_s, len(round_s),
        round_spread(round_s),
    )  # fmt: skip


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
    target_spread: Optional[float] = None,
) -> TimingStats:
    """Times a SavedModel signature (or any ``fn(**{input_name: batch})``) on batches of inputs.

    Args:
        fn: the concrete function, e.g. ``loaded.signatures["serving_default"]``.
        inputs: encoded images (bytes) for ``image_bytes``, or float arrays [H, W, C] for ``images``.
        input_name: the signature's input name.
        num_images: images to time (the inputs are cycled when there are fewer).
        batch_size: images per call.
        warmup: untimed calls first.
        rounds: timed rounds over all batches (the most, with ``target_spread``); the median
            round is reported.
        on_batch: called after each timed batch (progress).
        target_spread: stop once the rounds agree within this share (:func:`enough_rounds`).

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

    return time_batches(run, batches, [b - a for a, b in plan], warmup, rounds, on_batch, target_spread)


def benchmark_keras_predict(
    model: Any,
    images: Sequence[np.ndarray],
    num_images: int = 3200,
    batch_size: int = 64,
    warmup: int = 3,
    rounds: int = 3,
    target_spread: Optional[float] = None,
) -> TimingStats:
    """Times ``model.predict`` on the same batches as :func:`benchmark_signature` (tensors path)."""
    plan = plan_batches(len(images), num_images, batch_size)
    items = cycle(images, num_images)
    batches = [np.stack(items[a:b]).astype(np.float32) for a, b in plan]

    def run(batch):
        return model.predict(batch, batch_size=len(batch), verbose=0)

    return time_batches(run, batches, [b - a for a, b in plan], warmup, rounds, target_spread=target_spread)


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
    target_spread: Optional[float] = None,
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
        rounds: timed rounds over all requests (the most, with ``target_spread``); the median
            round is reported.
        on_batch: called after each timed batch (progress).
        target_spread: stop once the rounds agree within this share (:func:`enough_rounds`).

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
        return time_batches(run, bodies, [b - a for a, b in plan], warmup, rounds, on_batch, target_spread)
    finally:
        client.close()
