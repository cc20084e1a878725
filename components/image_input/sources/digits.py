"""The built-in ``digits``: scikit-learn's copy of the UCI handwritten digits, shipped with the package."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import numpy as np

from components.image_input.sources.arrays import ArrayKind, array_source
from components.image_input.sources.base import Claim, Source, SourceError, fingerprint

# 1,797 8x8 images, shipped so that the built-in source needs neither scikit-learn (about 150 MB with
# SciPy, in no image) nor a download. Made by ``load_digits()`` of the scikit-learn version stored
# inside, intensities 0..16 scaled to 0..255 (docs/tfrecords.md).
DIGITS_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "digits.npz")


def digits_file() -> tuple[np.ndarray, np.ndarray, str]:
    """(images, labels, the scikit-learn version that made them) of the shipped file.

    Raises:
        SourceError: the file is missing from the installed package.
    """
    if not os.path.isfile(DIGITS_FILE):
        raise SourceError(
            f"the built-in digits data is missing: expected {DIGITS_FILE}, part of the package; "
            "reinstall lean-tpu-pipelines (its package data includes components/image_input/digits.npz)"
        )
    with np.load(DIGITS_FILE, allow_pickle=False) as z:
        return z["images"], z["labels"].astype(np.int64), str(z["sklearn_version"])


class DigitsKind(ArrayKind):
    """The built-in name ``digits``: ten classes ``0``..``9``, no given splits."""

    name = "digits"
    description = "digits"
    claim = Claim.NAME

    def matches(self, uri: str) -> bool:
        return uri == self.name

    def open(self, uri: str, classes: list[str] | None) -> Source:
        images, labels, version = digits_file()
        # The same fingerprint as when the arrays came from scikit-learn itself (that version, same
        # pixels): a dataset converted before keeps matching its source.
        fp = fingerprint(["sklearn-digits", version, hashlib.sha256(images.tobytes()).hexdigest()])
        names = [str(i) for i in range(10)]
        return array_source(self.name, "digits", {"all": labels}, {"all": images}, names, fp, False, {})

    def arrays(self, spec: dict[str, Any]) -> dict[str, np.ndarray]:
        return {"all": digits_file()[0]}


DIGITS = DigitsKind()
