"""The source kinds, in one list: detection, opening, the workers' loaders and batch prediction's
listing go through it.

Which kind a source is: the kinds are offered it in :func:`claim_order`: by each kind's ``claim``
(a built-in name, then a file by its name, then a folder by what it holds, then any folder: the
image folder with one subfolder per class, last), and in registry order among kinds of one claim.

Adding a built-in kind: a module with a :class:`~components.image_input.sources.base.SourceKind`
subclass (its ``claim`` says when it is offered a source) and one line in :data:`BUILTIN_KINDS`.
A kind defined outside the package (an extension module named in ``LTP_EXTENSIONS``,
:mod:`trainer.extensions`) calls :func:`register_kind` when imported; the registry imports those
modules when it is first looked up, in every process.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from components.image_input.sources.arrays import as_uint8
from components.image_input.sources.base import (
    Claim,
    InputError,
    Item,
    Listing,
    Source,
    SourceError,
    SourceKind,
    exists,
)
from components.image_input.sources.coco import COCO
from components.image_input.sources.digits import DIGITS
from components.image_input.sources.fashion_mnist import FASHION_MNIST
from components.image_input.sources.folder import FOLDER
from components.image_input.sources.idx import IDX
from components.image_input.sources.label_studio import LABEL_STUDIO
from components.image_input.sources.manifest import CSV, JSONL
from components.image_input.sources.npz import NPZ
from components.image_input.sources.shapes import SHAPES
from components.image_input.sources.voc import VOC
from components.image_input.sources.yolo import YOLO
from trainer.registry import Registry
from trainer.storage import is_gcs, read_bytes  # read_bytes: the workers' local fast path (os.read)

# Among kinds of one claim, this order: a Label Studio export (a .json list) before COCO (any .json).
BUILTIN_KINDS: tuple[SourceKind, ...] = (
    FOLDER, CSV, JSONL, NPZ, IDX, YOLO, VOC, LABEL_STUDIO, COCO, FASHION_MNIST, DIGITS, SHAPES
)  # fmt: skip
# Built-in kinds first, then the extension modules' in the order they registered; claim_order sorts them.
_KINDS: Registry[SourceKind] = Registry("source format", error=SourceError, ordered=True)
for _kind in BUILTIN_KINDS:
    _KINDS.register(_kind.name, _kind)


def register_kind(source_kind: SourceKind) -> SourceKind:
    """Adds a source kind defined outside this package (an extension module's); the name must be new.

    Returns:
        The kind, so that a module can write ``BRIGHTNESS = register_kind(BrightnessKind())``.

    Raises:
        SourceError: another kind is registered under the same name, or it is no SourceKind (or one
            that says ``builtin`` instead of ``claim = Claim.NAME``).
    """
    if not isinstance(source_kind, SourceKind):
        raise SourceError(f"register_kind takes a SourceKind (components.image_input.sources), got {source_kind!r}")
    if source_kind.builtin != (source_kind.claim is Claim.NAME):
        raise SourceError(
            f"source kind {source_kind.name!r} says builtin: a built-in name's kind sets claim = Claim.NAME instead"
        )
    return _KINDS.register(source_kind.name, source_kind)


def kinds() -> tuple[SourceKind, ...]:
    """Every registered kind: the built-in ones, then the extension modules' (imported first).

    Raises:
        SourceError: a module named in ``LTP_EXTENSIONS`` cannot be imported.
    """
    return tuple(_KINDS.entries().values())


def kind_names() -> tuple[str, ...]:
    """The registered kinds' names (``--format``, ``source_format``), in registry order."""
    return tuple(k.name for k in kinds())


def expected() -> str:
    """What a source may be, for error messages and the command line's help."""
    registered = kinds()
    paths = list(dict.fromkeys(k.description for k in registered if not k.builtin))
    builtins = [k.description for k in registered if k.builtin]
    return f"{', '.join(paths)}, or a built-in name: {', '.join(builtins)}"


def kind(name: str) -> SourceKind:
    """The registered kind called ``name``.

    Raises:
        SourceError: no kind has that name.
    """
    return _KINDS.get(name)


def is_builtin(uri: str) -> bool:
    """A built-in name (``fashion-mnist``, ``digits``, ``shapes``, ``shapes:<count>``, an extension's)."""
    return any(k.builtin and k.matches(uri) for k in kinds())


def claim_order() -> tuple[SourceKind, ...]:
    """The kinds in the order they are offered a source: by ``claim``, then in registry order."""
    return tuple(sorted(kinds(), key=lambda k: k.claim))


def detect(uri: str) -> str:
    """The kind of a source: the first kind in :func:`claim_order` that claims it.

    Raises:
        SourceError: no such path (and no built-in name), or no kind claims it.
    """
    ordered = claim_order()
    for k in ordered:
        if k.claim is Claim.NAME and k.matches(uri):
            return k.name
    if not exists(uri):
        raise SourceError(f"source not found: {uri}; expected {expected()}")
    for k in ordered:
        if k.claim is not Claim.NAME and k.matches(uri):
            return k.name
    raise SourceError(f"unknown source format: {uri}; expected {expected()}")


def open_source(uri: str, kind_name: str | None = None, classes: list[str] | None = None) -> Source:
    """Scans a source into items (no image bytes are read).

    Args:
        uri: a path, gs:// URI or built-in name.
        kind_name: one of :func:`kind_names`; None detects it.
        classes: the declared class names (manifests); labels outside them are an error.

    Raises:
        SourceError: missing path, no images, unknown format, bad manifest, bad labels.
    """
    uri = str(uri)
    source_kind = kind(kind_name or detect(uri))
    if not source_kind.builtin and not exists(uri):
        raise SourceError(f"source not found: {uri}; expected {expected()}")
    source = source_kind.open(uri, classes)
    if not source.items:
        raise SourceError(f"no images in {uri}: the {source_kind.name} source lists none; expected {expected()}")
    return source


def prediction_listing(uri: str) -> Listing:
    """Lists a source's images for batch prediction (no image bytes are read): its kind's listing.

    Raises:
        SourceError: missing path, unknown format, or nothing to score (InputError).
    """
    uri = str(uri)
    source_kind = kind(detect(uri))
    listing = source_kind.prediction_listing(uri)
    if not listing.items:
        raise InputError(f"no images in {uri}: the {source_kind.name} source lists none; expected {expected()}")
    return listing


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
