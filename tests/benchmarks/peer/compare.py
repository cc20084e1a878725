"""Our detector and the peer (Ultralytics YOLO) side by side: the sets, our detections, the peer's
run in its own virtualenv, and the one pycocotools scoring both go through.

Both sides train on the same images (the training and validation splits our converter draws from
the set) for the same minutes, and are scored on an independent test set from the same generator
with other seeds, which neither saw: the test split inside the set is not used.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
PEER_PYTHON = ROOT / ".venv-peer" / "bin" / "python"
PEER_SCRIPT = Path(__file__).with_name("yolo.py")
MAKE_IT = "make bench-peer makes the peer's virtualenv (.venv-peer: PyTorch and Ultralytics, about 6 GB)"


def peer_missing() -> str | None:
    """None when the peer's virtualenv can run Ultralytics, else one line saying how to make it."""
    if not PEER_PYTHON.exists():
        return f"the peer's virtualenv is missing: {MAKE_IT}"
    probe = subprocess.run(
        [str(PEER_PYTHON), "-c", "import torch, ultralytics"], capture_output=True, text=True, check=False
    )
    if probe.returncode:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        return f"the peer's virtualenv is broken ({last}): remove .venv-peer, then {MAKE_IT}"
    return None


def make_sets(folder: Path, seed: int, count: int = 1500, test_count: int = 300) -> tuple[Path, Path]:
    """A varied COCO set and an independent test set of the same kind (other seeds): their COCO files."""
    import dataclasses

    from tests.varied_coco import ISSUE, generate

    train = generate(folder / "set", dataclasses.replace(ISSUE, count=count, seed=seed))
    test = generate(folder / "test", dataclasses.replace(ISSUE, count=test_count, seed=10_000 + seed))
    return train, test


def split_files(dataset: str, coco: Path, folder: Path) -> tuple[Path, Path]:
    """The file names our converter put in the training and validation splits, one a line."""
    from trainer import tfrecord_read, tfrecords

    info = tfrecords.load_dataset_info(dataset)
    root = str(coco.parent.resolve())
    written = []
    for split in ("train", "validation"):
        keys = [f["image/source_key"][0].decode("utf-8") for f in tfrecord_read.iter_split_features(info, split)]
        names = [os.path.relpath(k, root) if os.path.isabs(k) else k for k in keys]
        path = folder / f"{split}.txt"
        path.write_text("\n".join(names) + "\n")
        written.append(path)
    return written[0], written[1]


def our_detections(saved_model: str, test: Path) -> list[dict[str, Any]]:
    """Our export's detections on every image of the test COCO file, as COCO results.

    Through the project's batch prediction path (``serving_tensors`` after ``serving_default``'s
    letterbox; boxes mapped back to each image's pixels), at the export's own score floor.
    """
    import numpy as np
    import tensorflow as tf

    from trainer.tasks import get_task
    from trainer.tasks.detection.prediction import coco_results, prediction_input, prediction_records

    data = json.loads(test.read_text())
    category_ids = {c["name"]: c["id"] for c in data["categories"]}
    source = prediction_input(saved_model, get_task("detection").serving)
    results = []
    for start in range(0, len(data["images"]), 64):
        chunk = data["images"][start : start + 64]
        pairs = [source.preprocess(tf.constant((test.parent / im["file_name"]).read_bytes())) for im in chunk]
        images = tf.stack([p[0] for p in pairs])
        meta = np.stack([p[1].numpy() for p in pairs])
        outputs = source.function(**{source.input_name: images})
        records = prediction_records(outputs, meta, source.class_names, 0.0, 100)
        for image, record in zip(chunk, records, strict=True):
            results += coco_results(record, image["id"], category_ids)
    return results


def score(test: Path, results: list[dict[str, Any]]) -> dict[str, float]:
    """pycocotools' AP@[.5:.95], AP@0.5 and AP@0.75 of COCO results against the test file."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        truth = COCO(str(test))
        if not results:
            return {"ap": 0.0, "ap50": 0.0, "ap75": 0.0}
        evaluation = COCOeval(truth, truth.loadRes(results), "bbox")
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
    return {"ap": float(evaluation.stats[0]), "ap50": float(evaluation.stats[1]), "ap75": float(evaluation.stats[2])}


def run_peer(coco: Path, train: Path, val: Path, test: Path, minutes: float, out: Path, **settings: Any) -> dict:
    """The peer trained and run on the test set in its own virtualenv; what it spent and its detections."""
    command = [str(PEER_PYTHON), str(PEER_SCRIPT), "--coco", str(coco), "--train", str(train), "--val", str(val),
               "--test", str(test), "--minutes", str(minutes), "--out", str(out)]  # fmt: skip
    for key, value in settings.items():
        command += [f"--{key}", str(value)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise RuntimeError(f"the peer failed (exit {done.returncode}); its output is above")
    spent = json.loads((out / "spent.json").read_text())
    spent["results"] = json.loads((out / "detections.json").read_text())
    return spent
