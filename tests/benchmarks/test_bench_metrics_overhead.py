"""The cost of the Prometheus metrics: the local model server's request throughput with metrics
on against off, in one run (goal: at most 5% fewer requests per second).

Two servers of the same model run side by side, one with ``metrics=False``; rounds alternate
between them (on, off, on, off, ...) so that a noisy machine slows both alike, and the medians
are compared. One-image requests: the smallest request, where counting costs the most relative to
the work. The metrics page is fetched once per round, as a scrape would. Only the absence of
errors is asserted; the ratio is printed against the goal.
"""

import base64
import statistics
import urllib.request

import pytest

from components.serving.load import run_load
from tests.promote_models import digits, export_tiny_model, png_bytes

pytestmark = pytest.mark.benchmark

CLIENTS = 4
ROUNDS = 6
ROUND_S = 3.0
GOAL = 0.05


def test_bench_metrics_overhead(tmp_path):
    from components.serving.server import ModelServer

    export_tiny_model(str(tmp_path / "clf" / "1"), steps=5)
    body = {"instances": [{"b64": base64.b64encode(png_bytes(digits()[0][0])).decode()}]}
    with (
        ModelServer(str(tmp_path / "clf"), "clf") as on,
        ModelServer(str(tmp_path / "clf"), "clf", metrics=False) as off,
    ):
        for server in (on, off):
            run_load(server.url, "clf", body, clients=CLIENTS, duration_s=1.0)  # warm-up
        rates = {"on": [], "off": []}
        for i in range(ROUNDS * 2):
            name, server = (("on", on), ("off", off))[i % 2]
            result = run_load(server.url, "clf", body, clients=CLIENTS, duration_s=ROUND_S)
            assert result.errors == 0, result.error_samples
            rates[name].append(result.requests_per_s)
            if name == "on":
                with urllib.request.urlopen(on.metrics_url, timeout=10) as response:
                    assert b":tensorflow:serving:request_count" in response.read()
    median_on, median_off = statistics.median(rates["on"]), statistics.median(rates["off"])
    overhead = 1 - median_on / median_off
    print(
        f"\nmetrics overhead, {CLIENTS} clients, {ROUNDS} alternating rounds of {ROUND_S:.0f} s each, "
        "one image a request:\n"
        f"  metrics on : median {median_on:.1f} req/s  (rounds {', '.join(f'{r:.0f}' for r in rates['on'])})\n"
        f"  metrics off: median {median_off:.1f} req/s  (rounds {', '.join(f'{r:.0f}' for r in rates['off'])})\n"
        f"  on/off ratio {median_on / median_off:.3f}: overhead {overhead:+.1%} (goal <= {GOAL:.0%}: "
        f"{'met' if overhead <= GOAL else 'NOT met'})"
    )
