"""``make run TASK=detection``'s quality over seeds, and its head against RetinaNet's anchor head
(``make bench``; prints, asserts no speed).

The target: on the built-in shapes, test AP@[.5:.95] >= 0.5 and AP@0.5 >= 0.9 on every seed. The
recipe (the detection run form's defaults, the detector fitted to the data) trains once per seed
with its head (``dfl``) and once with RetinaNet's (``anchors``), alternating which goes first, at
the precision ``train()`` chooses; each export is scored on the test split. Printed: each run, each
head's worst and mean, and the seeds that miss the target. Knobs: ``LTP_BENCH_SEEDS`` (3),
``LTP_BENCH_HEADS`` (``dfl,anchors``; ``dfl`` alone for the target only).
"""

from __future__ import annotations

import os
import statistics

import pytest

from tests.benchmarks.recipes import run_form, train_and_score

pytestmark = pytest.mark.benchmark

SEEDS = max(1, int(os.environ.get("LTP_BENCH_SEEDS", "3")))
HEADS = os.environ.get("LTP_BENCH_HEADS", "dfl,anchors").split(",")
TARGETS = {"ap": 0.5, "ap50": 0.9}


def test_detection_quality_on_every_seed_and_the_head(tmp_path):
    from components.convert import convert
    from components.convert.config import ConvertConfig

    dataset = str(tmp_path / "shapes")
    convert(ConvertConfig(source="shapes", workers=2), dataset)
    form = run_form("detection")
    runs: dict[str, list[dict]] = {head: [] for head in HEADS}
    for seed in range(SEEDS):
        # Alternate which head trains first: the machine is noisy (the times, not the AP).
        for head in HEADS if seed % 2 == 0 else HEADS[::-1]:
            model_dir = str(tmp_path / f"{head}-{seed}")
            options = {"head": head}
            metrics, summary = train_and_score("detection", dataset, model_dir, form, seed, model_options=options)
            runs[head].append({**metrics, "seed": seed, "seconds": summary.train_seconds})
            print(
                f"\n[detection quality] seed {seed} head {head:7s}: AP@0.5 {metrics['ap50']:.3f}, "
                f"AP@[.5:.95] {metrics['ap']:.3f}, AP@0.75 {metrics['ap75']:.3f}; "
                f"trained {summary.train_seconds:.0f} s at {summary.precision}"
            )
    for head, done in runs.items():
        median_s = statistics.median(r["seconds"] for r in done)
        misses = [r["seed"] for r in done if any(r[m] < t for m, t in TARGETS.items())]
        print(
            f"[detection quality] head {head}: over {len(done)} seeds AP@0.5 worst "
            f"{min(r['ap50'] for r in done):.3f} mean {statistics.mean(r['ap50'] for r in done):.3f}, "
            f"AP@[.5:.95] worst {min(r['ap'] for r in done):.3f} mean {statistics.mean(r['ap'] for r in done):.3f} "
            f"(target on every seed: AP >= {TARGETS['ap']}, AP@0.5 >= {TARGETS['ap50']}); "
            f"seeds missing it: {misses or 'none'}; training median {median_s:.0f} s"
        )
    assert all(0.0 <= r["ap"] <= r["ap50"] <= 1.0 for done in runs.values() for r in done)
