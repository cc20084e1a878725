"""The local model server samples its live traffic (components/serving/traffic.py) and the monitor reads it."""

from __future__ import annotations

import base64
import functools
import json
import threading
import time
import types
import urllib.request

import pytest

from components.evaluate.run import write_traffic_reference
from components.monitor.drift import DriftConfig, stage_drift
from components.serving.checks import http_json
from components.serving.collector import CollectorServer
from components.serving.drift_history import stage_gauges
from components.serving.traffic import TrafficConfig, TrafficLog, read_window, traffic_dir
from tests.promote_models import digits, export_tiny_model, png_bytes, write_digits_dataset

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_the_server_keeps_an_exact_share_of_its_exchanges_as_summaries(tmp_path):
    from components.serving.server import ModelServer

    base = tmp_path / "models" / "clf"
    export_tiny_model(str(base / "1"), steps=40)
    images, _ = digits()
    good = [{"instances": [{"b64": base64.b64encode(png_bytes(im)).decode()}]} for im in images[:12]]
    bad = [{"instances": [{"b64": base64.b64encode(b"\x89PNG\r\n\x1a\n cut").decode()}]}] * 4
    root = str(tmp_path / "stages")
    began = time.time()
    traffic = TrafficLog(traffic_dir(root, "demo"), TrafficConfig(sample_rate=0.5))
    proxied = TrafficLog(traffic_dir(root, "prod"), TrafficConfig(sample_rate=1.0))
    with ModelServer(str(base), "clf", traffic=traffic) as server, proxied:
        statuses = [http_json("POST", f"{server.url}/v1/models/clf:predict", body)[0] for body in good + bad]
        http_json("GET", f"{server.url}/v1/models/clf")  # a status read takes no turn in the sampler
        # The collector as a proxy in front of a model server (TF Serving's sidecar on a cluster).
        # Beside the proxy, the monitor's newest drift gauges of each of the stage's models at /metrics.
        for model, alarm in (("clf", 1), ("detector", 0)):
            folder = tmp_path / "stages" / "prod" / "drift" / model
            folder.mkdir(parents=True)
            gauges = f'# TYPE ltp_traffic_drift_alarm gauge\nltp_traffic_drift_alarm{{model_name="{model}"}} {alarm}\n'
            (folder / "drift.prom").write_text(gauges)
        gauges_of_prod = functools.partial(stage_gauges, root, "prod")
        proxy = CollectorServer(("127.0.0.1", 0), proxied, proxy_to=server.url, gauges=gauges_of_prod)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        through = [http_json("POST", f"{proxy.url}/v1/models/clf:predict", body) for body in (good[0], bad[0])]
        assert http_json("GET", f"{proxy.url}/v1/models/clf")[0] == 200
        with urllib.request.urlopen(f"{proxy.url}/metrics", timeout=30) as scraped:
            exposition = scraped.read().decode()
        assert exposition.count("# TYPE ltp_traffic_drift_alarm gauge") == 1
        assert 'model_name="clf"} 1' in exposition and 'model_name="detector"} 0' in exposition
        proxy.shutdown()
        proxy.server_close()
    assert statuses == [200] * 12 + [400] * 4
    assert [status for status, _ in through] == [200, 400] and "predictions" in through[0][1]
    proxy_lines = read_window(traffic_dir(root, "prod", "clf"), began - 1, time.time() + 1).samples
    assert sorted(line["status"] for line in proxy_lines) == [200, 400] and proxied.written == 2
    assert {line["version"] for line in proxy_lines} == {1}
    # 16 requests sent to the server, 2 more through the proxy: every other one of the 18 is kept.
    assert traffic.sampler.seen == 18 and traffic.sampled == 9 and traffic.written == 9 and traffic.dropped == 0
    window = read_window(traffic_dir(root, "demo", "clf"), began - 1, time.time() + 1)
    lines = sorted(window.samples, key=lambda line: line["time"])
    assert len(lines) == 9 and {line["version"] for line in lines} == {1}
    answered = [line for line in lines if line["status"] == 200]
    assert len(answered) == 6 and all(
        line["image"]["width"] == 8 and line["image"]["channels"] == 1 for line in answered
    )
    assert all(0 <= line["answer"]["class"] < 10 and 0 <= line["answer"]["margin"] <= 1 for line in answered)
    failed = [line for line in lines if line["status"] == 400]
    assert len(failed) == 3 and all(not f["image"]["decoded"] and f["answer"]["empty"] for f in failed)
    # No reference for this model: the monitor says so and compares nothing.
    model_dir = tmp_path / "model"
    entry = types.SimpleNamespace(version=1, model_uri=str(model_dir))
    report = stage_drift(root, "demo", "clf", entry, began - 1, time.time() + 1, DriftConfig())
    assert report.samples == 9 and not report.alarm and report.reference is None
    # The evaluation writes one beside the model, from the served path's answers on its test split.
    export_tiny_model(str(model_dir / "saved_model"), steps=40)
    path = write_traffic_reference(str(model_dir), write_digits_dataset(tmp_path / "data", count=64), "test")
    reference = json.loads(open(path).read())
    assert reference["count"] == 64 and sum(reference["classes"].values()) == pytest.approx(1.0)
    assert reference["decode_failure_rate"] == 0 and reference["figures"]["width"]["edges"] == [8.0]
    report = stage_drift(root, "demo", "clf", entry, began - 1, time.time() + 1, DriftConfig())
    assert report.reference == path and {c.state for c in report.checks} == {"not_enough_traffic"}
