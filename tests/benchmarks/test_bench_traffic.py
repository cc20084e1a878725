"""Sampled live traffic: exact sample counts, the latency it adds, and the drift checks' false alarms.

1. **Exact counts**: 10,000 one-image requests to the local model server (4 clients, the load
   test's concurrency) at sample rates 2%, 10% and 50%: the sampled and written counts must be
   exactly 200, 1,000 and 5,000 (the sampler is deterministic), none dropped.
2. **Added latency** (goal: at most 5% on the p50): three servers of the same model side by side,
   sampling off, at the default prod rate (2%) and at 100%; rounds alternate between them so that a
   noisy machine slows all alike; the medians of the rounds' p50 are compared.
3. **Drift checks**: 20 windows of unshifted Fashion-MNIST traffic (the training split, other seeds
   than the reference's test split) against the reference: the false alarms, and each figure's
   worst value against its threshold; then each synthetic shift: fired or not, with its figure.
"""

from __future__ import annotations

import base64
import collections
import statistics

import pytest

from components.monitor.drift import DriftConfig, check_window
from components.serving.load import run_load
from components.serving.reference import build_reference
from components.serving.traffic import DEFAULT_RATES, TrafficConfig, TrafficLog, summaries_of
from tests import traffic_fixtures as fx
from tests.promote_models import digits, export_tiny_model, png_bytes

pytestmark = pytest.mark.benchmark

CLIENTS = 4
REQUESTS = 10_000
ROUNDS = 5
ROUND_S = 3.0
GOAL = 0.05


def _body() -> dict:
    return {"instances": [{"b64": base64.b64encode(png_bytes(digits()[0][0])).decode()}]}


def test_bench_sampled_counts_are_exact(tmp_path):
    from components.serving.server import ModelServer

    export_tiny_model(str(tmp_path / "clf" / "1"), steps=5)
    lines = []
    for rate in (0.02, 0.1, 0.5):
        traffic = TrafficLog(str(tmp_path / f"traffic-{rate}"), TrafficConfig(sample_rate=rate))
        with ModelServer(str(tmp_path / "clf"), "clf", traffic=traffic) as server:
            result = run_load(server.url, "clf", _body(), clients=CLIENTS, duration_s=600, max_requests=REQUESTS)
        assert result.errors == 0 and traffic.sampler.seen == REQUESTS
        assert traffic.sampled == traffic.written == round(REQUESTS * rate) and traffic.dropped == 0
        lines.append(f"  rate {rate:>4.0%}: {traffic.sampled:>5,} sampled, {traffic.written:,} written, 0 dropped")
    print(
        f"\nsampled counts over {REQUESTS:,} requests, {CLIENTS} clients (exact: floor(N * rate)):\n" + "\n".join(lines)
    )


def test_bench_sampling_latency_overhead(tmp_path):
    from components.serving.server import ModelServer

    export_tiny_model(str(tmp_path / "clf" / "1"), steps=5)
    base = str(tmp_path / "clf")
    rates = {"off": None, f"{DEFAULT_RATES['prod']:.0%}": DEFAULT_RATES["prod"], "100%": 1.0}
    servers = {
        name: ModelServer(base, "clf", traffic=TrafficLog(str(tmp_path / name), TrafficConfig(sample_rate=r)))
        if r is not None
        else ModelServer(base, "clf")
        for name, r in rates.items()
    }
    p50 = collections.defaultdict(list)
    try:
        for server in servers.values():
            server.start()
            run_load(server.url, "clf", _body(), clients=CLIENTS, duration_s=1.0)  # warm-up
        for _ in range(ROUNDS):
            for name, server in servers.items():
                result = run_load(server.url, "clf", _body(), clients=CLIENTS, duration_s=ROUND_S)
                assert result.errors == 0, result.error_samples
                p50[name].append(result.p50_ms)
    finally:
        for server in servers.values():
            server.stop()
    off = statistics.median(p50["off"])
    lines = [f"  {name:>4}: median p50 {statistics.median(v):.3f} ms (rounds {', '.join(f'{x:.2f}' for x in v)})"
             for name, v in p50.items()]  # fmt: skip
    for name in list(rates)[1:]:
        added = statistics.median(p50[name]) / off - 1
        lines.append(f"  {name} vs off: {added:+.1%} (goal <= {GOAL:.0%}: {'met' if added <= GOAL else 'NOT met'})")
    print(f"\nsampling's added p50 latency, {CLIENTS} clients, {ROUNDS} alternating rounds of {ROUND_S:.0f} s:")
    print("\n".join(lines))


def test_bench_drift_false_alarms_and_shifts():
    config = DriftConfig()
    window = max(config.min_class_samples, config.min_psi_samples, config.min_rate_samples)
    train_images, train_labels = fx.load_split("train")
    test_images, _ = fx.load_split("t10k")
    model = fx.CentroidModel(train_images[:20_000], train_labels[:20_000])
    encoded = [fx.png(i) for i in test_images]
    reference = build_reference(summaries_of(encoded, fx.answers(model, encoded, test_images), TrafficConfig()))
    pool = (train_images[20_000:], train_labels[20_000:])

    def checks(seed: int, shift: str = ""):
        data, seen = fx.draw(*pool, window, seed, shift)
        return check_window(summaries_of(data, fx.answers(model, data, seen), TrafficConfig()), reference, config)

    worst, alarms = collections.defaultdict(float), 0
    for seed in range(20):
        results = checks(seed)
        alarms += sum(c.state == "alarm" for c in results)
        for c in results:
            worst[c.name] = max(worst[c.name], c.figure or 0.0)
    thresholds = {c.name: c.threshold for c in results}
    print(f"\ndrift checks, windows of {window} samples against a reference of {len(encoded):,} test images:")
    print(f"  20 unshifted windows: {alarms} false alarms; worst figure / threshold per check:")
    print("   " + ", ".join(f"{name} {v:.3g}/{thresholds[name]:g}" for name, v in worst.items()))
    for shift in fx.SHIFTS:
        by_name = {c.name: c for c in checks(10_000, shift)}
        check = by_name[fx.SHIFT_CHECK[shift]]
        also = [c.name for c in by_name.values() if c.state == "alarm" and c.name != check.name]
        verdict = "FIRED" if check.state == "alarm" else "missed"
        also_text = f" (also {', '.join(also)})" if also else ""
        print(f"  {shift:>14}: {check.name} {check.figure:.3g} > {check.threshold:g}: {verdict}{also_text}")
        assert check.state == "alarm"
    assert alarms == 0


def _decoded(encoded: list[bytes]):
    import io

    import numpy as np
    from PIL import Image

    return np.stack([np.asarray(Image.open(io.BytesIO(b)).convert("L")) for b in encoded])


def test_bench_drift_through_the_served_cnn(tmp_path):
    """The same checks on what ``make run``'s CNN answers when served: its reference written by the
    evaluation's code from the test split, the traffic drawn from the validation split (other seeds)
    and sent to the local model server at a sample rate of 100%, one monitor window per draw."""
    import concurrent.futures
    import time
    import types

    from components.convert import convert
    from components.convert.config import ConvertConfig
    from components.evaluate.run import write_traffic_reference
    from components.monitor.drift import stage_drift
    from components.serving.checks import http_json
    from components.serving.server import ModelServer
    from components.serving.traffic import traffic_dir
    from tests.benchmarks.recipes import run_form, train_and_score
    from trainer.evaluate import read_encoded_split

    config = DriftConfig()
    window = max(config.min_class_samples, config.min_psi_samples, config.min_rate_samples)
    dataset, model_dir, root = str(tmp_path / "ds"), str(tmp_path / "model"), str(tmp_path / "stages")
    convert(ConvertConfig(source="fashion-mnist"), dataset)
    metrics, _ = train_and_score("classification", dataset, model_dir, run_form("end_to_end"), seed=0)
    write_traffic_reference(model_dir, dataset, "test")
    encoded, labels, _ = read_encoded_split(dataset, "validation")
    pool = (_decoded(encoded), labels)
    entry = types.SimpleNamespace(version=1, model_uri=model_dir)
    traffic = TrafficLog(traffic_dir(root, "demo"), TrafficConfig(sample_rate=1.0))

    def monitor_run(server, seed: int, shift: str = ""):
        data, _ = fx.draw(*pool, window, seed, shift)
        bodies = [{"instances": [{"b64": base64.b64encode(b).decode()}]} for b in data]
        began = time.time()
        with concurrent.futures.ThreadPoolExecutor(CLIENTS) as clients:
            list(clients.map(lambda body: http_json("POST", f"{server.url}/v1/models/clf:predict", body), bodies))
        traffic.flush()
        report = stage_drift(root, "demo", "clf", entry, began, time.time() + 0.001, config)
        assert report.samples == window, report.line()
        return {c.name: c for c in report.checks}

    worst, alarms = collections.defaultdict(float), 0
    (tmp_path / "served").mkdir()
    (tmp_path / "served" / "1").symlink_to(tmp_path / "model" / "saved_model")  # version 1 of the served model
    with ModelServer(str(tmp_path / "served"), "clf", traffic=traffic) as server:
        for seed in range(20):
            results = monitor_run(server, 100 + seed)
            alarms += sum(c.state == "alarm" for c in results.values())
            for c in results.values():
                worst[c.name] = max(worst[c.name], c.figure or 0.0)
        shifted = {shift: monitor_run(server, 20_000, shift) for shift in fx.SHIFTS}
    thresholds = {c.name: c.threshold for c in results.values()}
    print(f"\ndrift checks through the served CNN (test accuracy {metrics['accuracy']:.3f}), monitor runs of {window}:")
    print(f"  20 unshifted monitor runs (validation split): {alarms} false alarms; worst figure / threshold:")
    print("   " + ", ".join(f"{name} {v:.3g}/{thresholds[name]:g}" for name, v in worst.items()))
    for shift, by_name in shifted.items():
        check = by_name[fx.SHIFT_CHECK[shift]]
        also = [c.name for c in by_name.values() if c.state == "alarm" and c.name != check.name]
        verdict = "FIRED" if check.state == "alarm" else "missed"
        print(f"  {shift:>14}: {check.name} {check.figure:.3g} > {check.threshold:g}: {verdict} (also {also})")
    assert alarms == 0 and all(s[fx.SHIFT_CHECK[k]].state == "alarm" for k, s in shifted.items())
