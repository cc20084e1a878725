"""The bounded load test on the local model server (a short run here; 20 s under tests/benchmarks/)."""

import base64

import pytest

from components.serving.load import percentile, run_load
from tests.promote_models import digits, export_tiny_model, png_bytes

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_percentile():
    assert percentile([1, 2, 3, 4, 5], 50) == 3
    assert percentile([1.0, 2.0], 95) == pytest.approx(1.95)


def test_eight_clients_without_errors(tmp_path):
    from components.serving.server import ModelServer

    export_tiny_model(str(tmp_path / "clf" / "1"), steps=5)
    image = png_bytes(digits()[0][0])
    body = {"instances": [{"b64": base64.b64encode(image).decode()}] * 4}
    with ModelServer(str(tmp_path / "clf"), "clf") as server:
        result = run_load(server.url, "clf", body, clients=8, duration_s=2.0)
    print(
        f"\nload: 8 clients x {result['duration_s']:.1f} s: {result['requests']} requests, "
        f"{result['requests_per_s']:.0f} req/s, p50 {result['p50_ms']:.1f} ms, p95 {result['p95_ms']:.1f} ms, "
        f"errors {result['errors']}"
    )
    assert result["errors"] == 0, result["error_samples"]
    assert result["requests"] >= 8  # every client got answers
