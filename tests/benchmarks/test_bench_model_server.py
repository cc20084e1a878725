"""Load on the local Python server (components.serving.server): 8 concurrent clients for 20 s on loopback.

Baseline measured in the same run: the same request body's batch through the SavedModel's
serving signature in process (no HTTP, no JSON). The ratio is the REST path's throughput against
it; no timing is asserted, only that no request failed.
"""

import base64
import time

import pytest

from components.serving.load import percentile, run_load
from tests.promote_models import digits, export_tiny_model, png_bytes

pytestmark = pytest.mark.benchmark

BATCH = 4
CLIENTS = 8
DURATION_S = 20.0


def test_bench_model_server_load(tmp_path):
    import tensorflow as tf

    from components.serving.server import ModelServer

    export_tiny_model(str(tmp_path / "clf" / "1"), steps=5)
    image = png_bytes(digits()[0][0])
    fn = tf.saved_model.load(str(tmp_path / "clf" / "1")).signatures["serving_default"]
    batch = tf.constant([image] * BATCH)
    for _ in range(20):
        fn(image_bytes=batch)
    times = []
    end = time.monotonic() + 5.0
    while time.monotonic() < end:
        t0 = time.perf_counter()
        fn(image_bytes=batch)["probabilities"].numpy()
        times.append(time.perf_counter() - t0)
    in_process = len(times) / sum(times)

    body = {"instances": [{"b64": base64.b64encode(image).decode()}] * BATCH}
    with ModelServer(str(tmp_path / "clf"), "clf") as server:
        run_load(server.url, "clf", body, clients=CLIENTS, duration_s=2.0)  # warm-up
        result = run_load(server.url, "clf", body, clients=CLIENTS, duration_s=DURATION_S)
    print(
        f"\nlocal Python server, {CLIENTS} keep-alive clients x {result.duration_s:.1f} s, batch {BATCH}: "
        f"{result.requests} requests, {result.requests_per_s:.1f} req/s, p50 {result.p50_ms:.1f} ms, "
        f"p95 {result.p95_ms:.1f} ms, p99 {result.p99_ms:.1f} ms, errors {result.errors}\n"
        f"in-process signature (1 thread, same batch): {in_process:.1f} calls/s, "
        f"p95 {percentile([t * 1000 for t in times], 95):.2f} ms\n"
        f"ratio REST req/s / in-process calls/s: {result.requests_per_s / in_process:.2f}"
    )
    assert result.errors == 0, result.error_samples
