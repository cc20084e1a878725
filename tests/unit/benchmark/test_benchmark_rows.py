"""The benchmark's typed rows: JSON round trips, the keys the pipelines carry, dsl.Collected's floats."""

import json

import pytest

from components.benchmark.rows import BenchmarkRow, Timing
from components.benchmark.table import mark_best, render_markdown
from components.sweep.notebook import SweepResult, SweepRun
from trainer.benchmark import BenchmarkError, TimingStats, summarize

# The keys a summary row (the benchmark_inference component's output) carries: those of the first wave and
# http_server, the server the served path was timed on.
SUMMARY_KEYS = [
    "accelerator", "label", "kind", "cores", "price_per_hour", "price_source", "num_images", "batch_size",
    "time_s", "images_per_sec", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms", "latency_spread",
    "images_per_dollar", "http_num_images", "http_batch_size", "http_time_s", "http_images_per_sec",
    "http_latency_p50_ms", "http_latency_p95_ms", "http_latency_p99_ms", "http_latency_spread", "http_overhead",
    "http_server",
]  # fmt: skip


def _row(http: bool = True, price: float = 0.28) -> BenchmarkRow:
    stats = summarize([0.01, 0.02, 0.04] * 2, images=150, batch_size=64, warmup_batches=2, warmup_s=0.3, rounds=2)
    served = summarize([0.02, 0.03, 0.05] * 2, images=150, batch_size=64, rounds=2) if http else None
    return BenchmarkRow(
        accelerator="cpu-8",
        label="CPU, 8 cores",
        kind="cpu",
        cores=8,
        price_per_hour=price,
        price_source="case study",
        timing=Timing.from_stats(stats),
        images_per_dollar=None if price == 0 else stats.images_per_sec * 3600 / price,
        http=Timing.from_stats(served) if served else None,
        http_overhead=served.total_s / stats.total_s if served else None,
        http_server="local Python server" if served else None,
        timing_stats=stats,
        http_stats=served,
    )


def _collected(data):
    """What kfp's dsl.Collected hands the join step: JSON with every int turned into a float."""
    if isinstance(data, dict):
        return {k: _collected(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_collected(v) for v in data]
    return float(data) if isinstance(data, int) and not isinstance(data, bool) else data


def test_summary_keys_and_order_are_the_pipelines():
    assert list(_row().summary().to_dict()) == SUMMARY_KEYS
    assert list(_row(http=False).summary().to_dict()) == SUMMARY_KEYS[:15]
    full = _row().to_dict()
    assert "in_process" in full and "http" in full and full["in_process"]["rounds"] == 2


def test_round_trip_through_json_and_collected_restores_ints():
    row = _row()
    assert BenchmarkRow.from_dict(json.loads(json.dumps(row.to_dict()))) == row
    back = BenchmarkRow.from_dict(_collected(row.summary().to_dict()))
    assert back == row.summary()
    assert type(back.cores) is int and type(back.timing.num_images) is int and type(back.http.batch_size) is int
    stats = TimingStats.from_dict(_collected(row.timing_stats.to_dict()))
    assert stats == row.timing_stats and type(stats.num_batches) is int
    # free hardware: no images per dollar, not ranked cheapest
    free = BenchmarkRow.from_dict(_collected(_row(http=False, price=0.0).summary().to_dict()))
    assert free.images_per_dollar is None and free.http is None
    assert [(r.fastest, r.cheapest) for r in mark_best([free])] == [(True, False)]


def test_bad_rows_name_the_keys():
    data = _row().summary().to_dict()
    with pytest.raises(BenchmarkError, match=r"benchmark row: missing keys \['kind'\]"):
        BenchmarkRow.from_dict({k: v for k, v in data.items() if k != "kind"})
    with pytest.raises(BenchmarkError, match=r"fastest: unknown key in benchmark row; known keys: accelerator, label"):
        BenchmarkRow.from_dict({**data, "fastest": True})
    # A served path given in part: its missing figures are named with their prefix.
    with pytest.raises(BenchmarkError, match=r"missing keys \['http_latency_p99_ms'\]"):
        BenchmarkRow.from_dict({k: v for k, v in data.items() if k != "http_latency_p99_ms"})
    with pytest.raises(BenchmarkError, match="cores: expected an integer, got 2.5"):
        BenchmarkRow.from_dict({**data, "cores": 2.5})
    with pytest.raises(BenchmarkError, match="http_batch_size: expected an integer, got 64.5"):
        BenchmarkRow.from_dict({**data, "http_batch_size": 64.5})
    with pytest.raises(BenchmarkError, match="come together, got .*http_overhead=None"):
        BenchmarkRow.from_dict({**data, "http_overhead": None})
    with pytest.raises(BenchmarkError, match="http, http_overhead and http_server come together"):
        _row(http=False).summary().__class__(**{**vars(_row(http=False).summary()), "http_overhead": 1.5})
    with pytest.raises(BenchmarkError, match="come together, got .*http_server=None"):
        BenchmarkRow.from_dict({k: v for k, v in data.items() if k != "http_server"})
    with pytest.raises(BenchmarkError, match="expected a mapping"):
        render_markdown(["cpu-8"])


def test_the_table_names_the_server_that_was_timed():
    text = render_markdown([_row().summary().to_dict()])
    assert "Served path (REST, timed on the local Python server)" in text
    assert "TensorFlow Serving" not in text


def test_sweep_run_round_trip_restores_ints():
    run = SweepRun(
        "gpu-1",
        (SweepResult(256, (9.0, 6.0, 6.0), 6.0, 94.0, 59904, 234, "gpu"),),
    )
    data = run.to_dict()
    assert data == {
        "accelerator": "gpu-1",
        "results": [
            {
                "batch_size": 256,
                "epoch_times_s": [9.0, 6.0, 6.0],
                "epoch_time_s": 6.0,
                "step_time_per_example_us": 94.0,
                "examples_per_epoch": 59904,
                "steps_per_epoch": 234,
                "accelerator": "gpu",
            }
        ],
    }
    back = SweepRun.from_dict(_collected(data))
    assert back == run and type(back.results[0].steps_per_epoch) is int
    with pytest.raises(BenchmarkError, match="missing keys"):
        SweepRun.from_dict({"accelerator": "gpu-1", "results": [{"batch_size": 256}]})
