"""Pascal VOC: ``Annotations/<id>.xml`` per image, the images in ``JPEGImages/``, the splits in
``ImageSets/Main/<split>.txt`` when there are any.

An annotation gives the image's file name and ``size``, and per object its ``name``, ``bndbox``
(``xmin ymin xmax ymax``, 1-based pixels, both ends inside the box), ``difficult`` and
``truncated``. A box becomes ``[xmin - 1, ymin - 1, xmax - xmin + 1, ymax - ymin + 1]`` in the
project's ``[x, y, width, height]`` pixels (its pixel edges). A ``difficult`` object is kept as a
crowd box (``image/object/is_crowd``: ignored by the loss and by the evaluation, as VOC's own
evaluation ignores it); ``difficult`` and ``truncated`` are also kept per box as ``extra/difficult``
and ``extra/truncated`` lists.
"""

from __future__ import annotations

import hashlib
import os
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from typing import Any

from components.image_input.sources import labels
from components.image_input.sources.base import (
    Box,
    Claim,
    ImageBoxes,
    Item,
    Listing,
    Source,
    SourceError,
    SourceKind,
    fingerprint,
)
from components.image_input.sources.labels import Scan, reject
from trainer import storage
from trainer.storage import is_gcs
from trainer.tfrecords import NO_LABEL

VOC_READER_VERSION = 1
SET_NAMES = ("train", "val", "test", "trainval")


@dataclass(frozen=True)
class VocObject:
    """One object of an annotation: its class name, its box as VOC gives it, its flags."""

    name: str
    box: tuple[float, float, float, float]  # xmin, ymin, xmax, ymax: 1-based, inclusive
    difficult: int
    truncated: int


def _root(uri: str) -> str:
    return uri.rstrip("/") if is_gcs(uri) else os.path.abspath(uri)


def is_voc(uri: str) -> bool:
    """A folder holding ``Annotations/`` and ``JPEGImages/``."""
    root = _root(uri)
    return storage.isdir(storage.join(root, "Annotations")) and storage.isdir(storage.join(root, "JPEGImages"))


def _number(node: Any, tag: str) -> float:
    text = node.findtext(tag)
    if text is None:
        raise ValueError(f"no <{tag}>")
    return float(text.strip())


def _flag(node: Any, tag: str) -> int:
    text = (node.findtext(tag) or "0").strip()
    return 1 if text in ("1", "true", "True") else 0


def parse_object(node: Any) -> VocObject | str:
    """One ``<object>``, or why it is rejected."""
    name = (node.findtext("name") or "").strip()
    if not name:
        return "no class name: an object needs a <name>"
    box = node.find("bndbox")
    if box is None:
        return "no box: an object needs a <bndbox>"
    try:
        xmin, ymin, xmax, ymax = (_number(box, t) for t in ("xmin", "ymin", "xmax", "ymax"))
    except ValueError as err:
        return f"malformed box: {err}; <bndbox> holds xmin ymin xmax ymax as numbers"
    if xmax <= xmin or ymax <= ymin:
        return (
            f"empty or inverted box: xmin {xmin:g} xmax {xmax:g}, ymin {ymin:g} ymax {ymax:g} "
            "(VOC boxes need xmax > xmin and ymax > ymin)"
        )
    return VocObject(name, (xmin, ymin, xmax, ymax), _flag(node, "difficult"), _flag(node, "truncated"))


def parse_annotation(raw: bytes) -> tuple[str | None, tuple[int, int] | None, list[tuple[int, Any]]]:
    """(the image's file name, its declared ``(width, height)``, ``(object number, VocObject or reason)``).

    Raises:
        ElementTree.ParseError: not XML.
    """
    root = ElementTree.fromstring(raw)
    filename = (root.findtext("filename") or "").strip() or None
    size = root.find("size")
    declared = None
    if size is not None:
        try:
            declared = (int(_number(size, "width")), int(_number(size, "height")))
        except ValueError:
            declared = None
    objects = [(n, parse_object(node)) for n, node in enumerate(root.findall("object"), 1)]
    return filename, declared if declared and min(declared) > 0 else None, objects


def _outside(obj: VocObject, declared: tuple[int, int] | None) -> str | None:
    """Why a box lies wholly outside the declared image, None when it does not (or no size is declared)."""
    if declared is None:
        return None
    x, y, w, h = voc_box(obj.box)
    if x >= declared[0] or y >= declared[1] or x + w <= 0 or y + h <= 0:
        return f"box outside the image: {list(obj.box)} in a {declared[0]}x{declared[1]} image"
    return None


def voc_box(box: tuple[float, float, float, float]) -> list[float]:
    """A VOC box (1-based, inclusive) as ``[x, y, width, height]`` pixel edges."""
    xmin, ymin, xmax, ymax = box
    return [xmin - 1.0, ymin - 1.0, xmax - xmin + 1.0, ymax - ymin + 1.0]


def _image_sets(root: str) -> tuple[list[tuple[str, str, int, str]], int]:
    """``(id, split, line, set file)`` from ``ImageSets/Main/<split>.txt`` in order, and the XML count
    when there are none (then every annotation, its split hashed: an empty split name).
    """
    main = storage.join(root, "ImageSets", "Main")
    present = {f.path for f in storage.list_info(main, recursive=False)}
    names = [n for n in SET_NAMES if f"{n}.txt" in present]
    if "train" in names or "val" in names:
        names = [n for n in names if n != "trainval"]  # trainval is train + val: read once
    out = []
    for name in names:
        rel = f"ImageSets/Main/{name}.txt"
        split = labels.split_name("train" if name == "trainval" else name)
        for n, line in enumerate(storage.read_text(storage.join(root, rel)).splitlines(), 1):
            if line.split():
                out.append((line.split()[0], split, n, rel))
    return out, len(names)


class _Reader:
    """One pass over a VOC folder."""

    def __init__(self, root: str, classes: list[str] | None):
        self.root, self.declared_classes = root, classes
        self.scan = Scan([], [], "detection", "")
        self.images = {f.path: f for f in storage.list_info(storage.join(root, "JPEGImages"))}
        self.objects: dict[str, tuple[str, list[tuple[int, VocObject]]]] = {}  # key -> (xml, objects)
        self.digest = hashlib.sha256()
        self.fp: list[Any] = []

    def ids(self) -> list[tuple[str, str | None, int | None, str | None]]:
        sets, count = _image_sets(self.root)
        xmls = sorted(f.path for f in storage.list_info(storage.join(self.root, "Annotations"), recursive=False))
        xmls = [p[:-4] for p in xmls if p.lower().endswith(".xml")]
        if not count:
            return [(i, None, None, None) for i in xmls]
        listed = {i for i, *_ in sets}
        outside = sum(1 for i in xmls if i not in listed)
        if outside:
            self.scan.ignored["not_in_image_sets"] = outside
        return [(i, s, n, f) for i, s, n, f in sets]

    def image_of(self, image_id: str, filename: str | None) -> str:
        for name in ([filename] if filename else []) + [f"{image_id}{ext}" for ext in (".jpg", ".jpeg", ".png")]:
            if name in self.images:
                return name
        return filename or f"{image_id}.jpg"

    def add(self, image_id: str, split: str | None, where: tuple[str | None, int | None], seen: dict) -> None:
        xml = f"Annotations/{image_id}.xml"
        key_of_set = f"JPEGImages/{image_id}"
        if image_id in seen:
            why = f"duplicate image: {image_id} is also in split {seen[image_id]}; one image in two places leaks"
            self.scan.rejected.append(reject(key_of_set, key_of_set, split, why, where[0] or xml, where[1]))
            return
        seen[image_id] = split
        try:
            raw = storage.read_bytes(storage.join(self.root, xml))
            filename, declared, objects = parse_annotation(raw)
        except FileNotFoundError:
            why = "no annotation: the image set lists an image without Annotations/<id>.xml"
            self.scan.rejected.append(reject(key_of_set, key_of_set, split, why, where[0] or xml, where[1]))
            return
        except ElementTree.ParseError as err:
            self.scan.rejected.append(reject(key_of_set, key_of_set, split, f"unreadable annotation: {err}", xml))
            return
        self.digest.update(xml.encode() + b"\0" + raw + b"\0")
        self.add_item(self.image_of(image_id, filename), split, declared, objects, xml)

    def add_item(self, name: str, split: str | None, declared: Any, objects: list, xml: str) -> None:
        key, path = f"JPEGImages/{name}", storage.join(self.root, "JPEGImages", name)
        kept = []
        for n, obj in objects:
            why = obj if isinstance(obj, str) else _outside(obj, declared)
            if why is not None:
                self.scan.rejected.append(reject(key, path, split, why, xml, n))
            else:
                kept.append((n, obj))
        info = self.images.get(name)
        item = Item(key, NO_LABEL, path, split, 0 if info is None else info.size, labels.image_format(name))
        if info is None:
            self.scan.missing.append(item)
            return
        self.fp.append((key, info.size, info.version))
        self.objects[key] = (xml, kept)
        item.boxes = ImageBoxes((), declared)
        self.scan.items.append(item)

    def done(self) -> Scan:
        """Classes from the names found (sorted) or declared; the boxes then get their class index."""
        found = sorted({o.name for _, objs in self.objects.values() for _, o in objs})
        classes = list(self.declared_classes) if self.declared_classes is not None else found
        unknown = sorted(set(found) - set(classes))
        if unknown:
            raise SourceError(
                f"{self.root}: objects of classes {unknown} are not among the declared classes {classes}; "
                "declare them too (or drop the declared classes: the names found decide)"
            )
        index = {c: i for i, c in enumerate(classes)}
        for item in self.scan.items:
            self.fill(item, *self.objects[item.key], index)
        self.scan.classes = classes
        parts = ["voc", VOC_READER_VERSION, self.digest.hexdigest(), *self.fp, *(it.key for it in self.scan.missing)]
        self.scan.fingerprint = fingerprint(parts)
        return self.scan

    def fill(self, item: Item, xml: str, objects: list[tuple[int, VocObject]], index: dict[str, int]) -> None:
        boxes = tuple(Box(voc_box(o.box), f"{xml}#{n}", index[o.name], o.difficult) for n, o in objects)
        item.boxes = ImageBoxes(boxes, item.boxes.declared)
        if boxes and item.boxes.declared is not None:
            # Per-box flags, aligned with the boxes: with a declared size no box is dropped in the
            # worker (an image whose size differs is rejected whole; the scan rejected empty and outside
            # boxes), so the lists stay aligned with the record's boxes.
            item.extra = {
                "difficult": [o.difficult for _, o in objects],
                "truncated": [o.truncated for _, o in objects],
            }


def scan_voc(uri: str, classes: list[str] | None = None) -> Scan:
    """Scans a Pascal VOC folder into items (with their boxes), rejections and classes.

    Raises:
        SourceError: not a VOC folder, or an object's class outside the declared classes.
    """
    root = _root(uri)
    if not is_voc(root):
        raise SourceError(f"{uri}: not a Pascal VOC folder; expected Annotations/ and JPEGImages/ in it")
    reader = _Reader(root, classes)
    seen: dict[str, str | None] = {}
    for image_id, split, line, set_file in reader.ids():
        reader.add(image_id, split, (set_file, line), seen)
    return reader.done()


class VocKind(SourceKind):
    """A Pascal VOC folder (``Annotations/``, ``JPEGImages/``, maybe ``ImageSets/Main/``)."""

    name = "voc"
    description = "a Pascal VOC folder (Annotations/, JPEGImages/)"
    claim = Claim.LAYOUT

    def matches(self, uri: str) -> bool:
        return is_voc(uri)

    def open(self, uri: str, classes: list[str] | None) -> Source:
        return labels.source_of(self.name, uri, scan_voc(uri, classes), "fix <filename> or add the images")

    def prediction_listing(self, uri: str) -> Listing:
        return labels.listing_of(self.name, scan_voc(uri))


VOC = VocKind()
