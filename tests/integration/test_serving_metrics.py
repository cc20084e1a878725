"""The local model server's metrics page: TensorFlow Serving's names, labels, units and buckets."""

import base64
import math
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from components.serving.checks import http_json
from components.serving.metrics import LATENCY_BUCKETS_US, METRICS_PATH
from tests.promote_models import digits, export_tiny_model, png_bytes

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def base_path(tmp_path_factory):
    base = tmp_path_factory.mktemp("models") / "clf"
    export_tiny_model(str(base / "1"), steps=5)
    return base


def _page(url: str) -> str:
    with urllib.request.urlopen(url + METRICS_PATH, timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        return response.read().decode()


def test_metrics_page_has_tf_serving_names_and_counts_the_requests(base_path):
    from components.serving.server import ModelServer

    images, _ = digits()
    good = {"instances": [{"b64": base64.b64encode(png_bytes(images[0])).decode()}]}
    with ModelServer(str(base_path), "clf") as server:
        for _ in range(3):
            assert http_json("POST", f"{server.url}/v1/models/clf:predict", good)[0] == 200
        assert http_json("POST", f"{server.url}/v1/models/clf:predict", {"instances": "x"})[0] == 400
        assert http_json("POST", f"{server.url}/v1/models/other:predict", good)[0] == 404
        assert http_json("GET", f"{server.url}/v1/models/clf")[0] == 200
        assert http_json("GET", f"{server.url}/not/a/model")[0] == 404  # not a model path: not counted
        text = _page(server.url)

    assert "_total" not in text and "_created" not in text and "# HELP" not in text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(families) == {
        ":tensorflow:serving:request_count",
        ":tensorflow:serving:request_latency",
        ":tensorflow:serving:runtime_latency",
        ":tensorflow:cc:saved_model:load_attempt_count",
        ":tensorflow:cc:saved_model:load_latency",
    }
    counts = {
        (s.labels["model_name"], s.labels["status"]): s.value
        for s in families[":tensorflow:serving:request_count"].samples
    }
    assert counts == {("clf", "OK"): 4, ("clf", "INVALID_ARGUMENT"): 1, ("other", "NOT_FOUND"): 1}

    latency = families[":tensorflow:serving:request_latency"]
    assert latency.type == "histogram"
    predict = [s for s in latency.samples if s.labels.get("API") == "predict"]
    assert {s.labels["entrypoint"] for s in predict} == {"REST"}
    buckets = [s for s in predict if s.name.endswith("_bucket")]
    # TF Serving's 33 exponential bounds (10 * 1.8**i microseconds), written with 6 digits, and +Inf.
    assert [b.labels["le"] for b in buckets[:4]] == ["10", "18", "32.4", "58.32"]
    assert len(buckets) == 34 and buckets[-1].labels["le"] == "+Inf"
    assert math.isclose(float(buckets[-2].labels["le"]), LATENCY_BUCKETS_US[-1], rel_tol=1e-5)
    count = next(s.value for s in predict if s.name.endswith("_count"))
    total_us = next(s.value for s in predict if s.name.endswith("_sum"))
    assert count == 3  # the failed predict has no latency, as in TF Serving
    assert 3 * 50 < total_us < 3 * 10_000_000  # microseconds, not seconds
    status_get = [s for s in latency.samples if s.labels.get("API") == "" and s.name.endswith("_count")]
    assert [s.value for s in status_get] == [1]

    runtime = [s for s in families[":tensorflow:serving:runtime_latency"].samples if s.name.endswith("_count")]
    assert [(s.labels["API"], s.labels["runtime"], s.value) for s in runtime] == [("Predict", "TF1", 3)]
    loads = families[":tensorflow:cc:saved_model:load_attempt_count"].samples
    assert [(s.labels["model_path"], s.labels["status"], s.value) for s in loads] == [
        (str(base_path / "1"), "success", 1)
    ]


def test_metrics_can_be_turned_off(base_path):
    from components.serving.server import ModelServer

    with ModelServer(str(base_path), "clf", metrics=False) as server:
        assert server.metrics_url is None
        with pytest.raises(urllib.error.HTTPError) as err:
            _page(server.url)
        assert err.value.code == 404
