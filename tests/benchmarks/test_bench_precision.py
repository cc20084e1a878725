"""Quality at bfloat16 against float32, over seeds (``make bench``; prints, asserts no speed).

``precision: auto`` trains at ``mixed_bfloat16`` on TPUs and on CPUs with native bf16 units, so
its quality must hold there. Each task trains ``make run``'s recipe (its pipeline's run-form
defaults) on its built-in data at both precisions for each seed, and evaluates the exported model
on the test split:

- classification (Fashion-MNIST, the notebook's CNN): mean test accuracy within 0.005 of float32's;
- detection (the built-in shapes, the fitted RetinaNet): mean test AP@[.5:.95] within 0.02.

Only the quality is the target here. On a CPU without bf16 units bfloat16 is emulated (about 2.4x
slower to train), so the training times printed beside it say nothing about a CPU that has them.
Knobs: ``LTP_BENCH_SEEDS`` (3), ``LTP_BENCH_PRECISION_TASKS`` (``classification,detection``).
"""

from __future__ import annotations

import os
import statistics

import pytest

from tests.benchmarks.recipes import run_form, train_and_score

pytestmark = pytest.mark.benchmark

SEEDS = max(1, int(os.environ.get("LTP_BENCH_SEEDS", "3")))
TASKS = os.environ.get("LTP_BENCH_PRECISION_TASKS", "classification,detection").split(",")
PRECISIONS = ("float32", "mixed_bfloat16")
# task: (built-in source, pipeline module, the test metric compared, the target on its mean difference)
RECIPES = {
    "classification": ("fashion-mnist", "end_to_end", "accuracy", 0.005),
    "detection": ("shapes", "detection", "ap", 0.02),
}


@pytest.mark.parametrize("task_name", [t for t in RECIPES if t in TASKS])
def test_bfloat16_quality_against_float32_over_seeds(task_name, tmp_path):
    from components.convert import convert
    from components.convert.config import ConvertConfig

    source, module, metric, target = RECIPES[task_name]
    dataset = str(tmp_path / "ds")
    convert(ConvertConfig(source=source, workers=2), dataset)
    form = run_form(module)
    scores: dict[str, list[float]] = {p: [] for p in PRECISIONS}
    seconds: dict[str, list[float]] = {p: [] for p in PRECISIONS}
    for seed in range(SEEDS):
        # Alternate which precision trains first: the machine is noisy.
        for precision in PRECISIONS if seed % 2 == 0 else PRECISIONS[::-1]:
            metrics, summary = train_and_score(
                task_name, dataset, str(tmp_path / f"{precision}-{seed}"), form, seed, precision=precision
            )
            assert summary.precision == precision, f"trained at {summary.precision}, asked {precision}"
            value, took = metrics[metric], summary.train_seconds
            scores[precision].append(value)
            seconds[precision].append(took)
            print(f"\n[precision] {task_name} seed {seed} {precision:14s}: test {metric} {value:.4f}, {took:.0f} s")
    means = {p: statistics.mean(v) for p, v in scores.items()}
    gap = means["mixed_bfloat16"] - means["float32"]
    print(
        f"[precision] {task_name} over {SEEDS} seeds: mean test {metric} float32 {means['float32']:.4f}, "
        f"mixed_bfloat16 {means['mixed_bfloat16']:.4f}, difference {gap:+.4f} (target within {target}); "
        f"training median float32 {statistics.median(seconds['float32']):.0f} s, "
        f"mixed_bfloat16 {statistics.median(seconds['mixed_bfloat16']):.0f} s"
    )
    assert all(0.0 <= v <= 1.0 for vs in scores.values() for v in vs)
