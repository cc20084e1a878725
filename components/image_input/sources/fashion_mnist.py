"""The built-in ``fashion-mnist``: the IDX files of the image, else those Keras downloads."""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from components.image_input.sources.arrays import ArrayKind
from components.image_input.sources.base import Claim, Source, stamp
from components.image_input.sources.idx import idx_arrays, is_idx_name, open_idx

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]


def fashion_mnist_dir() -> str:
    """The local Fashion-MNIST IDX folder; downloads it with Keras where it is missing (clusters)."""
    if os.path.isdir(FASHION_MNIST_DIR) and any(is_idx_name(n) for n in os.listdir(FASHION_MNIST_DIR)):
        return FASHION_MNIST_DIR
    import keras

    keras.datasets.fashion_mnist.load_data()  # caches the same gzipped IDX files
    return os.path.join(os.path.expanduser("~"), ".keras", "datasets", "fashion-mnist")


class FashionMnistKind(ArrayKind):
    """The built-in name ``fashion-mnist``: its train and test files, ten named classes."""

    name = "fashion-mnist"
    description = "fashion-mnist"
    claim = Claim.NAME

    def matches(self, uri: str) -> bool:
        return uri == self.name

    def open(self, uri: str, classes: list[str] | None) -> Source:
        folder = fashion_mnist_dir()
        src = open_idx(folder, "idx", None, FASHION_MNIST_CLASSES)
        src.kind, src.uri, src.options = self.name, self.name, {"folder": folder}
        for item in src.items:
            item.key = item.key.replace("idx:", "fashion-mnist:", 1)
        return src

    def arrays(self, spec: dict[str, Any]) -> dict[str, np.ndarray]:
        return idx_arrays(spec["folder"])

    def cache_key(self, spec: dict[str, Any]) -> tuple:
        return stamp(spec["folder"])


FASHION_MNIST = FashionMnistKind()
