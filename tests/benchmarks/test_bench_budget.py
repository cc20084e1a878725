"""What a time budget buys: the quality-for-time curve, and ``make run`` with no options beside the
cluster's defaults.

- The curve: the detection recipe (``make run TASK=detection``'s run form) trained through
  ``python -m trainer`` with ``time_budget`` at each of ``LTP_BENCH_BUDGETS`` (default 1m, 2m, 5m,
  10m) on the built-in shapes (``LTP_BENCH_SEEDS`` seeds, default 3) and on one varied COCO set
  (``tests/varied_coco.py``, seed 0; ``LTP_BENCH_VARIED=0`` leaves it out). Each row: the budget,
  the train step's wall time (its process, start-up and export included), the planned steps,
  where it stopped, and the test split's AP@0.5 and AP. The local default budget is chosen from it.
- ``make run TASK=detection`` with no options on the shapes and the varied sets of
  ``LTP_BENCH_RUNS`` (default ``shapes,varied-0,varied-1,varied-2``), beside the same run with
  the cluster's defaults (no budget: the fitted schedule; the 3,200-image benchmark, 3 rounds):
  the wall time by step and the test figures.

Slow (the default knobs train for about 1 h 45 min on 2 cores); set the knobs to sample it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.benchmarks.recipes import run_form

pytestmark = pytest.mark.benchmark

BUDGETS = [b.strip() for b in os.environ.get("LTP_BENCH_BUDGETS", "1m,2m,5m,10m").split(",") if b.strip()]
SEEDS = max(1, int(os.environ.get("LTP_BENCH_SEEDS", "3")))
VARIED = os.environ.get("LTP_BENCH_VARIED", "1") != "0"
RUNS = [r.strip() for r in os.environ.get("LTP_BENCH_RUNS", "shapes,varied-0,varied-1,varied-2").split(",") if r]
# The cluster's defaults, over make run's local ones.
CLUSTER = "time_budget=auto benchmark_images=3200 benchmark_target_spread=0"


def _varied(root: Path, seed: int) -> Path:
    """A varied COCO set of 1,500 photos (``instances.json``), the kind a new user brings."""
    from tests.varied_coco import ISSUE, generate

    return generate(root / f"varied-{seed}", dataclasses.replace(ISSUE, seed=seed))


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """name -> converted dataset folder (the shapes, and the varied set when asked for)."""
    from components.convert import convert
    from components.convert.config import ConvertConfig

    root = tmp_path_factory.mktemp("bench-budget")
    sources = {"shapes": "shapes", **({"varied-0": str(_varied(root, 0))} if VARIED else {})}
    out = {}
    for name, source in sources.items():
        out[name] = str(root / f"ds-{name}")
        convert(ConvertConfig(source=source, workers=2), out[name])
    return out


def _train_with_budget(dataset: str, model_dir: Path, budget: str, seed: int) -> tuple[float, dict]:
    """Trains the recipe as the train step does (its own process); returns its wall time and training.json."""
    from trainer.config import TrainConfig

    form = run_form("detection")
    config = TrainConfig(
        model=form["model"],
        epochs=None,
        model_options=form["model_options"],
        batch_size_per_replica=form["batch_size_per_replica"],
        learning_rate=form["learning_rate"],
        augment=form["augment"],
        seed=seed,
        time_budget=budget,
    )
    config_file = model_dir.with_suffix(".yaml")
    config_file.write_text(config.to_yaml())
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "trainer", "--dataset", dataset, "--model-dir", str(model_dir), "--config",
         str(config_file), "--log-level", "WARNING"],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return time.perf_counter() - started, json.loads((model_dir / "training.json").read_text())


def _score(dataset: str, model_dir: Path) -> dict[str, float]:
    from trainer.config import EvaluateConfig
    from trainer.tasks import get_task

    return get_task("detection").evaluate(str(model_dir / "saved_model"), dataset, EvaluateConfig()).metrics


def test_quality_for_time_curve(datasets, tmp_path):
    rows = []
    for budget in BUDGETS:
        for name, dataset in datasets.items():
            for seed in range(SEEDS if name == "shapes" else 1):
                model_dir = tmp_path / f"{name}-{budget}-{seed}"
                wall, summary = _train_with_budget(dataset, model_dir, budget, seed)
                metrics = _score(dataset, model_dir)
                plan, stop = summary["budget"], summary["stopping"]
                rows.append((budget, name, seed, wall, metrics["ap50"], metrics["ap"]))
                print(
                    f"\n[budget curve] {name} seed {seed}, time_budget {budget} ({plan['budget_s']:.0f}s): train step "
                    f"{wall:.0f}s wall ({100 * wall / plan['budget_s']:.0f}% of it), {plan['steps']} steps planned "
                    f"at {1000 * plan['step_s']:.0f} ms, ended at {stop['step']} ({stop['reason']}), precision "
                    f"{summary['precision']}; test AP@0.5 {metrics['ap50']:.3f}, AP {metrics['ap']:.3f}",
                    flush=True,
                )
    for budget in BUDGETS:
        for name in datasets:
            mine = [r for r in rows if r[0] == budget and r[1] == name]
            ap50 = sorted(r[4] for r in mine)
            ap = sorted(r[5] for r in mine)
            print(
                f"\n[budget curve] {name}, {budget}: train step {sum(r[3] for r in mine) / len(mine):.0f}s mean; "
                f"AP@0.5 {ap50[len(ap50) // 2]:.3f} median (min {ap50[0]:.3f}), AP {ap[len(ap) // 2]:.3f} "
                f"median (min {ap[0]:.3f}) over {len(mine)} seed(s)"
            )
    assert rows


_STEP = re.compile(r"^(?:ok|FAILED) (.+?)\s{2,}([\d.]+)s")


def _make_run(source: str, root: Path, extra: str = "") -> tuple[float, dict[str, float], str]:
    """``make run TASK=detection DATA=source`` (run_local's command); wall time, step times, the summary lines."""
    command = [sys.executable, "-m", "pipelines.tools.run_local", "--task", "detection", "--data", source,
               "--pipeline-root", str(root), "--set", extra]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - started
    steps = {m[1].strip(): float(m[2]) for m in map(_STEP.match, done.stdout.splitlines()) if m}
    figures = next((line for line in done.stdout.splitlines() if line.startswith("test AP@0.5")), "")
    return wall, steps, figures


def test_make_run_with_no_options_beside_the_cluster_defaults(tmp_path):
    for name in RUNS:
        source = "shapes" if name == "shapes" else str(_varied(tmp_path, int(name.split("-")[1])))
        for label, extra in (("local defaults", ""), ("cluster defaults", CLUSTER)):
            wall, steps, figures = _make_run(source, tmp_path / f"{name}-{label.split()[0]}", extra)
            split = ", ".join(f"{step} {seconds:.0f}s" for step, seconds in steps.items())
            print(f"\n[make run] {name}, {label}: {wall:.0f}s wall ({split}); {figures}", flush=True)
            assert steps
