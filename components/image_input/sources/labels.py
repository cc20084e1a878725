"""What the kinds of labelling tools' exports share (``yolo``, ``voc``, ``label-studio``): their split
names, the rows of label entries rejected while scanning, the check that every image exists, and
their prediction listing (the converter's items, in its order, with their boxes as the labels).

A labelling tool's kind scans its export once (:class:`Scan`): the items to convert, the images it
names that are not there, the label entries it rejected (``rejected.jsonl`` rows naming the file
and line), the class names and, where the tool numbers its classes, its own ids. Converted, a
missing image is an error naming the fix (as for a COCO file); scored, it stays an item (its
prediction lists it as unreadable).
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from components.image_input import imaging
from components.image_input.imaging import EXTENSIONS
from components.image_input.sources.base import (
    Item,
    Listing,
    PredictItem,
    Source,
    SourceError,
    digest,
)
from trainer import storage
from trainer.storage import is_gcs

log = logging.getLogger(__name__)

# A tool's split names -> the project's (docs/tfrecords.md, splits); others are kept as they are.
SPLIT_NAMES = {"train": "train", "val": "validation", "valid": "validation", "validation": "validation", "test": "test"}


def split_name(name: str) -> str:
    """The project's name of a tool's split (``val`` and ``valid`` are ``validation``)."""
    return SPLIT_NAMES.get(name.lower(), name)


def image_format(path: str) -> str | None:
    """The format an image file's extension promises (``jpeg``, ``png``, ...), None for no image."""
    return EXTENSIONS.get(posixpath.splitext(path)[1].lower())


def relative(path: str, root: str) -> str:
    """``path`` relative to ``root`` ('/'-separated) when it lies under it, else as it is."""
    root = root.rstrip("/") + "/"
    return path[len(root) :] if path.startswith(root) else path


@dataclass
class Scan:
    """A labelling tool's export, scanned.

    Attributes:
        items: the images to convert, in a stable order, with their boxes (or class).
        classes: the class names, in class index order.
        task: ``detection`` or ``classification``.
        fingerprint: the export's identity (label files' contents, images' sizes and versions).
        rejected: label entries rejected while scanning, as ``rejected.jsonl`` rows.
        missing: the items of images the export names that are not there (scored, not converted).
        unlabelled: the items of images the export names but has not labelled yet (scored, not converted).
        ignored: what was passed over, by why (counted in ``dataset.json``'s ``ignored``).
        class_ids: class name -> the tool's own id, where it numbers its classes.
    """

    items: list[Item]
    classes: list[str]
    task: str
    fingerprint: str
    rejected: list[dict[str, Any]] = field(default_factory=list)
    missing: list[Item] = field(default_factory=list)
    unlabelled: list[Item] = field(default_factory=list)
    ignored: dict[str, int] = field(default_factory=dict)
    class_ids: dict[str, int] = field(default_factory=dict)


def reject(
    key: str, path: str, split: str | None, reason: str, file: str, line: int | None = None, **where: Any
) -> dict[str, Any]:
    """A ``rejected.jsonl`` row of a label entry: the image's key and path, its split, why, and where
    (the file, its line, or the tool's own ids of the entry: a Label Studio task and result).
    """
    row: dict[str, Any] = {"key": key, "path": path, "split": split, "reason": reason, "file": file}
    if line is not None:
        row["line"] = line
    row.update(where)
    return row


def source_of(kind: str, uri: str, scan: Scan, fix: str) -> Source:
    """The converter's :class:`Source` of a scan.

    Raises:
        SourceError: images are missing (one line naming some and ``fix``), or nothing is usable.
    """
    if scan.missing:
        raise SourceError(
            f"{uri}: {len(scan.missing)} images it names do not exist (e.g. {[it.key for it in scan.missing[:3]]}); "
            + fix
        )
    if not scan.items:
        reasons = sorted({r["reason"].split(":", 1)[0] for r in scan.rejected})
        raise SourceError(
            f"{uri}: nothing usable: no image with labels in it ({len(scan.rejected)} label entries rejected"
            f"{': ' + ', '.join(reasons[:4]) if reasons else ''}); see docs/labels.md for the layout"
        )
    if scan.rejected:
        log.warning(
            "%s: %d label entries rejected (e.g. %s); they are left out and listed in rejected.jsonl",
            uri,
            len(scan.rejected),
            scan.rejected[0]["reason"],
        )
    return Source(
        kind,
        uri,
        list(scan.classes),
        scan.items,
        scan.fingerprint,
        ignored=dict(scan.ignored),
        task=scan.task,
        rejected=list(scan.rejected),
        label_tool=kind,
        class_ids=dict(scan.class_ids),
    )


def file_size(uri: str) -> tuple[int, int] | None:
    """``(width, height)`` of an image from its headers, None when it cannot be read."""
    try:
        info = imaging.inspect(storage.read_bytes(uri))
    except (OSError, imaging.BadImage):
        return None
    return info.width, info.height


def truth(item: Item, classes: list[str]) -> Any:
    """An item's labels as batch prediction takes them: its class name, or its boxes in pixels
    (``{"box": [xmin, ymin, xmax, ymax], "class": name}``, crowd or difficult boxes left out).

    Boxes given as fractions of the image (YOLO) are scaled by the image's size, read from its
    header; None where it cannot be read (its prediction then lists it as unreadable).
    """
    if item.boxes is None:
        return classes[item.label]
    scale = (1.0, 1.0)
    if item.boxes.normalized:
        size = file_size(str(item.ref))
        if size is None:
            return None
        scale = (float(size[0]), float(size[1]))
    out = []
    for box in item.boxes.boxes:
        if box.is_crowd:
            continue
        x, y, w, h = (float(v) for v in box.bbox)
        sx, sy = scale
        out.append({"box": [x * sx, y * sy, (x + w) * sx, (y + h) * sy], "class": classes[box.label]})
    return out


def listing_of(kind: str, scan: Scan) -> Listing:
    """The prediction listing of a scan: the converter's items, in its order, with their labels, then
    the images it names but has not labelled yet, then those that are not there (scored too: their
    predictions list them as unreadable).
    """
    labelled = [(it, truth(it, scan.classes)) for it in scan.items]
    labelled += [(it, None) for it in scan.unlabelled + scan.missing]
    listed = [PredictItem(str(it.ref), it.key, n + 1, label) for n, (it, label) in enumerate(labelled)]
    return Listing(kind, listed, digest([scan.fingerprint, *(it.path for it in listed)]), labelled=True)


def resolver(root: str) -> Callable[[str], str]:
    """Joins a relative name to ``root`` (local or gs://); absolute paths and URIs stay as they are."""

    def join(name: str) -> str:
        if is_gcs(name) or name.startswith("/"):
            return name
        return storage.join(root, name) if is_gcs(root) else posixpath.normpath(posixpath.join(root, name))

    return join
