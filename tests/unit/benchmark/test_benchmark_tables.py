"""Timing statistics and the joined tables/charts (no TensorFlow)."""

import time
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from components.benchmark.table import best_of, mark_best, render_html, render_markdown
from components.sweep.notebook import render_sweep_html, render_sweep_markdown
from trainer.benchmark import BenchmarkError, cycle, plan_batches, summarize, time_batches

# The case study's inference table.
CASE_STUDY = [
    ("cpu-8", "CPU, 8 cores", 8, 1.53, 0.28),
    ("cpu-64", "CPU, 64 cores", 64, 7.60, 2.27),
    ("k80", "NVIDIA K80", 1, 4.80, 0.64),
    ("v100", "NVIDIA V100", 1, 18.93, 2.67),
    ("tpu-v3-8", "Cloud TPU v3-8", 8, 118.5, 8.19),
]


def _rows():
    return [
        {
            "accelerator": a,
            "label": label,
            "kind": a.split("-")[0] if a.startswith(("cpu", "tpu")) else "gpu",
            "cores": cores,
            "num_images": 3200,
            "batch_size": 64,
            "time_s": 3200 / ips,
            "images_per_sec": ips,
            "latency_p50_ms": 64000 / ips,
            "latency_p95_ms": 64000 / ips,
            "latency_p99_ms": 64000 / ips,
            "latency_spread": 0.0,
            "price_per_hour": price,
            "price_source": "case study",
            "images_per_dollar": ips * 3600 / price,
        }
        for a, label, cores, ips, price in CASE_STUDY
    ]


def test_summarize_percentiles_and_spread():
    lat = [0.010] * 98 + [0.020, 0.100]
    s = summarize(lat, images=6400, batch_size=64)
    assert s.num_batches == 100
    assert s.latency_ms["p50"] == pytest.approx(10.0)
    assert s.latency_ms["p99"] == pytest.approx(np.percentile(np.array(lat) * 1000, 99))
    assert s.latency_ms["max"] == pytest.approx(100.0)
    assert s.images_per_sec == pytest.approx(6400 / sum(lat))
    assert s.spread == pytest.approx(np.std(lat) / np.mean(lat))
    with pytest.raises(BenchmarkError):
        summarize([], 0, 64)


def test_batches_cycle_and_warmup_is_not_timed():
    assert plan_batches(10, 150, 64) == [(0, 64), (64, 128), (128, 150)]
    assert cycle([1, 2, 3], 7) == [1, 2, 3, 1, 2, 3, 1]
    with pytest.raises(BenchmarkError, match="empty"):
        plan_batches(0, 10, 4)
    calls = []

    def run(batch):
        if len(calls) < 2:  # the warm-up calls are slow, as tracing is
            time.sleep(0.05)
        calls.append(batch)

    s = time_batches(run, ["a", "b", "c"], [4, 4, 2], warmup=2)
    assert calls == ["a", "b", "a", "b", "c"]
    assert s.num_images == 10 and s.warmup_batches == 2
    assert s.warmup_s >= 0.1 and s.latency_ms["max"] < 50


def test_rounds_time_every_batch_again_and_report_the_median_round():
    calls = []
    delays = iter([0.0, 0.0, 0.2, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])  # round 2 has one slow batch

    def run(batch):
        calls.append(batch)
        time.sleep(next(delays))

    s = time_batches(run, ["a", "b", "c"], [4, 4, 2], warmup=0, rounds=3)
    assert calls == ["a", "b", "c"] * 3
    assert s.rounds == 3 and s.num_batches == 3 and s.num_images == 10
    # The slow round is not the median: the reported time is a fast round's.
    assert s.total_s < 0.1 and s.latency_ms["max"] >= 200
    with pytest.raises(BenchmarkError, match="rounds must be >= 1"):
        time_batches(run, ["a"], [1], warmup=0, rounds=0)


def test_case_study_table_marks_tpu_fastest_and_cheapest():
    rows = mark_best(_rows())
    assert [r.row.accelerator for r in rows if r.fastest] == ["tpu-v3-8"]
    assert [r.row.accelerator for r in rows if r.cheapest] == ["tpu-v3-8"]
    assert best_of(_rows()) == {"fastest": "tpu-v3-8", "cheapest": "tpu-v3-8"}
    md = render_markdown(_rows())
    assert "| **Cloud TPU v3-8** | 8 | 27.00 | 118.50 | 8.19 | 52,088 | fastest, cheapest |" in md
    assert "| NVIDIA K80 | 1 | 666.67 | 4.80 | 0.64 | 27,000 |  |" in md


def test_fastest_and_cheapest_can_differ():
    rows = _rows()[:4]  # without the TPU: V100 fastest, K80 cheapest per image
    assert best_of(rows) == {"fastest": "v100", "cheapest": "k80"}


def _svgs(page):
    """The page's inline <svg> elements, parsed (each must be well-formed XML)."""
    found, start = [], page.find("<svg")
    while start != -1:
        end = page.index("</svg>", start) + len("</svg>")
        found.append(ET.fromstring(page[start:end]))
        start = page.find("<svg", end)
    return found


def _texts(svg):
    return [t.text for t in svg.iter("{http://www.w3.org/2000/svg}text") if t.text]


def test_html_is_self_contained_svg():
    page = render_html(_rows())
    assert "<script" not in page and "@import" not in page and "<link" not in page
    assert 'href="http' not in page and "url(http" not in page  # nothing fetched
    throughput, per_dollar = _svgs(page)
    assert throughput.get("aria-label") == "Throughput (higher is faster)"
    assert per_dollar.get("aria-label") == "Images per dollar (higher is cheaper)"
    # matplotlib drew one labelled bar per accelerator, its value written as text
    texts = _texts(throughput)
    for row in _rows():
        assert row["label"] in texts
        assert f"{row['images_per_sec']:,.4g}" in texts


def test_sweep_tables():
    sweeps = [
        {
            "accelerator": acc,
            "results": [
                {
                    "batch_size": b,
                    "epoch_times_s": [9.0, e, e],
                    "epoch_time_s": e,
                    "step_time_per_example_us": us,
                    "examples_per_epoch": 60000,
                    "steps_per_epoch": 60000 // b,
                    "accelerator": acc.split("-")[0],
                }
                for b, e, us in rows
            ],
        }
        for acc, rows in (
            ("gpu-1", [(256, 6, 94), (512, 5, 82), (1024, 4, 79)]),
            ("tpu-v2-8", [(256, 6, 97), (512, 3, 58), (1024, 2, 37)]),
        )
    ]
    md = render_sweep_markdown(sweeps)
    assert "| batch size | gpu-1 | tpu-v2-8 |" in md
    assert "| 1024 | 4.00 | 2.00 |" in md and "| 1024 | 79.0 | 37.0 |" in md
    page = render_sweep_html(sweeps)
    assert "<script" not in page
    epoch, per_example = _svgs(page)
    assert epoch.get("aria-label") == "Epoch time (lower is faster)"
    texts = _texts(epoch) + _texts(per_example)
    assert {"gpu-1", "tpu-v2-8", "batch 256", "batch 1024"} <= set(texts)  # legend and groups
    assert "37" in texts and "79" in texts  # the bars' values
