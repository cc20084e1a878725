"""What every source kind shares: the scanned records, the prediction listing, the kind interface,
the order in which kinds claim a source, fingerprints and paths.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import hashlib
import os
import posixpath
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from trainer import records, storage
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
        normalized: the boxes are fractions of the image's width and height (YOLO's), not pixels:
            the worker scales them by the image file's true size.
    """

    boxes: tuple[Box, ...]
    declared: tuple[Any, Any] | None = None
    normalized: bool = False


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
    # What was rejected while scanning (COCO annotations of images that do not exist, a labelling tool's
    # bad label lines), as rejected.jsonl rows.
    rejected: list[dict[str, Any]] = field(default_factory=list)
    # A labelling tool's export (yolo, voc, label-studio): its name, and the tool's own id of each class
    # where it numbers them; recorded in dataset.json's source.labels with the rejected label entries.
    label_tool: str | None = None
    class_ids: dict[str, int] = field(default_factory=dict)

    def spec(self) -> dict[str, Any]:
        """Plain data from which a worker process rebuilds the loader."""
        return {"kind": self.kind, "uri": self.uri, **self.options}


class InputError(SourceError):
    """An input cannot be listed for prediction; the message says what was found and what is expected."""


@dataclasses.dataclass(frozen=True)
class PredictItem(records.Record):
    """One image to score (batch prediction): where its bytes are, the name its prediction carries.

    Attributes:
        uri: where its bytes are: a local path or ``gs://`` URI; for an item with a ``record``,
            the container the record is in (a converted dataset's TFRecord file, an array source).
        path: the name its prediction carries: relative to the input's folder where it has one.
        image_id: the COCO image id (from a COCO input; else assigned, 1-based, in list order).
        label: the truth where the input gives one: a class name, or (COCO) a list of
            ``{"box": [xmin, ymin, xmax, ymax] pixels, "class": name}``.
        record: the image's index in ``uri`` (converted datasets, array sources); None for a file.
    """

    _what = "batch prediction item"
    _omit_empty = ("label", "record")

    uri: str
    path: str
    image_id: int
    label: Any = None
    record: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class Listing:
    """An input, listed for prediction.

    Attributes:
        kind: what it is: the source kind's name (``list`` for both CSV and JSONL), or
            ``dataset`` (a converted dataset, which batch prediction lists itself). The items
            of a listing whose items have a ``record`` are read by the kind of that name
            (:meth:`SourceKind.prediction_reader`).
        items: the images in a stable order.
        fingerprint: sha256 of what was listed (paths, sizes, versions): equal when nothing changed.
        labelled: whether the input gives labels (then the join scores the predictions).
    """

    kind: str
    items: list[PredictItem]
    fingerprint: str
    labelled: bool


class Claim(enum.IntEnum):
    """When a kind is offered a source (:func:`~.registry.detect`): the lower first, and the
    registry's order among kinds of one claim.

    Attributes:
        NAME: a built-in name (``digits``, ``shapes:500``), matched before any path is looked at.
        FILE: a file, by its name (``.csv``, ``.jsonl``, ``.npz``, ``.json``).
        LAYOUT: a folder by what it holds (IDX files; a Pascal VOC root's ``Annotations/``, a YOLO
            ``data.yaml``): before any folder is taken for an image folder.
        ANY_FOLDER: any folder: the image folder with one subfolder per class, the last resort.
    """

    NAME = 0
    FILE = 1
    LAYOUT = 2
    ANY_FOLDER = 3


class SourceKind(abc.ABC):
    """One kind of source. A module per kind subclasses this; the registry lists one instance each.

    A kind serves both steps that read images: the convert step (:meth:`open`, :meth:`arrays`)
    and batch prediction (:meth:`prediction_listing`, :meth:`prediction_reader`). Both are
    abstract where they must be: a kind that converts but cannot be scored cannot be made.

    Attributes:
        name: the kind's name (``--format``, ``source_format``, ``dataset.json`` ``source.format``).
        description: what the kind looks like, for error messages ("a .npz file").
        claim: when the kind is offered a source (:class:`Claim`).
    """

    name: str = ""
    description: str = ""
    claim: Claim = Claim.FILE

    @property
    def builtin(self) -> bool:
        """A built-in name rather than a path: matched before any existence check."""
        return self.claim is Claim.NAME

    @abc.abstractmethod
    def matches(self, uri: str) -> bool:
        """Whether ``uri`` (existing, unless the kind is built in) is of this kind."""

    @abc.abstractmethod
    def open(self, uri: str, classes: list[str] | None) -> Source:
        """Scans the source into items (no image bytes are read).

        Args:
            uri: the path, gs:// URI or built-in name.
            classes: the declared class names, or None.
        """

    @abc.abstractmethod
    def prediction_listing(self, uri: str) -> Listing:
        """The images of the source to score (batch prediction), in a stable order, with a
        fingerprint that changes when they do. Labels are optional: only where the input gives
        them (a list's ``label`` column, a COCO file's boxes); an image the source names but that
        is missing stays an item (its prediction lists it as unreadable).

        Raises:
            SourceError: nothing to score there; the message says what was found.
        """

    def prediction_reader(self, uri: str) -> Callable[[str], bytes]:
        """Reads one prediction item's bytes, given its ``uri`` (``<uri>#<record>`` for an item
        with a record): files through storage, unless the kind's items are records of its own.
        """
        return storage.read_bytes

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


def digest(lines: Iterable[str]) -> str:
    """The sha256 of text lines: a prediction listing's fingerprint."""
    h = hashlib.sha256()
    for line in lines:
        h.update(line.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def version(uri: str) -> str:
    """``size:version`` of a file, ``missing`` when there is none (its prediction lists it)."""
    info = storage.stat(uri)
    return "missing" if info is None else f"{info.size}:{info.version}"
