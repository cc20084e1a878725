"""What the sweep's orchestration costs (``make bench``): a small grid under kfp.local against the
same cells trained and scored back to back in one process.

The grid run pays per cell what one process pays once: a fresh Python, TensorFlow's and
keras-hub's imports, KFP's executor, the row files; and once per grid the convert, plan and join
tasks. Both sides train and score the same cells on the same converted data (the in-process side
converts once too, and that time is counted). Printed: both wall times, the overhead in seconds
and as a ratio. Knobs: ``LTP_BENCH_SWEEP_IMAGES`` (shapes images, 60), ``LTP_BENCH_SWEEP_STEPS``
(steps per epoch, 2).
"""

from __future__ import annotations

import os
import time

import pytest

pytestmark = pytest.mark.benchmark

IMAGES = int(os.environ.get("LTP_BENCH_SWEEP_IMAGES", "60"))
STEPS = int(os.environ.get("LTP_BENCH_SWEEP_STEPS", "2"))
GRID = [{"accelerator": "cpu", "image_size": size, "epochs": 1} for size in (32, 64)]


def _settings():
    from pipelines import sweep

    return {
        "model": "retinanet",
        "model_options": sweep.LOCAL_MODEL_OPTIONS,
        "epochs": 1,
        "steps_per_epoch": STEPS,
        "batch_size_per_replica": 8,
        "learning_rate": 0.016,
        "source": f"shapes:{IMAGES}",
        "limit_per_split": 0,
    }


def _in_process(root) -> float:
    from components.convert import convert
    from components.convert.config import ConvertConfig
    from components.sweep.cell import run_cell
    from components.sweep.config import SweepConfig
    from components.sweep.grid import plan_grid
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()
    s = _settings()
    started = time.perf_counter()
    dataset = str(root / "dataset")
    convert(ConvertConfig(source=s["source"], workers=1), dataset)
    settings = SweepConfig(**s)
    cells = plan_grid(GRID, settings.grid_defaults(), settings.key_context())
    for i, cell in enumerate(cells):
        result = run_cell(dataset, str(root / f"model-{i}"), cell, time.time())
        assert result.status == "ok"
    return time.perf_counter() - started


def _grid(root, parallelism: int) -> float:
    from kfp import local

    from pipelines import sweep

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root))
    s = _settings()
    started = time.perf_counter()
    sweep.build(parallelism)(grid_cells=GRID, **s)
    elapsed = time.perf_counter() - started
    (report,) = root.glob("sweep-*/join-training-grid/report")
    assert "failed" not in report.read_text().split("## Cost per accelerator")[0].replace("failed)", "")
    return elapsed


def test_sweep_orchestration_overhead(tmp_path):
    # The grid first: the in-process side then imports TensorFlow in this process (counted there,
    # once, as a user running the cells by hand would pay it).
    # One cell at a time (the orchestration alone), then the default limit (kfp.local runs the
    # loop's iterations concurrently up to it: on few cores that overlaps one cell's start-up with
    # another's training).
    serial_s = _grid(tmp_path / "serial", 1)
    grid_s = _grid(tmp_path / "grid", 4)
    direct_s = _in_process(tmp_path / "direct")
    print(f"\nsweep overhead: {len(GRID)} cells on shapes:{IMAGES}, {STEPS} steps per epoch; back to back in one "
          f"process {direct_s:.1f} s")  # fmt: skip
    for label, wall in (("one cell at a time", serial_s), ("4 at a time", grid_s)):
        print(
            f"  grid under kfp.local, {label}: {wall:.1f} s, overhead {wall - direct_s:+.1f} s "
            f"({wall / direct_s:.2f}x, {(wall - direct_s) / len(GRID):+.1f} s per cell)"
        )
    assert serial_s > 0 and grid_s > 0 and direct_s > 0
