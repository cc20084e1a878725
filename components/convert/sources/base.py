"""What every source kind shares: the scanned records, the kind interface, fingerprints and paths."""

from __future__ import annotations

import hashlib
import os
import posixpath
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainer import storage
from trainer.storage import is_gcs


class ConvertError(ValueError):
    """A conversion cannot go on; the message says what is wrong, what was expected and the fix."""


class SourceError(ConvertError):
    """The source as a whole is unusable (systemic): nothing is written."""


@dataclass(frozen=True, slots=True)
class Box:
    """One annotated object as the source file gives it; the worker checks and normalises it.

    Attributes:
        bbox: ``[x, y, width, height]`` in the declared image's pixels, unchecked (maybe malformed).
        annotation_id: the annotation's id in the file (named in rejected.jsonl rows).
        label: the class index into the source's classes.
        is_crowd: the COCO crowd flag, 0 or 1.
    """

    bbox: Any
    annotation_id: Any
    label: int
    is_crowd: int


@dataclass(frozen=True, slots=True)
class ImageBoxes:
    """The objects of one detection image and the image size its file declares.

    Attributes:
        boxes: the image's objects, in file order.
        declared: ``(width, height)`` the file declares for the image, None when it declares none.
    """

    boxes: tuple[Box, ...]
    declared: tuple[Any, Any] | None = None


@dataclass(slots=True)
class Item:
    """One image to convert: metadata only; ``ref`` says where the bytes are."""

    key: str
    label: int
    ref: Any  # a local path / gs:// URI, or (array name, index)
    split: str | None = None
    size: int = 0  # bytes, for shard planning (an estimate for array sources)
    expected: str | None = None  # the format the file extension promises
    extra: dict[str, Any] | None = None
    boxes: ImageBoxes | None = None
    order: float = 0.0  # the split hash, set when splits are assigned


@dataclass
class Source:
    """A scanned source: its classes and items, plus what was skipped while scanning."""

    kind: str
    uri: str
    classes: list[str]
    items: list[Item]
    fingerprint: str
    ignored: dict[str, int] = field(default_factory=dict)
    empty_classes: list[str] = field(default_factory=list)  # class folders without images (folder sources)
    options: dict[str, Any] = field(default_factory=dict)  # what a worker's loader needs
    task: str = "classification"  # what the dataset is for: a registered task's name, recorded in dataset.json
    # What was rejected while scanning (COCO annotations of images that do not exist), as rejected.jsonl rows.
    rejected: list[dict[str, Any]] = field(default_factory=list)

    def spec(self) -> dict[str, Any]:
        """Plain data from which a worker process rebuilds the loader."""
        return {"kind": self.kind, "uri": self.uri, **self.options}


class SourceKind:
    """One kind of source. A module per kind subclasses this; the registry lists one instance each.

    Attributes:
        name: the kind's name (``--format``, ``source_format``, ``dataset.json`` ``source.format``).
        description: what the kind looks like, for error messages ("a .npz file").
        builtin: a built-in name rather than a path: matched before any existence check.
        fallback: matched only when no other kind matches (an image folder: any folder).
    """

    name: str = ""
    description: str = ""
    builtin: bool = False
    fallback: bool = False

    def matches(self, uri: str) -> bool:
        """Whether ``uri`` (existing, unless the kind is built in) is of this kind."""
        raise NotImplementedError

    def open(self, uri: str, classes: list[str] | None) -> Source:
        """Scans the source into items (no image bytes are read).

        Args:
            uri: the path, gs:// URI or built-in name.
            classes: the declared class names, or None.
        """
        raise NotImplementedError

    def arrays(self, spec: dict[str, Any]) -> dict[str, np.ndarray]:
        """The worker's loader: the pixels of an array source by array name; empty when items are files."""
        return {}

    def cache_key(self, spec: dict[str, Any]) -> tuple:
        """What joins a worker's loader cache key besides the spec (array files: their sizes and times)."""
        return ()


def fingerprint(parts: list[Any]) -> str:
    """The sha256 of the parts' reprs: a source's identity for up-to-date checks and plan keys."""
    h = hashlib.sha256()
    for p in parts:
        h.update(repr(p).encode())
        h.update(b"\0")
    return h.hexdigest()


def exists(path: str) -> bool:
    """A file or a folder (on GCS: an object or a prefix with objects under it)."""
    if is_gcs(path):
        return storage.exists(path) or storage.isdir(path)
    return os.path.exists(path)


def stamp(path: str) -> tuple:
    """Sizes and modification times of a local file or of a folder's files (nothing for gs://)."""
    if is_gcs(path) or not os.path.exists(path):
        return ()
    paths = [os.path.join(path, n) for n in sorted(os.listdir(path))] if os.path.isdir(path) else [path]
    return tuple((p, st.st_size, st.st_mtime_ns) for p in paths for st in [os.stat(p)])


def base_dir(uri: str) -> str:
    """The folder a listing file sits in: relative paths inside it are resolved against it."""
    return posixpath.dirname(uri) if is_gcs(uri) else os.path.dirname(os.path.abspath(uri))


def resolve(base: str, path: str) -> str:
    """``path`` as listed in a file under ``base``: absolute paths and gs:// URIs stay as they are."""
    if is_gcs(path) or os.path.isabs(path):
        return path
    return posixpath.join(base, path) if is_gcs(base) else os.path.join(base, path)


def has_suffix(uri: str, suffix: str) -> bool:
    """Whether the source's name ends with ``suffix`` (any case, a trailing slash ignored)."""
    return uri.lower().rstrip("/").endswith(suffix)
