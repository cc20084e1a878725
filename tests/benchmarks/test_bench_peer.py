"""Our detector against the detector people would pick instead (Ultralytics YOLO), for the same
training minutes on the same cores, scored by the same pycocotools code on an independent test set
(``make bench-peer``; in ``make bench`` it says how to make the peer's virtualenv when it is missing).

Per seed: a varied COCO set (1,500 photos, 3 classes, 96-160 px, grey and colour, empty images:
``tests/varied_coco.py``) and an independent 300-image test set of the same kind. Our side is
``make run TASK=detection DATA=instances.json``'s training with no options (the run form's
recipe; the default ``<=5m`` cap, or a plain budget at the other points); the peer trains on the
same training and validation images for the same minutes at its best settings here (every core,
batch 16, 128 px, images cached in memory). Which side trains first alternates per seed.

Knobs: ``LTP_PEER_SEEDS`` (1; 3 for the figures you report), ``LTP_PEER_FIRST_SEED`` (0: the seeds
run from it, so seeds can be run a few at a time), ``LTP_PEER_MINUTES`` (``5``; e.g.
``2,5,10`` for the curve), ``LTP_PEER_MODELS`` (``yolov8n.yaml``; ``yolov8n.yaml,yolo11n.yaml``; empty: our side alone),
``LTP_PEER_COUNT`` (1500 images a set), ``LTP_PEER_OPTIMIZER`` (``auto``: what Ultralytics picks
for a user who gives only ``time=``; AdamW on these sets).
"""

from __future__ import annotations

import os
import statistics
import time

import pytest

from tests.benchmarks.peer import compare
from tests.benchmarks.recipes import run_form

pytestmark = pytest.mark.benchmark

SEEDS = max(1, int(os.environ.get("LTP_PEER_SEEDS", "1")))
FIRST_SEED = int(os.environ.get("LTP_PEER_FIRST_SEED", "0"))
MINUTES = [float(m) for m in os.environ.get("LTP_PEER_MINUTES", "5").split(",")]
MODELS = [m for m in os.environ.get("LTP_PEER_MODELS", "yolov8n.yaml").split(",") if m]
COUNT = int(os.environ.get("LTP_PEER_COUNT", "1500"))
OPTIMIZER = os.environ.get("LTP_PEER_OPTIMIZER", "auto")


def _budget(minutes: float) -> str:
    """Our time budget at a point: the run form's default cap at 5 minutes, else a plain budget."""
    return "<=5m" if minutes == 5 else f"{minutes:g}m"


def _ours(dataset: str, model_dir: str, test, minutes: float, seed: int) -> dict:
    from trainer.config import TrainConfig
    from trainer.train import train

    form = run_form("detection")
    config = TrainConfig(
        model=form["model"], model_options=dict(form["model_options"]), epochs=None, steps_per_epoch=None,
        batch_size_per_replica=form["batch_size_per_replica"], learning_rate=form["learning_rate"],
        augment=form["augment"], time_budget=_budget(minutes), seed=seed,
    )  # fmt: skip
    started = time.perf_counter()
    summary = train(dataset, model_dir, config)
    seconds = time.perf_counter() - started  # the train step's whole budget: start-up, calibration, checks
    metrics = compare.score(test, compare.our_detections(os.path.join(model_dir, "saved_model"), test))
    detail = (f"{summary.steps} steps at {summary.image_shape[0]} px, {summary.images_per_sec or 0:.0f} images/s, "
              f"{summary.train_seconds:.0f} s in fit")  # fmt: skip
    return {**metrics, "seconds": seconds, "detail": detail}


def _peer(paths: dict, minutes: float, seed: int, model: str, out) -> dict:
    files = [paths[k] for k in ("coco", "train", "val", "test")]
    spent = compare.run_peer(*files, minutes, out, model=model, seed=seed, optimizer=OPTIMIZER)
    metrics = compare.score(paths["test"], spent["results"])
    detail = f"{spent['epochs']} epochs, {spent['images_per_second']} images/s, {spent['optimizer']}"
    return {**metrics, "seconds": spent["wall_seconds"], "detail": detail}


def _row(name: str, r: dict) -> str:
    return (f"{name:>24s}: AP@[.5:.95] {r['ap']:.3f}  AP@0.5 {r['ap50']:.3f}  AP@0.75 {r['ap75']:.3f}  "
            f"trained {r['seconds']:.0f} s ({r['detail']})")  # fmt: skip


def test_ours_against_ultralytics_at_equal_minutes(tmp_path):
    from components.convert import convert
    from components.convert.config import ConvertConfig

    missing = compare.peer_missing() if MODELS else None
    if missing:
        pytest.skip(missing)
    rows: dict[tuple[str, float], list[dict]] = {}
    for seed in range(FIRST_SEED, FIRST_SEED + SEEDS):
        coco, test = compare.make_sets(tmp_path / f"seed{seed}", seed, count=COUNT)
        dataset = str(tmp_path / f"seed{seed}" / "dataset")
        convert(ConvertConfig(source=str(coco), workers=2), dataset)
        train_list, val_list = compare.split_files(dataset, coco, tmp_path / f"seed{seed}")
        paths = {"coco": coco, "train": train_list, "val": val_list, "test": test}
        for minutes in MINUTES:
            sides = [("ours", None), *[(m.removesuffix(".yaml"), m) for m in MODELS]]
            for name, model in sides if seed % 2 == 0 else sides[::-1]:
                out = tmp_path / f"seed{seed}" / f"{name}-{minutes:g}"
                if model is None:
                    result = _ours(dataset, str(out), test, minutes, seed)
                else:
                    result = _peer(paths, minutes, seed, model, out)
                rows.setdefault((name, minutes), []).append(result)
                print(f"\n[peer] seed {seed}, {minutes:g} min, " + _row(name, result), flush=True)
    print(f"\n[peer] means over {SEEDS} seed(s), each side scored on the same independent test sets:")
    for minutes in MINUTES:
        for (name, m), results in rows.items():
            if m == minutes:
                mean = {k: statistics.mean(r[k] for r in results) for k in ("ap", "ap50", "ap75", "seconds")}
                print(_row(f"{name} {minutes:g} min", {**mean, "detail": f"{len(results)} seed(s)"}))
        ours, peers = rows[("ours", minutes)], [v for (n, m), v in rows.items() if m == minutes and n != "ours"]
        for peer in peers:
            gap = statistics.mean(o["ap"] - p["ap"] for o, p in zip(ours, peer, strict=True))
            gap50 = statistics.mean(o["ap50"] - p["ap50"] for o, p in zip(ours, peer, strict=True))
            print(f"[peer] {minutes:g} min: ours minus peer AP@[.5:.95] {gap:+.3f} (target >= 0), "
                  f"AP@0.5 {gap50:+.3f} (target >= +0.02)")  # fmt: skip
    assert all(0.0 <= r["ap"] <= r["ap50"] <= 1.0 for results in rows.values() for r in results)
