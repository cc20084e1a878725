"""COCO detection JSON: images, their boxes, and what the file gets wrong.

Converted, a COCO file is read strictly (:func:`open_coco`); scored (batch prediction), leniently
(:func:`coco_listing`): its images with their ids, the annotations' boxes as the labels.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
from collections import Counter
from typing import Any

from components.image_input.imaging import EXTENSIONS
from components.image_input.sources.base import (
    Box,
    ImageBoxes,
    InputError,
    Item,
    Listing,
    PredictItem,
    Source,
    SourceError,
    SourceKind,
    base_dir,
    digest,
    fingerprint,
    has_suffix,
    resolve,
    version,
)
from trainer import storage
from trainer.storage import is_gcs, read_bytes
from trainer.tfrecords import NO_LABEL

log = logging.getLogger(__name__)

# Bump when what the COCO reader makes of the same file changes (v2: strict checks, boxes normalised by
# the image file's true size in the worker). It joins COCO fingerprints only, so that COCO datasets are
# converted again while every other dataset stays up to date.
COCO_READER_VERSION = 2


def _entries(data: dict[str, Any], name: str, uri: str) -> list[dict]:
    entries = data[name]
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise SourceError(f"{uri}: '{name}' must be a list of objects, got {type(entries).__name__}")
    return entries


def _field(entry: dict, field_name: str, what: str, n: int, uri: str) -> Any:
    if field_name not in entry:
        raise SourceError(
            f"{uri}: {what} #{n} ({json.dumps(entry)[:80]}) has no '{field_name}'; every COCO {what} needs one: "
            "add it or drop the entry"
        )
    return entry[field_name]


def _read(uri: str) -> dict[str, Any]:
    try:
        data = json.loads(read_bytes(uri))
    except json.JSONDecodeError as err:
        raise SourceError(f"{uri} is not valid JSON: {err}") from None
    if not isinstance(data, dict) or not {"images", "annotations", "categories"} <= set(data):
        raise SourceError(f"{uri}: expected COCO JSON with images, annotations and categories")
    return data


def _categories(data: dict[str, Any], uri: str) -> tuple[list[str], dict[Any, int]]:
    """(class names in category id order, category id -> class index)."""
    cats = _entries(data, "categories", uri)
    for n, cat in enumerate(cats):
        _field(cat, "id", "category", n, uri)
        _field(cat, "name", "category", n, uri)
    ids = Counter(c["id"] for c in cats)
    twice = sorted(i for i, k in ids.items() if k > 1)
    if twice:
        raise SourceError(f"{uri}: category ids {twice} are declared more than once; give each category one id")
    cats = sorted(cats, key=lambda c: c["id"])
    return [str(c["name"]) for c in cats], {c["id"]: i for i, c in enumerate(cats)}


def _images(data: dict[str, Any], uri: str) -> dict[Any, dict]:
    """Image id -> image entry; an id listed twice is an error."""
    images: dict[Any, dict] = {}
    for n, img in enumerate(_entries(data, "images", uri)):
        image_id = _field(img, "id", "image", n, uri)
        _field(img, "file_name", "image", n, uri)
        if image_id in images:
            raise SourceError(
                f"{uri}: image id {image_id!r} is listed twice ({images[image_id]['file_name']!r} and "
                f"{img['file_name']!r}); one id would be two images, which could land in different splits "
                "(a leak) and mix their boxes: give every image its own id"
            )
        images[image_id] = img
    return images


def _orphan(uri: str, ann: dict, image_id: Any) -> dict[str, Any]:
    """The rejected.jsonl row of an annotation whose image is not in the file."""
    return {
        "key": f"annotation:{ann.get('id')}",
        "path": uri,
        "split": None,
        "reason": f"orphan annotation: image_id {image_id!r} is not among the images",
        "annotation_id": ann.get("id"),
        "bbox": ann.get("bbox"),
    }


def _annotations(
    data: dict[str, Any], uri: str, images: dict[Any, dict], index: dict[Any, int]
) -> tuple[dict[Any, list[dict]], list[dict]]:
    """(image id -> its annotations, orphan rows); an undeclared category is an error."""
    by_image: dict[Any, list[dict]] = {}
    orphans: list[dict] = []
    annotations = _entries(data, "annotations", uri)
    for n, ann in enumerate(annotations):
        image_id = _field(ann, "image_id", "annotation", n, uri)
        category = _field(ann, "category_id", "annotation", n, uri)
        if category not in index:
            raise SourceError(
                f"{uri}: annotation {ann.get('id')} has category_id {category!r}, not among the declared "
                f"categories {sorted(index)}; declare it under 'categories' ({{\"id\": {category!r}, "
                '"name": ...}) or drop the annotations that use it'
            )
        if image_id not in images:
            orphans.append(_orphan(uri, ann, image_id))
            continue
        by_image.setdefault(image_id, []).append(ann)
    if annotations and not by_image:
        raise SourceError(
            f"{uri}: none of the {len(annotations)} annotations belongs to one of the {len(images)} images "
            f"(annotation image_ids e.g. {sorted({str(a['image_id']) for a in annotations})[:3]}, image ids "
            f"e.g. {sorted(str(i) for i in images)[:3]}); the annotations come from another file or the ids "
            "were renumbered: fix the image_id of the annotations"
        )
    if orphans:
        log.warning(
            "%s: %d annotations refer to image ids that are not among the images (e.g. %s); they are left out "
            "and listed in rejected.jsonl",
            uri,
            len(orphans),
            [o["annotation_id"] for o in orphans[:3]],
        )
    return by_image, orphans


def _image_boxes(img: dict, anns: list[dict], index: dict[Any, int]) -> ImageBoxes:
    declared = (img.get("width"), img.get("height"))
    boxes = tuple(
        Box(a.get("bbox"), a.get("id"), index[a["category_id"]], int(bool(a.get("iscrowd", 0)))) for a in anns
    )
    return ImageBoxes(boxes, declared if declared != (None, None) else None)


def _items(
    uri: str, images: dict[Any, dict], by_image: dict[Any, list[dict]], index: dict[Any, int]
) -> tuple[list[Item], list[Any]]:
    """(one item per image, with its boxes; the fingerprint parts); a missing image file is an error."""
    base = base_dir(uri)
    items, missing, fp = [], [], []
    for img in images.values():
        path = resolve(base, img["file_name"])
        if not is_gcs(path) and not os.path.exists(path):
            alt = resolve(base, posixpath.join("images", img["file_name"]))
            if not os.path.exists(alt):
                missing.append(img["file_name"])
                continue
            path = alt
        boxes = _image_boxes(img, by_image.get(img["id"], []), index)
        size = 0 if is_gcs(path) else os.path.getsize(path)
        fp.append((img["file_name"], size))
        ext = posixpath.splitext(path)[1].lower()
        items.append(Item(str(img["file_name"]), NO_LABEL, path, None, size, EXTENSIONS.get(ext), boxes=boxes))
    if missing:
        raise SourceError(
            f"{uri}: {len(missing)} images point nowhere (e.g. {missing[:3]}); file_name is relative to the "
            "JSON's folder or its images/ folder: fix the names or drop those images"
        )
    return items, fp


def open_coco(uri: str, kind: str) -> Source:
    """Scans a COCO detection file: images, their raw boxes, and what the file gets wrong.

    Systemic defects raise :class:`SourceError` naming the file and the fix (an image id listed
    twice, an undeclared category, a missing required field, no annotation matching any image).
    Annotations of image ids that do not exist are listed in ``Source.rejected`` (an export
    filtered to fewer images leaves them behind; they harm nothing, so they are reported, not
    fatal). Boxes stay in the file's pixel ``[x, y, width, height]``: the worker normalises them by
    the size of the image file itself, after checking the declared size against it.
    """
    data = _read(uri)
    names, index = _categories(data, uri)
    images = _images(data, uri)
    by_image, orphans = _annotations(data, uri, images, index)
    items, fp = _items(uri, images, by_image, index)
    fp_hash = fingerprint(["coco", COCO_READER_VERSION, read_bytes(uri), *fp])
    return Source(kind, uri, names, items, fp_hash, task="detection", rejected=orphans)


def _coco_truth(data: dict[str, Any], uri: str) -> dict[int, list[dict[str, Any]]]:
    """Image id -> its boxes as batch prediction's labels (crowd boxes left out), in pixels, by class name."""
    names = {c.get("id"): str(c.get("name")) for c in data.get("categories") or [] if isinstance(c, dict)}
    truth: dict[int, list[dict[str, Any]]] = {}
    for ann in data.get("annotations") or []:
        if not isinstance(ann, dict) or ann.get("iscrowd"):
            continue
        x, y, w, h = (float(v) for v in ann["bbox"])
        if ann.get("category_id") not in names:
            raise InputError(f"{uri}: annotation {ann.get('id')} names category {ann.get('category_id')}, not listed")
        truth.setdefault(int(ann["image_id"]), []).append(
            {"box": [x, y, x + w, y + h], "class": names[ann["category_id"]]}
        )
    return truth


def coco_listing(uri: str) -> Listing:
    """The images of a COCO file to score (``images``: ``id``, ``file_name`` relative to the file's folder).

    The file's ids are kept (the COCO results use them); its annotations, where it has any, are
    the labels. An image file that is missing stays an item (its prediction lists it).

    Raises:
        InputError: not JSON, or no ``images`` list.
    """
    text = storage.read_text(uri)
    try:
        data = json.loads(text)
    except ValueError as err:
        raise InputError(f"{uri}: not JSON ({err}); give a COCO file with an 'images' list") from None
    images = data.get("images") if isinstance(data, dict) else None
    if not isinstance(images, list) or not images:
        raise InputError(f"{uri}: no 'images' list (or it is empty); a COCO file lists its images with ids")
    labelled = "annotations" in data
    truth = _coco_truth(data, uri) if labelled else {}
    base = base_dir(uri)
    items = []
    for image in images:
        try:
            image_id, name = int(image["id"]), str(image["file_name"])
        except (KeyError, TypeError, ValueError):
            raise InputError(f"{uri}: every image needs an integer 'id' and a 'file_name', got {image!r}") from None
        items.append(PredictItem(resolve(base, name), name, image_id, truth.get(image_id, []) if labelled else None))
    fp = digest([hashlib.sha256(text.encode()).hexdigest(), *(version(it.uri) for it in items)])
    return Listing("coco", items, fp, labelled)


class CocoKind(SourceKind):
    """A COCO detection ``.json`` file (``images``, ``annotations``, ``categories``)."""

    name = "coco"
    description = "a COCO .json file"

    def matches(self, uri: str) -> bool:
        return has_suffix(uri, ".json")

    def open(self, uri: str, classes: list[str] | None) -> Source:
        return open_coco(uri, self.name)

    def prediction_listing(self, uri: str) -> Listing:
        return coco_listing(uri)


COCO = CocoKind()
