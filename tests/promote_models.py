"""Tiny real models for the export, model-server and promotion tests (sklearn digits, 8x8x1).

TensorFlow is imported inside the functions, so test modules that only need the helpers for data
stay cheap to collect.
"""

from __future__ import annotations

import functools
import io
import os
import shutil
import tempfile

import numpy as np

CLASS_NAMES = [f"digit-{i}" for i in range(10)]
IMAGE_SHAPE = (8, 8, 1)


def digits() -> tuple[np.ndarray, np.ndarray]:
    """Returns sklearn digits as uint8 images [N, 8, 8] (0..255) and int labels."""
    from sklearn.datasets import load_digits

    data = load_digits()
    images = np.round(data.images * (255.0 / 16.0)).astype(np.uint8)
    return images, data.target.astype(np.int64)


def png_bytes(image: np.ndarray, mode: str = "L", fmt: str = "PNG") -> bytes:
    """Encodes a uint8 [H, W] image."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image).convert(mode).save(buf, fmt)
    return buf.getvalue()


def train_tiny_model(steps: int = 150, seed: int = 0, constant_class: int | None = None):
    """A small Keras classifier on digits; ``constant_class`` makes one that always says that class.

    The constant model is a real, servable model that fails any prediction check, for the fault
    tests.
    """
    import keras

    keras.utils.set_random_seed(seed)
    images, labels = digits()
    x = images[..., None].astype("float32") / 255.0
    model = keras.Sequential(
        [
            keras.Input(IMAGE_SHAPE),
            keras.layers.Flatten(),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    if constant_class is not None:
        dense = model.layers[-1]
        kernel, bias = dense.get_weights()
        bias = np.full_like(bias, -10.0)
        bias[constant_class] = 10.0
        dense.set_weights([np.zeros_like(kernel), bias])
        return model
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        idx = rng.integers(0, len(x), 64)
        model.train_on_batch(x[idx], labels[idx])
    return model


def export_tiny_model(export_dir: str, steps: int = 150, seed: int = 0, constant_class: int | None = None) -> str:
    """A tiny model (:func:`train_tiny_model`'s arguments) exported with the classification task's
    ``export_saved_model``, into ``export_dir``.

    Each distinct model is trained and exported once per test process and copied after that: the
    export's tracing costs seconds, and a dozen modules ask for the same few models.
    """
    shutil.copytree(_exported(steps, seed, constant_class), export_dir, dirs_exist_ok=True)
    return export_dir


@functools.cache
def _exported(steps: int, seed: int, constant_class: int | None) -> str:
    from trainer.tasks.classification.export import export_saved_model

    model = train_tiny_model(steps=steps, seed=seed, constant_class=constant_class)
    folder = os.path.join(tempfile.mkdtemp(prefix="ltp-tiny-model-"), "saved_model")
    return export_saved_model(model, folder, CLASS_NAMES, IMAGE_SHAPE)


def write_digits_dataset(folder, count: int = 64, start: int = 1000) -> str:
    """Writes a small real dataset folder (test split only) of digits PNGs in the project's schema."""
    from tests.datasets import write_test_dataset

    images, labels = digits()
    picked = range(start, start + count)
    arrays = {"test": (images[start : start + count, :, :, None], labels[start : start + count],
                       [f"digits:{i}" for i in picked])}  # fmt: skip
    return str(write_test_dataset(folder, shards=1, arrays=arrays, classes=CLASS_NAMES))
