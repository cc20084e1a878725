"""What the array sources (IDX, .npz, the built-in digits and Fashion-MNIST) share: their items, and
how batch prediction scores them (:class:`ArrayKind`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from components.image_input.imaging import encode_png
from components.image_input.sources.base import Item, Listing, PredictItem, Source, SourceError, SourceKind


class ArrayKind(SourceKind):
    """A kind whose images are arrays, not files. Scored, each image is a record of the source (its
    place among the converted items, in the same order) that :meth:`prediction_reader` encodes
    as PNG; no labels.
    """

    def prediction_listing(self, uri: str) -> Listing:
        source = self.open(uri, None)
        items = [PredictItem(uri, it.key, n + 1, record=n) for n, it in enumerate(source.items)]
        return Listing(self.name, items, source.fingerprint, labelled=False)

    def prediction_reader(self, uri: str) -> Callable[[str], bytes]:
        source = self.open(uri, None)
        pixels = self.arrays(source.spec())

        def read(key: str) -> bytes:
            name, i = source.items[int(key.rsplit("#", 1)[1])].ref
            return encode_png(as_uint8(pixels[name][i]))

        return read


def array_source(
    kind: str,
    uri: str,
    labels: dict[str, np.ndarray],
    images: dict[str, Any],
    classes: list[str],
    fingerprint: str,
    given_splits: bool,
    options: dict[str, Any],
) -> Source:
    """A source over named arrays of images and labels; an item refers to ``(array name, index)``.

    Args:
        kind: the source kind.
        uri: the source.
        labels: array name -> label indices.
        images: array name -> images (a NumPy array or an IDX file still being read).
        classes: the class names.
        fingerprint: the source's fingerprint.
        given_splits: the array names are split names (else the items are assigned to splits).
        options: what the worker's loader needs besides kind and uri.

    Raises:
        SourceError: images and labels differ in number, or a label is outside the classes.
    """
    items = []
    for name, lab in labels.items():
        imgs = images[name]
        est = png_size_estimate(imgs)
        if len(lab) != len(imgs):
            raise SourceError(f"{uri}: {name} has {len(imgs)} images but {len(lab)} labels")
        bad = (lab < 0) | (lab >= len(classes))
        if bad.any():
            raise SourceError(
                f"{uri}: {name} has labels outside the classes 0..{len(classes) - 1}: {sorted(set(lab[bad]))[:5]}"
            )
        split = name if given_splits else None
        prefix = f"{kind}:{name}:"
        # tolist(): Python ints at once (indexing a NumPy array per item costs more than the Item)
        items.extend(Item(prefix + str(i), y, (name, i), split, est) for i, y in enumerate(lab.tolist()))
    return Source(kind, uri, classes, items, fingerprint, options=options)


def png_size_estimate(images: Any) -> int:
    """The mean PNG size of a sample of the images plus a record's overhead, for shard planning."""
    if len(images) == 0:
        return 0
    head = getattr(images, "head", None)  # an IDX file being read: its first images only
    sample = head if head is not None else images[:: max(1, len(images) // 32)][:32]
    if len(sample) == 0:
        return 0
    return int(np.mean([len(encode_png(as_uint8(x))) for x in sample])) + 150  # + record overhead


def as_uint8(x: np.ndarray) -> np.ndarray:
    """Pixels as uint8: floats in [0, 1] are scaled by 255, other values clipped to 0..255."""
    if x.dtype == np.uint8:
        return x
    if np.issubdtype(x.dtype, np.floating):
        scale = 255.0 if float(np.nanmax(x, initial=0)) <= 1.0 else 1.0
        return np.clip(np.rint(x * scale), 0, 255).astype(np.uint8)
    return np.clip(x, 0, 255).astype(np.uint8)
