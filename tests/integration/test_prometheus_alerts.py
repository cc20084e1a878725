"""A real Prometheus scrapes the local model server; the manifests' alert expressions and
dashboard queries, evaluated by it, say what a burst of good and bad requests implies."""

import base64
import dataclasses
import time
import urllib.parse

import pytest

from components.monitor import rules
from components.serving.checks import http_json
from components.serving.load import run_load
from tests.prometheus_server import needs_prometheus, running_prometheus
from tests.promote_models import digits, export_tiny_model, png_bytes

pytestmark = [pytest.mark.integration, pytest.mark.slow, needs_prometheus]

GOOD, BAD = 60, 20


def _test_rules():
    """demo's rule groups with `for:` and the evaluation interval shortened for a test."""
    quick = dataclasses.replace(rules.OBJECTIVES["demo"], pending="1s", down_pending="1s")
    groups = rules.rule_groups("demo", quick)
    groups[0]["interval"] = "1s"
    return groups


def test_alert_expressions_see_the_burst_and_the_error_alert_fires(tmp_path):
    from components.serving.server import ModelServer

    export_tiny_model(str(tmp_path / "clf" / "1"), steps=5)
    images, _ = digits()
    good = {"instances": [{"b64": base64.b64encode(png_bytes(images[0])).decode()}]}
    bad = {"instances": [{"b64": "not base64!"}]}
    server = ModelServer(str(tmp_path / "clf"), "clf").start()
    try:
        target = urllib.parse.urlsplit(server.url).netloc
        with running_prometheus(tmp_path / "prom", {"ltp-demo": [target]}, _test_rules()) as prom:
            ns = 'namespace="ltp-demo"'
            # One request of each kind first, scraped, so that both series exist before the burst
            # (rate() cannot see the increase of a series in the scrape that creates it).
            t0 = time.perf_counter()
            assert http_json("POST", f"{server.url}/v1/models/clf:predict", good)[0] == 200
            first_ms = (time.perf_counter() - t0) * 1000
            assert http_json("POST", f"{server.url}/v1/models/clf:predict", bad)[0] == 400
            count = f":tensorflow:serving:request_count{{{ns}}}"
            prom.wait_for(f"count(count_over_time({count}[1m]) >= 2)", lambda v: v == 2)

            began = time.monotonic()
            load = run_load(server.url, "clf", good, clients=2, duration_s=20, max_requests=GOOD)
            assert (load.requests, load.errors) == (GOOD, 0)
            wrong = run_load(server.url, "clf", bad, clients=2, duration_s=20, max_requests=BAD)
            assert (wrong.requests, wrong.errors) == (BAD, BAD)
            prom.wait_for(f"sum({count})", lambda v: v == GOOD + BAD + 2)
            time.sleep(2.5)  # two more scrapes: the rates' last samples see the burst's end

            # The counters exactly, by status.
            by_status = {r["metric"]["status"]: float(r["value"][1]) for r in prom.query(f"sum by (status) ({count})")}
            assert by_status == {"OK": GOOD + 1, "INVALID_ARGUMENT": BAD + 1}

            alerts = {a.name: a for a in rules.alerts("demo")}
            # The error ratio: rate() extrapolates each series to the window's edges a little
            # differently, so the ratio is the burst's 20/80 (and the whole run's 21/82) give or take.
            ratio = prom.value(alerts["ModelServerErrorRatioHigh"].value)
            assert 0.2 <= ratio <= 0.3, ratio
            # p99 of the successful predicts, in ms: above zero, below the slowest request the
            # clients saw (the server's own time is shorter) times one bucket's width (1.8).
            p99 = prom.value(alerts["ModelServerLatencyP99High"].value)
            slowest_ms = max(load.max_ms, first_ms)
            assert 0 < p99 <= slowest_ms * 1.8, (p99, slowest_ms)
            assert prom.value(alerts["ModelServerNoTargetUp"].value) == 1
            assert prom.query(alerts["ModelServerModelLoadFailed"].value) == []  # no load failed
            loads = prom.query(':tensorflow:cc:saved_model:load_attempt_count{status="success"}')
            assert [float(r["value"][1]) for r in loads] == [1]

            # The alert expressions themselves: the error ratio (0.25 > 0.10) fires, nothing else.
            assert prom.value(alerts["ModelServerErrorRatioHigh"].expr) == pytest.approx(ratio, rel=0.05)
            assert prom.query(alerts["ModelServerLatencyP99High"].expr) == []
            prom.wait_for_alert("ModelServerErrorRatioHigh", "firing", timeout_s=15)
            assert set(prom.alerts()) == {"ModelServerErrorRatioHigh"}

            # Every dashboard query, as Grafana sends it, runs; the request rate sees both statuses.
            for query in rules.dashboard_queries():
                query = rules.substitute_grafana_variables(query, rate_interval="1m")
                if query.startswith("label_values("):
                    query = query[len("label_values(") :].rsplit(", ", 1)[0]
                prom.query(query)
            rate_query = rules.dashboard()["panels"][0]["targets"][0]["expr"]
            statuses = {r["metric"]["status"] for r in prom.query(rules.substitute_grafana_variables(rate_query))}
            assert statuses == {"OK", "INVALID_ARGUMENT"}

            # The server goes away: no target is up, and that alert fires.
            server.stop()
            prom.wait_for(alerts["ModelServerNoTargetUp"].value, lambda v: v == 0)
            prom.wait_for_alert("ModelServerNoTargetUp", "firing", timeout_s=15)
            assert time.monotonic() - began < 60
    finally:
        server.stop()
