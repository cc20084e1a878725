"""A tiny real dataset folder and exported model for the evaluation and benchmark tests.

Built once per test run (TensorFlow model building is the slow part) under a temporary folder:
28x28 grayscale PNGs of 10 classes (class k: a bright bar at row 2k plus noise) written as
TFRecord shards with dataset.json exactly as docs/CONTRACTS.md pins them, and an untrained (but
real) ``mnist_cnn`` exported by ``trainer.tasks.classification.export.export_saved_model`` into ``<model>/saved_model``.
"""

from __future__ import annotations

import functools
import io
import os
from pathlib import Path

import numpy as np
from PIL import Image

from tests.shared import once_per_run

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
    from tests.datasets import write_test_dataset

    rng = np.random.default_rng(seed)
    arrays = {}
    for split, count in counts.items():
        labels = np.arange(count, dtype=np.int64) % len(CLASSES)
        images = np.stack([make_image(int(label), rng) for label in labels]) if count else np.zeros((0, 28, 28))
        keys = [f"synthetic:{split}:{i}" for i in range(count)]
        arrays[split] = (images.astype(np.uint8)[..., None], labels, keys)
    return write_test_dataset(root, shards=1, arrays=arrays, classes=CLASSES)


def write_model(root: Path, num_classes: int = 10, train_on: Path | None = None, steps: int = 0) -> Path:
    """Exports an ``mnist_cnn`` (optionally trained a few steps on a dataset's train split)."""
    import keras

    from trainer.tasks.classification.export import export_saved_model
    from trainer.tasks.classification.model import build_model

    keras.utils.set_random_seed(0)
    model = build_model("mnist_cnn", (28, 28, 1), num_classes)
    if train_on is not None and steps:
        import tensorflow as tf

        from trainer.evaluate import read_encoded_split

        encoded, labels, _ = read_encoded_split(str(train_on), "train", None)
        decoded = [tf.io.decode_image(e, channels=1, expand_animations=False).numpy() for e in encoded]
        images = np.stack(decoded).astype(np.float32) / 255.0
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
    and a model with 3 classes (which does not fit the dataset). Built once per test run (tests/shared.py)."""
    return once_per_run("eval-bench", _build)


def _build(base: Path) -> dict[str, str]:
    dataset = write_dataset(base / "dataset", {"train": 200, "validation": 0, "test": 60})
    model = write_model(base / "model", train_on=dataset, steps=8)
    wrong = write_model(base / "wrong_model", num_classes=3)
    return {"base": str(base), "dataset": str(dataset), "model": str(model), "wrong_model": str(wrong)}


def stages_with_prod(root: Path, metrics: dict[str, float], model_name: str = "classifier", model_uri: str = "") -> str:
    """A stages root whose prod serves a (pretend) model with these metrics, recorded by the promote store.

    The model folder is ``model_uri``, by default one that does not exist (no training.json).
    """
    from components.serving.stages import StageEntry, StageRegistry

    model_uri = model_uri or os.fspath(root / "pretend-model")
    entry = StageEntry("promote", 1, model_uri, "run-1", model_name=model_name, metrics=metrics)
    StageRegistry(str(root)).record("prod", entry)
    return os.fspath(root)
