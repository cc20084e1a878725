"""Inference benchmark trustworthiness and comparisons (``make bench``; prints ratios, no asserts on speed).

- stability: two runs of the same benchmark, images/s within 10% of each other (on an idle machine);
- the exported SavedModel (serving_tensors) against ``model.predict`` on the same batches;
- the served path (the local Python server, REST, encoded images) against in-process serving_default.
"""

import statistics

import numpy as np
import pytest

from tests.benchmarks.cpu import versus
from tests.eval_bench_fixtures import tiny_assets

pytestmark = pytest.mark.benchmark

NUM_IMAGES = 3200  # the case study's measurement
BATCH = 64
ROUNDS = 3


@pytest.fixture(scope="module")
def loaded():
    import keras
    import tensorflow as tf

    from trainer.evaluate import read_encoded_split

    assets = tiny_assets()
    saved = tf.saved_model.load(assets["model"] + "/saved_model")
    encoded, _, _ = read_encoded_split(assets["dataset"], "test")
    tensors = [tf.io.decode_png(e, channels=1).numpy().astype(np.float32) / 255.0 for e in encoded]
    model = keras.models.load_model(assets["model"] + "/model.keras")
    return assets, saved, encoded, tensors, model


def test_stability_across_two_runs(loaded):
    from trainer.benchmark import benchmark_signature

    _, saved, encoded, _, _ = loaded
    fn = saved.signatures["serving_default"]
    a = benchmark_signature(fn, encoded, "image_bytes", NUM_IMAGES, BATCH, warmup=5)
    b = benchmark_signature(fn, encoded, "image_bytes", NUM_IMAGES, BATCH, warmup=5)
    ratio = b.images_per_sec / a.images_per_sec
    print(
        f"\nstability (each run the median of {a.rounds} rounds): run 1 {a.images_per_sec:,.0f} images/s "
        f"(spread {a.spread:.1%}), "
        f"run 2 {b.images_per_sec:,.0f} images/s (spread {b.spread:.1%}); ratio {ratio:.3f} "
        f"({'within' if abs(ratio - 1) <= 0.10 else 'OUTSIDE'} 10%)"
    )
    assert a.num_images == b.num_images == NUM_IMAGES


def test_saved_model_vs_keras_predict(loaded):
    from trainer.benchmark import benchmark_keras_predict, benchmark_signature

    _, saved, _, tensors, model = loaded
    sm = benchmark_signature(saved.signatures["serving_tensors"], tensors, "images", NUM_IMAGES, BATCH, warmup=5)
    kp = benchmark_keras_predict(model, tensors, NUM_IMAGES, BATCH, warmup=5)
    print(
        f"\nSavedModel serving_tensors {sm.images_per_sec:,.0f} images/s vs model.predict "
        f"{kp.images_per_sec:,.0f} images/s on the same batches: ratio {sm.images_per_sec / kp.images_per_sec:.2f}x"
    )


def test_http_overhead_vs_in_process(loaded):
    from components.serving.server import ModelServer
    from trainer.benchmark import benchmark_http, benchmark_signature

    assets, saved, encoded, _, _ = loaded
    fn = saved.signatures["serving_default"]
    ratios, p50s = [], []
    with ModelServer(assets["model"] + "/saved_model", "bench") as server:
        url = f"{server.url}/v1/models/bench:predict"
        for _ in range(ROUNDS):  # alternating: the host's load drifts between a long path and the next
            inproc = benchmark_signature(fn, encoded, "image_bytes", NUM_IMAGES, BATCH, 5, rounds=1)
            http = benchmark_http(url, encoded, NUM_IMAGES, BATCH, 5, rounds=1)
            ratios.append(http.total_s / inproc.total_s)
            p50s.append(http.latency_ms["p50"] / inproc.latency_ms["p50"])
    print(
        f"\nclassification, {NUM_IMAGES} images in batches of {BATCH}, {ROUNDS} alternating rounds: "
        f"in-process serving_default against REST on the local Python server (keep-alive)\n"
        f"  {versus('REST time / in-process time', statistics.median(ratios), '<= 1.25x')}; "
        f"rounds {', '.join(f'{r:.2f}x' for r in ratios)}; per-batch p50 ratio {statistics.median(p50s):.2f}x"
    )
