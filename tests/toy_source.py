"""A source kind defined outside components/ (proves the source seam): a flat folder with a labels file.

Registered through ``LTP_EXTENSIONS=tests.toy_source`` (:mod:`trainer.extensions`): the source
registry imports this module when first looked up, in the test process and in every subprocess
a step runs in. It registers the kind ``flat``: a folder of images with ``labels.txt`` beside
them, one ``<file> <class>`` line each. Like a YOLO or Pascal VOC root it is a folder known by
what it holds, so it claims as a layout (``Claim.LAYOUT``): the registry offers it the folder
before ``folder``, which would take any folder for one subfolder per class (and find none). The
convert step converts it (:meth:`FlatKind.open`) and batch prediction scores it
(:meth:`FlatKind.prediction_listing`), with nothing outside ``tests/`` changed.
"""

from __future__ import annotations

import posixpath

from components.image_input.imaging import EXTENSIONS
from components.image_input.sources import (
    Claim,
    Item,
    Listing,
    PredictItem,
    Source,
    SourceError,
    SourceKind,
    digest,
    fingerprint,
    register_kind,
)
from components.image_input.sources.base import version
from trainer import storage

LABELS = "labels.txt"


def _rows(uri: str) -> list[tuple[str, str]]:
    """``(file, class)`` per line of the folder's labels file.

    Raises:
        SourceError: a line that is not ``<file> <class>``, or no line.
    """
    rows = []
    for n, line in enumerate(storage.read_text(storage.join(uri, LABELS)).splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2:
            raise SourceError(f"{uri}/{LABELS} line {n}: expected '<file> <class>', got {line!r}")
        rows.append((parts[0], parts[1]))
    if not rows:
        raise SourceError(f"no images in {uri}: {LABELS} lists none")
    return rows


class FlatKind(SourceKind):
    """A flat image folder with a ``labels.txt`` (``<file> <class>`` per line)."""

    name = "flat"
    description = "a flat image folder with a labels.txt"
    claim = Claim.LAYOUT

    def matches(self, uri: str) -> bool:
        return storage.isdir(uri) and storage.exists(storage.join(uri, LABELS))

    def open(self, uri: str, classes: list[str] | None) -> Source:
        rows = _rows(uri)
        names = list(classes or sorted({c for _, c in rows}))
        unknown = sorted({c for _, c in rows} - set(names))
        if unknown:
            raise SourceError(f"{uri}/{LABELS}: classes {unknown} are not among the declared {names}")
        items, stats = [], []
        for file, label in rows:
            path = storage.join(uri, file)
            info = storage.stat(path)
            size = info.size if info else 0
            stats.append((file, size, info.version if info else None))
            ext = posixpath.splitext(file)[1].lower()
            items.append(Item(file, names.index(label), path, size=size, expected=EXTENSIONS.get(ext)))
        labels = storage.read_bytes(storage.join(uri, LABELS))
        return Source(self.name, uri, names, items, fingerprint([labels, *stats]))

    def prediction_listing(self, uri: str) -> Listing:
        rows = _rows(uri)
        items = [PredictItem(storage.join(uri, file), file, i + 1) for i, (file, _) in enumerate(rows)]
        return Listing(self.name, items, digest(f"{it.path}\t{version(it.uri)}" for it in items), labelled=False)


FLAT = register_kind(FlatKind())
