"""benchmark_inference on a real SavedModel, in process and through the local model server."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from components.benchmark.component import benchmark_inference
from tests.eval_bench_fixtures import tiny_assets
from trainer.budget.pricing import PriceTableError
from trainer.evaluate import EvaluationError
from trainer.tfrecords import DatasetError

pytestmark = [pytest.mark.slow, pytest.mark.integration]


class _Metrics(SimpleNamespace):
    def log_metric(self, name, value):
        self.values[name] = value


def _run(tmp_path, **kwargs):
    assets = tiny_assets()
    metrics = _Metrics(values={})
    report = SimpleNamespace(path=str(tmp_path / "report.md"))
    row = benchmark_inference.python_func(
        model=SimpleNamespace(path=kwargs.pop("model_path", assets["model"])),
        dataset=SimpleNamespace(path=assets["dataset"]),
        metrics=metrics,
        report=report,
        **kwargs,
    )
    return row, metrics.values, report


def test_times_in_process_and_http_and_prices_it(tmp_path):
    # 100 images > the 60 in the test split: the benchmark cycles over them
    row, m, report = _run(tmp_path, num_images=100, batch_size=16, accelerator="cpu-8", warmup_batches=1)
    assert row["num_images"] == 100 and row["http_num_images"] == 100
    assert m["images_per_sec"] > 0 and m["http_images_per_sec"] > 0
    assert m["latency_p50_ms"] <= m["latency_p95_ms"] <= m["latency_p99_ms"]
    assert m["price_per_hour"] == 0.28
    assert m["images_per_dollar"] == pytest.approx(m["images_per_sec"] * 3600 / 0.28)
    assert m["http_overhead"] > 0
    assert "in_process" not in row  # the row for the join step stays small
    text = Path(report.path).read_text()
    assert "CPU, 8 cores" in text and "Served path (REST, local Python server)" in text


def test_user_price_table_and_no_http(tmp_path):
    prices = tmp_path / "prices.yaml"
    prices.write_text("accelerators:\n  laptop: {price_per_hour: 0.0, kind: cpu, cores: 2}\n")
    row, m, _ = _run(
        tmp_path,
        num_images=32,
        batch_size=16,
        accelerator="laptop",
        http=False,
        price_table=str(prices),
        warmup_batches=0,
    )
    assert row["images_per_dollar"] is None and "images_per_dollar" not in m
    assert "http_images_per_sec" not in row


def test_bad_input_fails_before_timing(tmp_path):
    with pytest.raises(PriceTableError, match="no price for accelerator 'tpu-v9'"):
        _run(tmp_path, accelerator="tpu-v9")
    bad = tmp_path / "bad.yaml"
    bad.write_text("accelerators:\n  cpu-8: {price_per_hour: -1, kind: cpu}\n")
    with pytest.raises(PriceTableError, match="negative price_per_hour"):
        _run(tmp_path, price_table=str(bad))
    with pytest.raises(EvaluationError, match="predicts 3 classes"):
        _run(tmp_path, model_path=tiny_assets()["wrong_model"])
    with pytest.raises(DatasetError, match="is empty"):
        _run(tmp_path, split="validation")
    assert not (tmp_path / "report.md").exists()
