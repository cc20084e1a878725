"""A Label Studio JSON export: a list of tasks, each an image (``data``) and its annotations.

An annotation's ``result`` holds ``rectanglelabels`` (detection: ``value.x/y/width/height`` in
percent of ``original_width``/``original_height``, ``value.rectanglelabels`` the class) or
``choices`` (classification: ``value.choices``). Per task, the ``ground_truth`` annotation is
read, else the latest one that was not cancelled (``was_cancelled``); a task without one is not
labelled yet (scored, not converted). Images are named by a path relative to the export's folder,
an absolute path or ``gs://`` URI, or Label Studio's own URLs: ``/data/local-files/?d=<path>``
(local storage: ``<path>`` relative to the export's folder, as to Label Studio's document root) and
``/data/upload/<project>/<file>`` (``upload/...`` or ``media/upload/...`` beside the export, or the
file itself there). The project's labeling config, saved beside the export as ``<export>.xml`` or
``label_config.xml``, names the controls and labels that are valid; without it, every control is
and the labels found make the classes.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import posixpath
import urllib.parse
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
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
    base_dir,
    fingerprint,
    has_suffix,
)
from components.image_input.sources.labels import Scan, reject
from trainer import storage
from trainer.storage import is_gcs
from trainer.tfrecords import NO_LABEL

LS_READER_VERSION = 1
RECTANGLES, CHOICES = "rectanglelabels", "choices"
TASK_OF = {RECTANGLES: "detection", CHOICES: "classification"}  # what a dataset of each kind of result is for


@dataclass
class LabelConfig:
    """What a labeling config declares: the image's data key, the controls and their labels."""

    image_key: str | None = None
    controls: dict[str, dict[str, list[str]]] = field(default_factory=lambda: {RECTANGLES: {}, CHOICES: {}})


def parse_config(text: str, where: str) -> LabelConfig:
    """The controls of a labeling config (``<RectangleLabels name=...><Label value=.../>``, ``<Choices>``).

    Raises:
        SourceError: not XML.
    """
    try:
        root = ElementTree.fromstring(text)
    except ElementTree.ParseError as err:
        raise SourceError(
            f"{where}: the labeling config is not XML ({err}); save it from Settings > Labeling Interface"
        ) from None
    config = LabelConfig()
    for node in root.iter():
        tag = node.tag.lower()
        if tag == "image" and config.image_key is None:
            config.image_key = (node.get("value") or "").lstrip("$") or None
        elif tag in (RECTANGLES, CHOICES):
            child = "label" if tag == RECTANGLES else "choice"
            values = [c.get("value", "") for c in node if c.tag.lower() == child]
            config.controls[tag][node.get("name", "")] = values
    return config


def _config(uri: str) -> tuple[LabelConfig | None, bytes]:
    base, stem = base_dir(uri), posixpath.splitext(posixpath.basename(uri))[0]
    for name in (f"{stem}.xml", "label_config.xml"):
        path = storage.join(base, name)
        if storage.exists(path):
            raw = storage.read_bytes(path)
            return parse_config(raw.decode("utf-8", errors="replace"), path), raw
    return None, b""


def _read(uri: str) -> tuple[list[dict[str, Any]], bytes]:
    raw = storage.read_bytes(uri)
    try:
        tasks = json.loads(raw)
    except ValueError as err:
        raise SourceError(f"{uri} is not valid JSON: {err}") from None
    if not isinstance(tasks, list) or not all(isinstance(t, dict) and isinstance(t.get("data"), dict) for t in tasks):
        raise SourceError(
            f"{uri}: expected Label Studio's JSON export (a list of tasks, each with 'data' and 'annotations'); "
            "export the project as JSON (not JSON-MIN or CSV)"
        )
    return tasks, raw


def image_ref(task: dict[str, Any], config: LabelConfig | None) -> str | None:
    """The task's image: the config's data key, else ``image``, else its one string value."""
    data = task["data"]
    key = config.image_key if config is not None and config.image_key else None
    if key is None:
        key = "image" if "image" in data else next((k for k, v in data.items() if isinstance(v, str)), None)
    value = data.get(key) if key is not None else None
    return value if isinstance(value, str) and value else None


def candidates(ref: str, base: str) -> list[str]:
    """Where an image named ``ref`` in the export may be, in the order tried."""
    join = labels.resolver(base)
    if ref.startswith("/data/local-files/"):
        found = urllib.parse.parse_qs(urllib.parse.urlparse(ref).query).get("d")
        return [join(found[0])] if found else []
    if ref.startswith("/data/upload/"):
        rel = urllib.parse.unquote(ref[len("/data/") :])
        return [join(rel), join(f"media/{rel}"), join(posixpath.basename(rel))]
    if is_gcs(ref) or ref.startswith("/"):
        return [ref]
    if "://" in ref:
        return []  # http(s), s3: not read here
    return [join(urllib.parse.unquote(ref))]


def annotation_of(task: dict[str, Any], ignored: dict[str, int]) -> dict[str, Any] | None:
    """The task's annotation read: ``ground_truth``, else the latest not cancelled; None when none."""
    annotations = [a for a in task.get("annotations") or [] if isinstance(a, dict)]
    usable = [a for a in annotations if not a.get("was_cancelled")]
    if len(usable) < len(annotations):
        ignored["cancelled_annotations"] = ignored.get("cancelled_annotations", 0) + len(annotations) - len(usable)
    if len(usable) > 1:
        ignored["other_annotations"] = ignored.get("other_annotations", 0) + len(usable) - 1
    truth = [a for a in usable if a.get("ground_truth")]
    return (truth or usable or [None])[-1]


def result_kind(tasks: list[dict[str, Any]], config: LabelConfig | None) -> str:
    """The results read: rectangles where any is drawn (or the config has them), else choices."""
    types = {
        r.get("type")
        for t in tasks
        for a in t.get("annotations") or []
        if isinstance(a, dict) and not a.get("was_cancelled")
        for r in a.get("result") or []
        if isinstance(r, dict)
    }
    for kind in (RECTANGLES, CHOICES):
        if kind in types or (config is not None and config.controls[kind]):
            return kind
    raise SourceError(
        "the export has no rectanglelabels or choices results (found "
        f"{sorted(t for t in types if t) or 'none'}); label images with RectangleLabels (detection) or Choices "
        "(classification)"
    )


def _number(value: Any) -> bool:
    """A finite int or float (not a bool: its type is not int), checked cheaply: a task has dozens."""
    return type(value) in (int, float) and -math.inf < value < math.inf


def rectangle(result: dict[str, Any]) -> tuple[list[float], tuple[int, int], str] | str:
    """A rectangle result as (``[x, y, w, h]`` pixels, the image's ``(width, height)``, its label), or why not."""
    value = result.get("value") or {}
    names = value.get(RECTANGLES) or []
    if len(names) != 1:
        return f"{'no label' if not names else 'several labels'}: a rectangle needs one label, got {names}"
    rotation = value.get("rotation") or 0
    if not _number(rotation) or abs(rotation) > 1e-6:
        return (
            f"rotated rectangle: rotation {rotation} degrees; boxes are axis-aligned here: redraw it without rotation"
        )
    w, h = result.get("original_width"), result.get("original_height")
    if not (_number(w) and _number(h) and w > 0 and h > 0):
        return f"no image size: original_width/original_height are {[w, h]}; export with Label Studio 1.x"
    x, y, bw, bh = value.get("x"), value.get("y"), value.get("width"), value.get("height")
    if not (_number(x) and _number(y) and _number(bw) and _number(bh)):
        return f"malformed box: x, y, width, height are {[x, y, bw, bh]}, expected numbers (percent of the image)"
    sx, sy = w / 100.0, h / 100.0
    return [x * sx, y * sy, bw * sx, bh * sy], (int(w), int(h)), str(names[0])


def choice(result: dict[str, Any]) -> str:
    """A choices result's one class, or raises ValueError with why not."""
    names = (result.get("value") or {}).get(CHOICES) or []
    if len(names) != 1:
        raise ValueError(f"{'no choice' if not names else 'several choices'}: one class per image, got {names}")
    return str(names[0])


def _count(ignored: dict[str, int], what: str) -> None:
    ignored[what] = ignored.get(what, 0) + 1


class _Reader:
    """One pass over an export: each task's image and its annotation's boxes or class."""

    def __init__(self, uri: str, tasks: list[dict[str, Any]], config: LabelConfig | None, classes: list[str] | None):
        self.uri, self.base, self.file = uri, base_dir(uri), posixpath.basename(uri)
        self.config, self.declared = config, classes
        self.kind = result_kind(tasks, config)
        self.scan = Scan([], [], TASK_OF[self.kind], "")
        self.found: dict[str, Any] = {}  # item key -> its boxes (bbox, label, entry id) or its class
        self.declared_size: dict[str, tuple[int, int]] = {}
        self.fp: list[Any] = []

    def why_not(self, result: dict[str, Any], label: str) -> str | None:
        """Why a result's control or label is not valid (the config's, the declared classes), None if it is."""
        name = result.get("from_name")
        if self.config is not None and name not in self.config.controls[self.kind]:
            known = sorted(self.config.controls[self.kind])
            return f"unknown from_name: {name!r} is no {self.kind} control of the labeling config (it has {known})"
        allowed = self.declared if self.declared is not None else None
        if allowed is None and self.config is not None:
            allowed = self.config.controls[self.kind][name]
        if allowed is not None and label not in allowed:
            where = "the declared classes" if self.declared is not None else f"control {name!r} of the labeling config"
            return f"label not in the config: {label!r} is not among {where} ({list(allowed)[:8]})"
        return None

    def add_task(self, n: int, task: dict[str, Any], seen: set[str]) -> None:
        ref = image_ref(task, self.config)
        if ref is None:
            _count(self.scan.ignored, "task_without_image")
            return
        tried = candidates(ref, self.base)
        path = next((p for p in tried if storage.stat(p) is not None), None)
        where = path or (tried[0] if tried else ref)
        key = labels.relative(where, self.base)
        tid = task.get("id", n)
        if key in seen:
            why = "duplicate image: another task names it too; one image in two places would be two examples"
            self.scan.rejected.append(reject(key, where, None, why, self.file, task=tid))
            return
        seen.add(key)
        info = storage.stat(path) if path else None
        item = Item(key, NO_LABEL, where, None, 0 if info is None else info.size, labels.image_format(key))
        annotation = annotation_of(task, self.scan.ignored)
        if info is None:
            self.scan.missing.append(item)
            return
        found = None if annotation is None else self.results(annotation, item, tid)
        if not found and (annotation is None or self.kind == CHOICES):
            _count(self.scan.ignored, "unlabelled_tasks")
            self.scan.unlabelled.append(item)
            return
        self.fp.append((key, info.size, info.version))
        self.found[key] = found[1] if self.kind == CHOICES else found
        self.scan.items.append(item)

    def results(self, annotation: dict[str, Any], item: Item, tid: Any) -> Any:
        """The annotation's rectangles ``[(bbox, label, entry)]`` (detection), or ``(entry, class)``."""
        boxes: list[tuple[list[float], str, str]] = []
        for r in annotation.get("result") or []:
            if not isinstance(r, dict) or r.get("type") != self.kind:
                _count(self.scan.ignored, f"{r.get('type') if isinstance(r, dict) else 'malformed'}_results")
                continue
            entry = f"task {tid} result {r.get('id')}"
            try:
                bbox, size, label = self.parse(r)
                why = self.why_not(r, label)
            except ValueError as err:
                why = str(err)
            if why is None and self.kind == CHOICES:
                return entry, label
            if why is None and self.declared_size.setdefault(item.key, size) != size:
                first = list(self.declared_size[item.key])
                why = f"size differs: the task's results give the image as {list(size)} and as {first}"
            if why is not None:
                self.scan.rejected.append(
                    reject(item.key, item.ref, None, why, self.file, task=tid, result=r.get("id"))
                )
                continue
            boxes.append((bbox, label, entry))
        return boxes if self.kind == RECTANGLES else None

    def parse(self, result: dict[str, Any]) -> tuple[list[float] | None, tuple[int, int] | None, str]:
        if self.kind == CHOICES:
            return None, None, choice(result)
        parsed = rectangle(result)
        if isinstance(parsed, str):
            raise ValueError(parsed)
        return parsed

    def classes(self) -> list[str]:
        if self.declared is not None:
            return list(self.declared)
        if self.config is not None:
            return list(dict.fromkeys(c for values in self.config.controls[self.kind].values() for c in values))
        if self.kind == CHOICES:
            return sorted(set(self.found.values()))
        return sorted({label for boxes in self.found.values() for _, label, _ in boxes})

    def done(self, raw: bytes, config_raw: bytes) -> Scan:
        classes = self.classes()
        index = {c: i for i, c in enumerate(classes)}
        for item in self.scan.items:
            found = self.found[item.key]
            if self.kind == CHOICES:
                item.label = index[found]
            else:
                boxes = tuple(Box(bbox, entry, index[label], 0) for bbox, label, entry in found)
                item.boxes = ImageBoxes(boxes, self.declared_size.get(item.key))
        self.scan.classes = classes
        digest = hashlib.sha256(raw).hexdigest(), hashlib.sha256(config_raw).hexdigest()
        missing = [("missing", it.key) for it in self.scan.missing]
        self.scan.fingerprint = fingerprint(["label-studio", LS_READER_VERSION, *digest, *self.fp, *missing])
        return self.scan


def scan_label_studio(uri: str, classes: list[str] | None = None) -> Scan:
    """Scans a Label Studio JSON export into items (boxes or classes), rejections and classes.

    Raises:
        SourceError: not an export, a malformed labeling config, or no rectangles or choices at all.
    """
    tasks, raw = _read(uri)
    config, config_raw = _config(uri)
    reader = _Reader(uri, tasks, config, classes)
    seen: set[str] = set()
    for n, task in enumerate(tasks, 1):
        reader.add_task(n, task, seen)
    return reader.done(raw, config_raw)


def is_export(uri: str) -> bool:
    """A ``.json`` file holding a list (Label Studio's export); a COCO file holds an object."""
    if not has_suffix(uri, ".json"):
        return False
    if is_gcs(uri):
        head = storage.read_bytes(uri)[:4096]
    else:
        if not os.path.isfile(uri):
            return False
        with open(uri, "rb") as f:
            head = f.read(4096)
    return head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"["


class LabelStudioKind(SourceKind):
    """A Label Studio JSON export (a list of tasks), told from a COCO file by its content."""

    name = "label-studio"
    description = "a Label Studio JSON export (.json, a list of tasks)"
    claim = Claim.FILE

    def matches(self, uri: str) -> bool:
        return is_export(uri)

    def open(self, uri: str, classes: list[str] | None) -> Source:
        scan = scan_label_studio(uri, classes)
        return labels.source_of(self.name, uri, scan, "put the images where the export names them (docs/labels.md)")

    def prediction_listing(self, uri: str) -> Listing:
        return labels.listing_of(self.name, scan_label_studio(uri))


LABEL_STUDIO = LabelStudioKind()
