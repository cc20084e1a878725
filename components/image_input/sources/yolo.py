"""The Ultralytics YOLO layout: a ``data.yaml``, image folders or lists per split, one label file per image.

``data.yaml`` names the dataset root (``path``), the splits (``train``, ``val``, ``test``: each a
folder, a ``.txt`` list of images, or a list of either) and the classes (``names``: a list, or a
mapping from class number to name). An image's labels are in the file whose path is the image's
with its last ``/images/`` replaced by ``/labels/`` and its extension by ``.txt``; each line is
``class cx cy w h`` in fractions of the image (a sixth value, a confidence, is ignored), or a
polygon ``class x1 y1 x2 y2 ...`` that becomes its bounding box, as Ultralytics makes it. An empty
or missing label file is an image without objects. Paths are resolved as Ultralytics resolves them.
"""

from __future__ import annotations

import hashlib
import math
import os
import posixpath
from typing import Any

import yaml

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

# Bump when what the reader makes of the same files changes: it joins the fingerprint.
YOLO_READER_VERSION = 1
YAML_NAMES = ("data.yaml", "data.yml")
SPLITS = ("train", "val", "test")


def _yaml_file(uri: str) -> str | None:
    """The ``data.yaml`` of a source: the file itself, or the one in the folder; None when neither."""
    stripped = uri.rstrip("/")
    if not is_gcs(stripped):
        stripped = os.path.abspath(stripped)  # keys are relative to the root: one absolute form
    if stripped.lower().endswith((".yaml", ".yml")):
        return stripped if storage.exists(stripped) else None
    for name in YAML_NAMES:
        candidate = storage.join(stripped, name)
        if storage.exists(candidate):
            return candidate
    return None


def _read_yaml(path: str) -> tuple[dict[str, Any], bytes]:
    raw = storage.read_bytes(path)
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as err:
        raise SourceError(f"{path} is not valid YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(data, dict) or "names" not in data or not any(k in data for k in SPLITS):
        raise SourceError(
            f"{path}: expected a YOLO data.yaml with 'names' and at least one of {list(SPLITS)}, "
            f"got keys {sorted(data) if isinstance(data, dict) else type(data).__name__}"
        )
    return data, raw


def _names(data: dict[str, Any], path: str) -> tuple[list[str], dict[int, int], dict[str, int]]:
    """(class names in id order, YOLO id -> class index, name -> YOLO id)."""
    names = data["names"]
    if isinstance(names, list):
        by_id = dict(enumerate(names))
    elif isinstance(names, dict):
        try:
            by_id = {int(k): v for k, v in names.items()}
        except (TypeError, ValueError):
            raise SourceError(f"{path}: 'names' maps class numbers to names; got keys {list(names)[:5]}") from None
    else:
        raise SourceError(f"{path}: 'names' must be a list or a mapping of class numbers to names")
    ids = sorted(by_id)
    classes = [str(by_id[i]) for i in ids]
    twice = sorted({c for c in classes if classes.count(c) > 1})
    if twice:
        raise SourceError(f"{path}: names {twice} are given to more than one class number; give each class one name")
    nc = data.get("nc")
    if nc is not None and nc != len(classes):
        raise SourceError(f"{path}: nc is {nc} but names lists {len(classes)} classes; make them agree")
    return classes, {yid: n for n, yid in enumerate(ids)}, {str(by_id[i]): i for i in ids}


def _root(data: dict[str, Any], yaml_path: str) -> str:
    """The dataset root: ``path`` (relative to the yaml's folder, else as given), else the yaml's folder."""
    folder = posixpath.dirname(yaml_path)
    given = data.get("path")
    if not given:
        return folder
    given = str(given)
    if is_gcs(given) or given.startswith("/"):
        return given.rstrip("/")
    inside = labels.resolver(folder)(given)
    return inside if storage.isdir(inside) or not storage.isdir(given) else given


def _entry_path(root: str, entry: str) -> str:
    """A split entry resolved against the root; ``../x`` falls back to ``x`` as Ultralytics does."""
    path = labels.resolver(root)(entry)
    if entry.startswith("../") and not (storage.isdir(path) or storage.exists(path)):
        path = labels.resolver(root)(entry[3:])
    return path


Found = list[tuple[str, storage.FileInfo | None]]


def _split_images(root: str, entry: str, yaml_path: str, split: str) -> tuple[Found, int]:
    """(the images of one split entry with their size and version where listed, files passed over):
    a folder's images at any depth, or a list's lines (relative to the list's folder).
    """
    path = _entry_path(root, entry)
    if storage.isdir(path):
        files = storage.list_info(path)
        images = [(storage.join(path, f.path), f) for f in files if labels.image_format(f.path)]
        return images, len(files) - len(images)
    if path.lower().endswith(".txt") and storage.exists(path):
        join = labels.resolver(posixpath.dirname(path))
        lines = [line.strip() for line in storage.read_text(path).splitlines() if line.strip()]
        return [(join(line[2:] if line.startswith("./") else line), None) for line in lines], 0
    raise SourceError(
        f"{yaml_path}: {split}: {entry!r} ({path}) is neither a folder of images nor a .txt list of them; "
        "fix the path (relative to 'path', or to the yaml's folder)"
    )


def label_path(image: str) -> str:
    """The label file of an image: its last ``/images/`` becomes ``/labels/``, its extension ``.txt``."""
    head, sep, tail = image.rpartition("/images/")
    path = f"{head}/labels/{tail}" if sep else image
    return posixpath.splitext(path)[0] + ".txt"


def parse_line(text: str) -> tuple[int, list[float]] | str:
    """One label line as ``(class number, [x, y, w, h] fractions, top-left)``, or why it is rejected."""
    parts = text.split()
    if len(parts) < 5:
        return f"fewer than 5 values: a label line is 'class cx cy w h', got {len(parts)} values"
    try:
        cls, values = float(parts[0]), [float(v) for v in parts[1:]]
    except ValueError:
        return f"not a number: {text.strip()[:60]!r}"
    if not cls.is_integer() or cls < 0:
        return f"bad class number: {parts[0]!r} is not a whole number of 0 or more"
    if len(values) > 5 and len(values) % 2:
        return f"odd polygon: {len(values)} coordinates, a polygon's are x y pairs"
    coords = values[:4] if len(values) <= 5 else values  # a sixth value is a confidence, ignored
    if not all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in coords):
        return "coordinates outside [0, 1]: YOLO labels are fractions of the image's width and height"
    if len(values) <= 5:
        cx, cy, w, h = coords
        return int(cls), [cx - w / 2, cy - h / 2, w, h]
    xs, ys = values[0::2], values[1::2]  # a polygon's bounding box, as Ultralytics' segments2boxes
    return int(cls), [min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys)]


class _Reader:
    """One pass over a YOLO export: every split's images with their labels, the rejections, the ids."""

    def __init__(self, uri: str, yaml_path: str, data: dict[str, Any], root: str):
        self.uri, self.yaml_path, self.root = uri, yaml_path, root
        self.classes, self.index, self.class_ids = _names(data, yaml_path)
        self.scan = Scan([], self.classes, "detection", "", class_ids=self.class_ids)
        self.seen: dict[str, str] = {}  # image path -> its split
        self.names: dict[str, tuple[str, str]] = {}  # image file name -> (split, path)
        self.label_digest = hashlib.sha256()
        self.fp: list[Any] = []

    def key(self, path: str) -> str:
        return labels.relative(path, self.root)

    def duplicate(self, path: str, split: str) -> str | None:
        """Why an image is a duplicate (listed twice, or the same file name and bytes in another split)."""
        if path in self.seen:
            where = "this split" if self.seen[path] == split else f"split {self.seen[path]}"
            return f"duplicate image: also listed in {where}; one image in two places would be two examples"
        name = posixpath.basename(path)
        if name in self.names and self.names[name][0] != split:
            other_split, other = self.names[name]
            if _same_bytes(path, other):
                return (
                    f"duplicate image: {name} is also in split {other_split} ({self.key(other)}) with the same "
                    "bytes; one image in two splits leaks the evaluation: remove one"
                )
        return None

    def add_split(self, split: str, entries: list[str]) -> None:
        for entry in entries:
            images, passed = _split_images(self.root, str(entry), self.yaml_path, split)
            if passed:
                self.scan.ignored["not_image"] = self.scan.ignored.get("not_image", 0) + passed
            for path, info in images:
                self.add_image(path, labels.split_name(split), info)

    def add_image(self, path: str, split: str, info: storage.FileInfo | None) -> None:
        key = self.key(path)
        why = self.duplicate(path, split)
        if why is not None:
            self.scan.rejected.append(reject(key, path, split, why, key))
            return
        self.seen[path] = split
        self.names.setdefault(posixpath.basename(path), (split, path))
        info = info or storage.stat(path)
        item = Item(key, NO_LABEL, path, split, 0 if info is None else info.size, labels.image_format(path))
        if info is None:
            self.scan.missing.append(item)
            return
        self.fp.append((key, info.size, info.version))
        item.boxes = ImageBoxes(self.boxes(path, key, split), None, normalized=True)
        self.scan.items.append(item)

    def boxes(self, image: str, key: str, split: str) -> tuple[Box, ...]:
        path = label_path(image)
        try:
            raw = storage.read_bytes(path)
        except FileNotFoundError:
            return ()  # no label file: an image without objects
        name = self.key(path)
        self.label_digest.update(f"{name}\0".encode() + raw + b"\0")
        out = []
        for n, text in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
            if not text.strip():
                continue
            parsed = parse_line(text)
            if isinstance(parsed, str):
                self.scan.rejected.append(reject(key, image, split, parsed, name, n))
                continue
            cls, bbox = parsed
            if cls not in self.index:
                raise SourceError(
                    f"{self.yaml_path}: names has classes {sorted(self.index)}, but {name} line {n} has class {cls}; "
                    "add the class to names (or fix the label)"
                )
            out.append(Box(bbox, f"{name}:{n}", self.index[cls], 0))
        return tuple(out)

    def done(self, yaml_raw: bytes) -> Scan:
        parts = ["yolo", YOLO_READER_VERSION, yaml_raw, self.label_digest.hexdigest(), *self.fp]
        parts += [("missing", it.key) for it in self.scan.missing]
        self.scan.fingerprint = fingerprint(parts)
        return self.scan


def _same_bytes(a: str, b: str) -> bool:
    sa, sb = storage.stat(a), storage.stat(b)
    if sa is None or sb is None or sa.size != sb.size:
        return False
    return storage.read_bytes(a) == storage.read_bytes(b)


def scan_yolo(uri: str) -> Scan:
    """Scans a YOLO export (a ``data.yaml`` or a folder holding one) into items, rejections and classes.

    Raises:
        SourceError: no data.yaml, a malformed one, a split that points nowhere, or a label's class
            number that ``names`` lacks (one line naming the number and the file).
    """
    yaml_path = _yaml_file(uri)
    if yaml_path is None:
        raise SourceError(f"{uri}: no data.yaml there; a YOLO dataset is described by one (docs/labels.md)")
    data, raw = _read_yaml(yaml_path)
    reader = _Reader(uri, yaml_path, data, _root(data, yaml_path))
    for split in SPLITS:
        entries = data.get(split)
        if entries:
            reader.add_split(split, entries if isinstance(entries, list) else [entries])
    return reader.done(raw)


class YoloKind(SourceKind):
    """An Ultralytics YOLO dataset: its ``data.yaml``, or the folder that holds one."""

    name = "yolo"
    description = "a YOLO data.yaml (or a folder holding one)"
    claim = Claim.LAYOUT

    def matches(self, uri: str) -> bool:
        path = _yaml_file(uri)
        if path is None:
            return False
        try:
            _read_yaml(path)
        except SourceError:
            return False
        return True

    def open(self, uri: str, classes: list[str] | None) -> Source:
        scan = scan_yolo(uri)
        if classes is not None and list(classes) != scan.classes:
            raise SourceError(
                f"{uri}: the declared classes {list(classes)} are not data.yaml's names {scan.classes}; "
                "drop the declared classes (names decides) or make them equal"
            )
        return labels.source_of(self.name, uri, scan, "fix the train/val/test paths or the image lists")

    def prediction_listing(self, uri: str) -> Listing:
        return labels.listing_of(self.name, scan_yolo(uri))


YOLO = YoloKind()
