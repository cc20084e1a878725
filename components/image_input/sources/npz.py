"""NumPy ``.npz`` files: images and labels arrays, maybe per split, maybe with class names."""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from components.image_input.sources.arrays import ArrayKind, array_source
from components.image_input.sources.base import Source, SourceError, fingerprint, has_suffix, stamp
from trainer.storage import read_bytes

_NPZ_PAIRS = (("images", "labels"), ("x", "y"), ("x_train", "y_train"), ("x_test", "y_test"))


def npz_arrays(uri: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], list[str] | None]:
    """(images, labels, class names or None) of a .npz file, by array name (``all``, ``train``, ``test``).

    Raises:
        SourceError: no known pair of arrays, or images of an unusable shape.
    """
    with np.load(io.BytesIO(read_bytes(uri)), allow_pickle=False) as z:
        keys = set(z.files)
        images, labels = {}, {}
        for xk, yk in _NPZ_PAIRS:
            if xk in keys and yk in keys:
                name = xk.split("_", 1)[1] if "_" in xk else "all"
                images[name], labels[name] = z[xk], z[yk].astype(np.int64).reshape(-1)
        names = [str(c) for c in z["classes"]] if "classes" in keys else None
    if not images:
        raise SourceError(
            f"{uri}: expected arrays images+labels (or x+y, or x_train+y_train[+x_test+y_test]), got {sorted(keys)}"
        )
    for name, arr in images.items():
        if arr.ndim not in (3, 4) or (arr.ndim == 4 and arr.shape[3] not in (1, 3, 4)):
            raise SourceError(f"{uri}: {name} images must be [N, H, W] or [N, H, W, C<=4], got {arr.shape}")
    return images, labels, names


class NpzKind(ArrayKind):
    """A ``.npz`` file: ``images``+``labels``, ``x``+``y`` or ``x_train``+``y_train`` (and ``x_test``+``y_test``)."""

    name = "npz"
    description = "a .npz file"

    def matches(self, uri: str) -> bool:
        return has_suffix(uri, ".npz")

    def open(self, uri: str, classes: list[str] | None) -> Source:
        images, labels, names = npz_arrays(uri)
        top = max(int(v.max(initial=0)) for v in labels.values()) + 1
        names = list(classes or names or [str(i) for i in range(top)])
        given = set(images) != {"all"}
        return array_source(self.name, uri, labels, images, names, fingerprint([read_bytes(uri)]), given, {})

    def arrays(self, spec: dict[str, Any]) -> dict[str, np.ndarray]:
        return npz_arrays(spec["uri"])[0]

    def cache_key(self, spec: dict[str, Any]) -> tuple:
        return stamp(spec["uri"])


NPZ = NpzKind()
