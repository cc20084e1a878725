"""The source kinds, in one list: detection, opening, and the workers' loaders go through it.

Adding a kind: a module with a :class:`~components.convert.sources.base.SourceKind` subclass and
one line in :data:`REGISTRY`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from components.convert.sources.arrays import as_uint8
from components.convert.sources.base import Item, Source, SourceError, SourceKind, exists
from components.convert.sources.coco import COCO
from components.convert.sources.digits import DIGITS
from components.convert.sources.fashion_mnist import FASHION_MNIST
from components.convert.sources.folder import FOLDER
from components.convert.sources.idx import IDX
from components.convert.sources.manifest import CSV, JSONL
from components.convert.sources.npz import NPZ
from components.convert.sources.shapes import SHAPES
from trainer.storage import is_gcs, read_bytes  # read_bytes: the workers' local fast path (os.read)

REGISTRY: tuple[SourceKind, ...] = (FOLDER, CSV, JSONL, NPZ, IDX, COCO, FASHION_MNIST, DIGITS, SHAPES)
KINDS = tuple(k.name for k in REGISTRY)
BUILTINS = tuple(k.name for k in REGISTRY if k.builtin)
TASKS = ("classification", "detection")
_BY_NAME = {k.name: k for k in REGISTRY}


def _expected() -> str:
    paths = list(dict.fromkeys(k.description for k in REGISTRY if not k.builtin))
    builtins = [k.description for k in REGISTRY if k.builtin]
    return f"{', '.join(paths)}, or a built-in name: {', '.join(builtins)}"


EXPECTED = _expected()  # what a source may be, for error messages


def kind(name: str) -> SourceKind:
    """The registered kind called ``name``.

    Raises:
        SourceError: no kind has that name.
    """
    try:
        return _BY_NAME[name]
    except KeyError:
        raise SourceError(f"unknown source format {name!r}; expected one of {', '.join(KINDS)}") from None


def is_builtin(uri: str) -> bool:
    """A built-in name: ``fashion-mnist``, ``digits``, ``shapes`` or ``shapes:<count>``."""
    return any(k.builtin and k.matches(uri) for k in REGISTRY)


def detect(uri: str) -> str:
    """The kind of a source from its name and, for folders, what is inside."""
    for k in REGISTRY:
        if k.builtin and k.matches(uri):
            return k.name
    if not exists(uri):
        raise SourceError(f"source not found: {uri}; expected {EXPECTED}")
    candidates = [k for k in REGISTRY if not k.builtin and not k.fallback] + [k for k in REGISTRY if k.fallback]
    for k in candidates:
        if k.matches(uri):
            return k.name
    raise SourceError(f"unknown source format: {uri}; expected {EXPECTED}")


def open_source(uri: str, kind_name: str | None = None, classes: list[str] | None = None) -> Source:
    """Scans a source into items (no image bytes are read).

    Args:
        uri: a path, gs:// URI or built-in name.
        kind_name: one of ``KINDS``; None detects it.
        classes: the declared class names (manifests); labels outside them are an error.

    Raises:
        SourceError: missing path, no images, unknown format, bad manifest, bad labels.
    """
    uri = str(uri)
    source_kind = kind(kind_name or detect(uri))
    if not source_kind.builtin and not exists(uri):
        raise SourceError(f"source not found: {uri}; expected {EXPECTED}")
    source = source_kind.open(uri, classes)
    if not source.items:
        raise SourceError(f"no images in {uri}: the {source_kind.name} source lists none; expected {EXPECTED}")
    return source


class Loader:
    """Reads one item's content in a worker: ``("bytes", data)`` or ``("array", pixels)``."""

    def __init__(self, spec: dict[str, Any]):
        self.kind = spec["kind"]
        self.images: dict[str, np.ndarray] = kind(self.kind).arrays(spec)

    def load(self, item: Item) -> tuple[str, Any]:
        if self.images:
            name, i = item.ref
            return "array", as_uint8(self.images[name][i])
        return "bytes", read_bytes(item.ref)

    def _fetch(self, item: Item) -> tuple[str, Any] | OSError:
        try:
            return self.load(item)
        except OSError as err:
            return err

    def load_all(self, items: list[Item]) -> Iterator[tuple[str, Any] | OSError]:
        """Loads items in order; gs:// objects are fetched by threads (each request waits on the network)."""
        if self.images or not items or not is_gcs(str(items[0].ref)):
            yield from map(self._fetch, items)
            return
        with ThreadPoolExecutor(max_workers=16) as pool:
            yield from pool.map(self._fetch, items)


_LOADERS: dict[str, Loader] = {}


def loader(spec: dict[str, Any]) -> Loader:
    """The process's cached loader for a source spec (arrays are read once per process).

    The cache key adds the kind's own rule to the spec: for array files their sizes and times, so
    that a file replaced since is read again.
    """
    key = json.dumps(spec, sort_keys=True)
    stamp = kind(spec["kind"]).cache_key(spec)
    if stamp:
        key += repr(stamp)
    if key not in _LOADERS:
        _LOADERS.clear()  # one source at a time: an earlier one's arrays are let go
        _LOADERS[key] = Loader(spec)
    return _LOADERS[key]
