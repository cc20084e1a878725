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
        bounded = run_load(server.url, "clf", body, clients=3, duration_s=30.0, max_requests=10)
    print(f"\nload: {result.summary()}")
    assert result.errors == 0, result.error_samples
    assert result.requests >= 8  # every client got answers
    # The request budget ends the run long before the time limit.
    assert bounded.requests == 10 and bounded.errors == 0 and bounded.duration_s < 10
    assert bounded.figures()["requests"] == 10 and "error_samples" not in bounded.figures()


def test_bounds_are_checked():
    with pytest.raises(ValueError, match="max_requests"):
        run_load("http://127.0.0.1:9", "clf", {}, max_requests=0)
