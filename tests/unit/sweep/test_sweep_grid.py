"""The training grid: planning cells, their rows, the tables built from whatever cells finished."""

import json
import math
import re
import xml.etree.ElementTree as ET

import pytest

from components.sweep.cell import CellResult, read_row, resolve_rows_root, run_cell_recorded, write_row
from components.sweep.config import SweepConfig
from components.sweep.grid import AcceleratorEntry, GridCell, GridError, plan_grid
from components.sweep.table import (
    GridRow,
    best_cells,
    build_rows,
    collect_results,
    cost_views,
    duration,
    render_grid_html,
    render_grid_markdown,
)
from trainer.benchmark import BenchmarkError
from trainer.budget.pricing import hourly_cost, load_price_table, parse_price_table

TPU = {"accelerator": "tpu-v3-8", "accelerator_type": "cloud-tpus.google.com/v3", "accelerator_count": 8}
SETTINGS = SweepConfig(model="retinanet", source="shapes", epochs=4, batch_size_per_replica=16)
DEFAULTS, CONTEXT = SETTINGS.grid_defaults(), SETTINGS.key_context()


def test_cells_get_every_field_ints_back_and_the_strategy_their_resource_implies():
    # kfp.local hands dict contents over as floats.
    (cell,) = plan_grid([{**TPU, "accelerator_count": 8.0, "image_size": 384.0, "epochs": 4.0}], DEFAULTS, CONTEXT)
    assert cell.accelerator_count == "8" and cell.image_size == 384 and cell.epochs == 4
    assert cell.strategy == "tpu" and cell.model == "retinanet" and cell.batch_size_per_replica == 16
    assert cell.name == "tpu-v3-8 384px 4ep b16"
    assert cell.train_fields()["model_options"] == {"image_size": 384}
    (cpu,) = plan_grid([{"accelerator": "cpu"}], DEFAULTS, CONTEXT)
    assert cpu.strategy == "cpu" and cpu.accelerator_type == "" and cpu.accelerator_count == "0"


def test_repeats_are_cells_of_their_own_with_stable_keys():
    grid = [{**TPU, "image_size": 512, "epochs": 10, "repeats": 3}, {**TPU, "image_size": 256}]
    cells = plan_grid(grid, DEFAULTS, CONTEXT)
    assert [c.repeat for c in cells] == [0, 1, 2, 0] and [c.seed for c in cells] == [0, 1, 2, 0]
    assert len({c.key for c in cells}) == 4
    # The same grid again has the same keys (what the join and a cached re-run rely on) ...
    assert [c.key for c in plan_grid(grid, DEFAULTS, CONTEXT)] == [c.key for c in cells]
    # ... other data does not.
    other = SETTINGS.replace(source="shapes:300").key_context()
    assert plan_grid(grid, DEFAULTS, other)[0].key != cells[0].key


def test_a_cell_round_trips_through_json_with_floats():
    (cell,) = plan_grid([{**TPU, "model_options": {"head_convs": 2}, "global_batch_size": 256}], DEFAULTS, CONTEXT)
    data = json.loads(json.dumps(cell.to_dict()))
    assert "image_size" not in data  # None is left out (kfp.local passes no None in a dict)
    floated = {k: float(v) if isinstance(v, int) and not isinstance(v, bool) else v for k, v in data.items()}
    floated["model_options"] = {"head_convs": 2.0}
    back = GridCell.from_dict(floated)
    assert back == cell and back.model_options == {"head_convs": 2}


@pytest.mark.parametrize(
    "grid, message",
    [
        ([], "non-empty list"),
        ([{"accelerator": "cpu", "epoch": 3}], "unknown field(s) ['epoch']"),
        ([{"accelerator": "v100", "accelerator_type": "nvidia.com/gpu"}], "give both"),
        ([{"accelerator_type": "nvidia.com/gpu", "accelerator_count": 1}], "'accelerator'"),
        ([{"accelerator": "cpu", "epochs": 2.5}], "expected an integer"),
        ([{"accelerator": "cpu", "name": "a"}, {"accelerator": "cpu", "name": "a"}], "names must be unique"),
        ([{"accelerator": "cpu", "image_size": 64, "model_options": {"image_size": 32}}], "differ"),
    ],
)
def test_bad_grids_are_refused_before_anything_runs(grid, message):
    with pytest.raises(GridError, match=None) as err:
        plan_grid(grid, DEFAULTS, CONTEXT)
    assert message in str(err.value)


def test_accelerator_entries_are_the_accelerator_part_of_a_cell():
    from pipelines.gpu_vs_tpu import DEFAULT_ACCELERATORS

    for entry in DEFAULT_ACCELERATORS:
        assert AcceleratorEntry.from_dict(entry).to_dict() == entry
        (cell,) = plan_grid([entry], DEFAULTS, CONTEXT)
        assert (cell.accelerator_type, cell.accelerator_count, cell.strategy) == (
            entry["accelerator_type"],
            entry["accelerator_count"],
            entry["strategy"],
        )


def _result(cell, status="ok", ap50=0.6, ap=0.3, billed=600.0, fit=400.0, reason=None):
    if status != "ok":
        return CellResult(cell=cell, status=status, reason=reason, billed_s=billed)
    return CellResult(
        cell=cell,
        status="ok",
        task="detection",
        fit_s=fit,
        billed_s=billed,
        epoch_s=fit / cell.epochs,
        examples_per_sec=123.0,
        steps=100,
        global_batch_size=128,
        batch_size_per_replica=16,
        replicas=8,
        device="tpu",
        metrics={"ap50": ap50, "ap": ap, "ap75": 0.2},
    )


def _grid():
    cells = plan_grid(
        [
            {**TPU, "name": "v3 640", "image_size": 640, "epochs": 6, "repeats": 2},
            {**TPU, "name": "v3 256", "image_size": 256, "epochs": 4},
            {
                "accelerator": "tpu-v2-8",
                "accelerator_type": "cloud-tpus.google.com/v2",
                "accelerator_count": 8,
                "name": "v2 640",
                "image_size": 640,
                "epochs": 6,
            },
            {**TPU, "name": "v3 oom", "image_size": 1024, "epochs": 6},
            {**TPU, "name": "v3 killed", "image_size": 768, "epochs": 6},
            {"accelerator": "no-such-price", "name": "unpriced", "epochs": 6, "image_size": 640},
        ],  # fmt: skip
        DEFAULTS,
        CONTEXT,
    )
    results = [
        _result(cells[0], ap50=0.64, ap=0.31, billed=6000.0),
        _result(cells[1], ap50=0.66, ap=0.33, billed=6200.0),
        _result(cells[2], ap50=0.59, ap=0.25, billed=1320.0),
        _result(cells[3], ap50=0.62, ap=0.32, billed=20640.0),
        _result(cells[4], "failed", reason="ResourceExhaustedError: OOM when allocating tensor", billed=90.0),
        CellResult(cell=cells[5], status="running"),
        _result(cells[6], ap50=0.1, ap=0.05, billed=100.0),
    ]
    return cells, results


def test_rows_fold_repeats_price_billed_time_and_mark_the_best():
    _, results = _grid()
    table = load_price_table()
    rows = {r.name: r for r in build_rows(results, table)}
    v3 = rows["v3 640"]
    assert v3.runs == 2 and v3.finished == 2 and v3.status == "ok"
    assert v3.quality["ap50"].mean == pytest.approx(0.65) and v3.quality["ap50"].spread == pytest.approx(
        math.sqrt(2) * 0.01
    )
    price, host = hourly_cost(table, "tpu-v3-8")
    assert v3.cost == pytest.approx(6100.0 / 3600 * (price + host))
    assert v3.quality_per_dollar == pytest.approx(0.65 / v3.cost)
    assert rows["v3 640"].best_quality and not rows["v2 640"].best_quality
    assert rows["unpriced"].fastest and rows["unpriced"].cost is None and "no price" in rows["unpriced"].price_note
    assert rows["v3 256"].cheapest
    assert rows["v3 oom"].status == "failed" and rows["v3 oom"].reason.startswith("ResourceExhaustedError")
    assert rows["v3 killed"].status == "failed" and "did not finish" in rows["v3 killed"].reason
    assert not (rows["v3 oom"].best_quality or rows["v3 oom"].fastest or rows["v3 oom"].cheapest)
    again = [GridRow.from_dict(json.loads(json.dumps(r.to_dict()))) for r in rows.values()]
    assert again == list(rows.values())
    assert best_cells(list(rows.values())) == {
        "best_quality": "v3 640",
        "fastest": "unpriced",
        "cheapest": "v3 256",
        "cells": 6,
        "failed": 2,
    }


def test_a_pod_slice_price_adds_its_host():
    table = load_price_table()
    assert table["tpu-v3-128"].source.startswith("estimate") and table["tpu-v3-128"].cores == 128
    assert hourly_cost(table, "tpu-v3-128") == (128.0, table["cpu-4"].price_per_hour)
    assert hourly_cost(table, "tpu-v3-8") == (8.19, 0.0)
    bad = parse_price_table({"accelerators": {"x": {"price_per_hour": 1, "kind": "tpu", "host": "nope"}}})
    with pytest.raises(ValueError, match="host 'nope'"):
        hourly_cost(bad, "x")


def test_the_tables_show_failed_rows_with_their_reason_and_the_cost_view():
    _, results = _grid()
    rows = build_rows(results, load_price_table())
    text = render_grid_markdown(rows)
    assert "| mAP@0.5 | AP | cost ($) | mAP@0.5 per $ |" in text
    assert "0.650 ± 0.014" in text  # mean and spread of the repeats
    line = next(x for x in text.splitlines() if x.startswith("| v3 oom |"))
    assert "failed: ResourceExhaustedError: OOM when allocating tensor" in line
    assert "| v3 256 | tpu-v3-8 | 256 | 4 | 128 (16) |" in text
    assert "1h 41min" in text and "best quality" in text and "cheapest" in text
    views = dict(cost_views(rows))
    assert [r.accelerator for r in views["6 epochs, image size 640"]] == ["tpu-v3-8", "tpu-v2-8", "no-such-price"]
    assert "### 6 epochs, image size 640" in text
    page = render_grid_html(rows)
    assert page.count("<svg") == 1 and "failed: ResourceExhaustedError" in page
    # Self-contained: nothing for the browser to fetch (the UI may be offline).
    assert "<script" not in page and not re.search(r'(src|href)="https?:', page)
    ET.fromstring(page[page.index("<svg") : page.index("</svg>") + 6])


def test_durations_read_like_the_case_study():
    assert [duration(s) for s in (12.34, 99, 20640, None)] == ["12.3 s", "1min 39s", "5h 44min", "n/a"]


def test_the_join_reads_rows_and_a_cell_without_one_is_failed(tmp_path):
    cells, results = _grid()
    for r in results[:3]:
        write_row(str(tmp_path), r)
    got = collect_results(cells, str(tmp_path))
    assert [r.status for r in got[:3]] == ["ok", "ok", "ok"] and got[0] == results[0]
    assert got[3].status == "failed" and got[3].reason.startswith("no record")
    assert read_row(str(tmp_path), cells[5]) is None
    assert resolve_rows_root("", "gs://b/root") == "gs://b/root/sweep-rows"
    with pytest.raises(GridError, match="both empty"):
        resolve_rows_root("", "")


def test_a_cell_whose_run_fails_records_the_reason_and_does_not_raise(tmp_path):
    (cell,) = plan_grid([{"accelerator": "cpu"}], DEFAULTS, CONTEXT)
    result = run_cell_recorded(str(tmp_path / "no-dataset"), str(tmp_path / "model"), cell, str(tmp_path / "rows"))
    assert result.status == "failed" and "dataset.json" in result.reason and result.billed_s > 0
    assert read_row(str(tmp_path / "rows"), cell) == result


GOLDEN_SWEEP = """# GPU vs TPU training sweep

The first (compiling) epoch is excluded from every figure.

## Epoch time (s)

| batch size | tpu-v2-8 | gpu-1 |
|---:|---:|---:|
| 256 | 3.10 | 6.30 |
| 512 | 2.20 | n/a |
| 1024 | n/a | 5.00 |

## Step time per example (us)

| batch size | tpu-v2-8 | gpu-1 |
|---:|---:|---:|
| 256 | 51.7 | 105.0 |
| 512 | 36.6 | n/a |
| 1024 | n/a | 83.3 |

## Runs

- tpu-v2-8, batch 256: ran on tpu, 234 steps (60,000 examples) per epoch, epoch times 9.00, 3.10, 3.10 s
- tpu-v2-8, batch 512: ran on tpu, 117 steps (60,000 examples) per epoch, epoch times 9.00, 2.20, 2.20 s
- gpu-1, batch 256: ran on gpu, 234 steps (60,000 examples) per epoch, epoch times 9.00, 6.30, 6.30 s
- gpu-1, batch 1024: ran on gpu, 58 steps (60,000 examples) per epoch, epoch times 9.00, 5.00, 5.00 s
"""


def test_gpu_vs_tpu_tables_render_as_before_through_the_shared_table_helper():
    from components.sweep.notebook import render_sweep_markdown

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
            ],  # fmt: skip
        }
        for acc, rows in (
            ("tpu-v2-8", [(256, 3.1, 51.7), (512, 2.2, 36.6)]),
            ("gpu-1", [(256, 6.3, 105.0), (1024, 5.0, 83.3)]),
        )
    ]
    assert render_sweep_markdown(sweeps) == GOLDEN_SWEEP


def test_a_legacy_pod_slice_pod_resolves_to_a_multi_worker_cluster(monkeypatch):
    # What a pod on tpu-v3-32 gets: GKE writes one endpoint per TPU host of the slice. The trainer
    # hands TPUClusterResolver tpu=None for this path; TF (2.21 here) builds the worker job from them.
    import tensorflow as tf

    from trainer.distribute import find_tpu

    endpoints = [f"grpc://10.0.0.{i}:8470" for i in range(1, 5)]
    monkeypatch.setenv("KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", ",".join(endpoints))
    address = find_tpu()
    assert address is not None and address.tpu is None
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=address.tpu)
    assert resolver.cluster_spec().as_dict() == {"worker": [e.removeprefix("grpc://") for e in endpoints]}


def test_the_notebook_sweep_is_a_grid_of_accelerator_by_batch_size_cells():
    from components.sweep.notebook import plan_notebook_cells

    entries = [
        AcceleratorEntry("tpu-v2-8", "cloud-tpus.google.com/v2", "8", "tpu").to_dict(),
        {"accelerator": "cpu", "accelerator_type": "", "accelerator_count": 0.0, "strategy": "cpu"},
    ]
    cells = plan_notebook_cells(entries, [256.0, 1024], epochs=3, steps_per_epoch=0, model="mnist_cnn")
    assert [(c.accelerator, c.global_batch_size) for c in cells] == [
        ("tpu-v2-8", 256),
        ("tpu-v2-8", 1024),
        ("cpu", 256),
        ("cpu", 1024),
    ]
    assert cells[0].accelerator_type == "cloud-tpus.google.com/v2" and cells[0].strategy == "tpu"
    assert cells[3].accelerator_count == "0" and cells[3].steps_per_epoch is None and cells[3].epochs == 3
    # The trainer scales the rate with the global batch: every cell trains at the notebook's 1e-3.
    assert {round(c.learning_rate * c.global_batch_size / 128, 12) for c in cells} == {1e-3}
    assert len({c.key for c in cells}) == 4
    with pytest.raises(BenchmarkError, match="epochs must be >= 2"):
        plan_notebook_cells(entries, [256], epochs=1)
    with pytest.raises(BenchmarkError, match="batch_sizes must be positive"):
        plan_notebook_cells(entries, [], epochs=3)
    with pytest.raises(GridError, match="used by an earlier cell"):
        plan_notebook_cells([entries[1], entries[1]], [256], epochs=3)


def test_a_training_summary_gives_the_notebook_figures_first_epoch_excluded():
    from types import SimpleNamespace

    from components.sweep.notebook import sweep_result

    summary = SimpleNamespace(epoch_seconds=[9.0, 3.0, 5.0], steps_per_epoch=2, global_batch_size=32, accelerator="cpu")
    result = sweep_result(summary)
    assert result.epoch_times_s == (9.0, 3.0, 5.0) and result.epoch_time_s == 4.0
    assert result.examples_per_epoch == 64 and result.steps_per_epoch == 2 and result.batch_size == 32
    assert result.step_time_per_example_us == pytest.approx(4.0 / 64 * 1e6)
    with pytest.raises(BenchmarkError, match="timed 1 epoch"):
        sweep_result(SimpleNamespace(epoch_seconds=[9.0], steps_per_epoch=2, global_batch_size=32, accelerator="cpu"))


def test_runs_of_one_cell_each_merge_into_one_column_per_accelerator():
    from components.sweep.notebook import SweepResult, SweepRun, sweep_tables

    def run(acc, batch):
        return SweepRun(acc, (SweepResult(batch, (9.0, 2.0), 2.0, 1.0, batch, 1, "cpu"),))

    sizes, names, by_acc = sweep_tables([run("gpu-1", 256), run("cpu", 256), run("gpu-1", 512)])
    assert sizes == [256, 512] and names == ["gpu-1", "cpu"] and sorted(by_acc["gpu-1"]) == [256, 512]


def test_the_case_study_clusters_are_five_worker_cells_priced_from_the_price_table():
    from pathlib import Path

    import yaml

    import components.sweep

    grid = yaml.safe_load((Path(components.sweep.__file__).parent / "case_study_clusters.yaml").read_text())
    cells = plan_grid(grid, DEFAULTS, CONTEXT)
    assert [(c.name, c.workers, c.accelerator_count) for c in cells] == [("5 x P100", 5, "1"), ("5 x V100", 5, "1")]
    assert all(c.train_fields()["workers"] == 5 for c in cells)
    table = load_price_table()
    assert table["v100-x5"].price_per_hour == pytest.approx(5 * table["v100"].price_per_hour)
    assert table["p100-x5"].price_per_hour == pytest.approx(5 * sum(hourly_cost(table, "p100")))
    assert all(table[k].source.startswith("estimate") and table[k].cores == 5 for k in ("p100-x5", "v100-x5"))
    results = [
        CellResult(cell=c, status="ok", task="detection", fit_s=s - 300, billed_s=s, metrics={"ap50": 0.6, "ap": 0.3},
                   global_batch_size=80, batch_size_per_replica=16, replicas=5)
        for c, s in zip(cells, (4500.0, 3600.0), strict=True)
    ]  # fmt: skip
    rows = {r.name: r for r in build_rows(results, table)}
    assert rows["5 x V100"].cost == pytest.approx(13.35) and rows["5 x V100"].replicas == 5
    assert rows["5 x P100"].cost == pytest.approx(4500 / 3600 * 8.0)
    line = next(x for x in render_grid_markdown(list(rows.values())).splitlines() if x.startswith("| 5 x V100 |"))
    assert "v100-x5" in line and "1h 00min" in line and "13.35" in line


def test_workers_default_to_one_and_leave_a_one_pod_cells_key_as_it_was():
    one, five = plan_grid([{**TPU, "name": "a"}, {**TPU, "name": "b", "workers": 5.0}], DEFAULTS, CONTEXT)
    assert (one.workers, five.workers) == (1, 5)
    # A one-pod cell keeps the key it had before cells had workers (computed then), so earlier caches stay valid.
    assert one.key == "ce6b1472c949732b"
    assert plan_grid([{**TPU, "name": "a", "workers": 2}], DEFAULTS, CONTEXT)[0].key != one.key
    assert GridCell.from_dict(json.loads(json.dumps(five.to_dict()))) == five
    with pytest.raises(GridError, match=r"workers \(0\)"):
        plan_grid([{**TPU, "workers": 0}], DEFAULTS, CONTEXT)
