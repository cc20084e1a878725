"""A tiny real dataset folder and exported model for the evaluation and benchmark tests.

Built once per test process (TensorFlow model building is the slow part) under a temporary folder:
28x28 grayscale PNGs of 10 classes (class k: a bright bar at row 2k plus noise) written as
TFRecord shards with dataset.json exactly as docs/CONTRACTS.md pins them, and an untrained (but
real) ``mnist_cnn`` exported by ``trainer.tasks.classification.export.export_saved_model`` into ``<model>/saved_model``.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

CLASSES = [f"class_{k}" for k in range(10)]


def _png(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array, mode="L").save(buf, format="PNG")
    return buf.getvalue()


def make_image(label: int, rng: np.random.Generator) -> np.ndarray:
    image = rng.integers(0, 40, size=(28, 28), dtype=np.uint8)
    image[2 * label + 4 : 2 * label + 7, 4:24] = 230
    return image


def write_dataset(root: Path, counts: dict[str, int], seed: int = 0) -> Path:
    """Writes a dataset folder with one shard per split; a count of 0 writes an empty split."""
    from trainer.tfrecords import SCHEMA_VERSION, encode_example, frame_record, shard_checksum, shard_name

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    splits = {}
    for split, count in counts.items():
        records, class_counts = [], {c: 0 for c in CLASSES}
        for i in range(count):
            label = i % len(CLASSES)
            data = _png(make_image(label, rng))
            records.append(
                encode_example(
                    image=data,
                    image_format="png",
                    height=28,
                    width=28,
                    channels=1,
                    label=label,
                    label_text=CLASSES[label],
                    source_key=f"synthetic:{split}:{i}",
                    sha256=hashlib.sha256(data).hexdigest(),
                )
            )
            class_counts[CLASSES[label]] += 1
        shards = []
        if count:
            name = shard_name(split, 0, 1)
            blob = b"".join(frame_record(r) for r in records)
            (root / name).write_bytes(blob)
            shards.append({"file": name, "count": count, "bytes": len(blob), "crc32c": shard_checksum(blob)})
        splits[split] = {"count": count, "class_counts": class_counts, "shards": shards}
    manifest = {
        "schema_version": SCHEMA_VERSION,
        "source": {"uri": "synthetic", "format": "npz", "fingerprint": "0"},
        "classes": CLASSES,
        "image": {"height": 28, "width": 28, "channels": 1},
        "compression": None,
        "splits": splits,
        "rejected": 0,
    }
    (root / "dataset.json").write_text(json.dumps(manifest))
    return root


def write_model(root: Path, num_classes: int = 10, train_on: Path | None = None, steps: int = 0) -> Path:
    """Exports an ``mnist_cnn`` (optionally trained a few steps on a dataset's train split)."""
    import keras

    from trainer.tasks.classification.export import export_saved_model
    from trainer.tasks.classification.model import build_model

    keras.utils.set_random_seed(0)
    model = build_model("mnist_cnn", (28, 28, 1), num_classes)
    if train_on is not None and steps:
        from trainer.benchmark import _load_arrays

        images, labels, _ = _load_arrays(str(train_on), "train", None)
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        model.fit(images, labels, batch_size=32, epochs=steps, verbose=0)
    root.mkdir(parents=True, exist_ok=True)
    model.save(root / "model.keras")
    names = CLASSES if num_classes == len(CLASSES) else [f"c{k}" for k in range(num_classes)]
    export_saved_model(model, str(root / "saved_model"), names, (28, 28, 1))
    return root


@functools.cache
def tiny_assets() -> dict[str, str]:
    """Paths of a dataset (train 200, test 60, empty validation), a model trained briefly on it,
    and a model with 3 classes (which does not fit the dataset). Built once per process."""
    base = Path(tempfile.mkdtemp(prefix="ltp-evalbench-"))
    dataset = write_dataset(base / "dataset", {"train": 200, "validation": 0, "test": 60})
    model = write_model(base / "model", train_on=dataset, steps=8)
    wrong = write_model(base / "wrong_model", num_classes=3)
    return {"base": str(base), "dataset": str(dataset), "model": str(model), "wrong_model": str(wrong)}


def stages_with_prod(root: Path, metrics: dict[str, float], model_name: str = "classifier") -> str:
    """A stages root whose prod serves a (pretend) model with these metrics, recorded by the promote store."""
    from components.serving.stages import StageEntry, record

    entry = StageEntry("promote", 1, "gs://example/model", "run-1", model_name=model_name, metrics=metrics)
    record(str(root), "prod", entry)
    return os.fspath(root)
