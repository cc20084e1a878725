"""What a batch prediction scores: the images of its input, listed once, with a fingerprint.

An input is a folder or ``gs://`` prefix, a CSV or JSONL list of paths, a COCO file, or a
converted dataset (``PredictConfig.data``). :func:`list_input` turns any of them into the same
list of :class:`Item` (where the image is, the name the predictions carry, a COCO image id, a
label where the input has one) in a stable order, and a fingerprint that changes when the input
does: the item list and each file's size and version (its modification time, or its GCS
generation). No TensorFlow: the planning step lists millions of files without it.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import os
import posixpath
from collections.abc import Iterable, Sequence
from typing import Any, Optional

from trainer import records, storage
from trainer.tfrecords import MANIFEST_NAME, load_dataset_info

# The image files a folder input holds (any case); the others (a README, a label file) are skipped.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".gif", ".bmp", ".webp")
# Column names a CSV/JSONL list may give its image paths under, the first one present wins.
PATH_COLUMNS = ("path", "image", "file_name", "uri")


class InputError(ValueError):
    """The input cannot be listed; the message says what was found and what is expected."""


@dataclasses.dataclass(frozen=True)
class Item(records.Record):
    """One image to score.

    Attributes:
        uri: where its bytes are (a local path or ``gs://`` URI; for a converted dataset, its
            TFRecord file, with ``record`` the record's place in it).
        path: the name its prediction carries: relative to the input's folder where it has one.
        image_id: the COCO image id (from a COCO input; else assigned, 1-based, in list order).
        label: the truth where the input gives one: a class name, or (COCO) a list of
            ``{"box": [xmin, ymin, xmax, ymax] pixels, "class": name}``.
        record: the record's index in ``uri`` (converted datasets only).
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
    """An input, listed.

    Attributes:
        kind: ``folder``, ``list``, ``coco`` or ``dataset``.
        items: the images in a stable order.
        fingerprint: sha256 of what was listed (paths, sizes, versions): equal when nothing changed.
        labelled: whether the input gives labels (then the join scores the predictions).
    """

    kind: str
    items: list[Item]
    fingerprint: str
    labelled: bool


def _digest(lines: Iterable[str]) -> str:
    h = hashlib.sha256()
    for line in lines:
        h.update(line.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def _resolve(base: str, path: str) -> str:
    if storage.is_gcs(path) or os.path.isabs(path):
        return path
    return posixpath.join(base, path) if storage.is_gcs(base) else os.path.join(base, path)


def _folder_of(uri: str) -> str:
    return posixpath.dirname(uri) if storage.is_gcs(uri) else os.path.dirname(os.path.abspath(uri))


def _version(uri: str) -> str:
    """``size:version`` of a file, ``missing`` when there is none (its prediction lists it)."""
    info = storage.stat(uri)
    return "missing" if info is None else f"{info.size}:{info.version}"


def list_folder(uri: str) -> Listing:
    """Every image file under a folder or ``gs://`` prefix, by relative path.

    Raises:
        InputError: nothing under it, or no image file among what is.
    """
    files = storage.list_info(uri)
    if not files:
        raise InputError(
            f"{uri}: no such folder, or it is empty; give a folder (or gs:// prefix) of images, a CSV/JSONL "
            "list, a COCO file or a converted dataset"
        )
    images = [f for f in files if f.path.lower().endswith(IMAGE_EXTENSIONS)]
    if not images:
        raise InputError(
            f"{uri}: {len(files)} files but no image among them (e.g. {files[0].path}); image files end in "
            f"{', '.join(IMAGE_EXTENSIONS)}"
        )
    items = [Item(storage.join(uri, f.path), f.path, i + 1) for i, f in enumerate(images)]
    fingerprint = _digest(f"{f.path}\t{f.size}:{f.version}" for f in images)
    return Listing("folder", items, fingerprint, labelled=False)


def _rows_of_list(uri: str, text: str) -> list[dict[str, Any]]:
    if uri.lower().endswith(".jsonl"):
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as err:
                raise InputError(f"{uri}, line {n}: not JSON ({err}); write one object per line") from None
            if not isinstance(row, dict):
                raise InputError(f'{uri}, line {n}: expected an object such as {{"path": "a.jpg"}}, got {row!r}')
            rows.append(row)
        return rows
    return list(csv.DictReader(io.StringIO(text)))


def list_paths(uri: str) -> Listing:
    """The images a CSV or JSONL list names (column ``path``, ``image``, ``file_name`` or ``uri``).

    A listed file that does not exist stays an item: scoring lists it among the failures with
    its reason, and scores the others.

    Raises:
        InputError: no such list, no path column, or no rows.
    """
    try:
        text = storage.read_text(uri)
    except FileNotFoundError:
        raise InputError(f"{uri}: no such file; give a CSV or JSONL list of image paths") from None
    rows = _rows_of_list(uri, text)
    if not rows:
        raise InputError(f"{uri}: the list is empty; give one image path per row (column 'path')")
    column = next((c for c in PATH_COLUMNS if c in rows[0]), None)
    if column is None:
        raise InputError(f"{uri}: no path column; expected one of {list(PATH_COLUMNS)}, got {sorted(rows[0])}")
    base = _folder_of(uri)
    labelled = all(str(r.get("label") or "").strip() for r in rows)
    items = []
    for i, row in enumerate(rows):
        path = str(row.get(column) or "").strip()
        if not path:
            raise InputError(f"{uri}, row {i + 1}: the {column!r} column is empty")
        label = str(row["label"]).strip() if labelled else None
        items.append(Item(_resolve(base, path), path, i + 1, label))
    fingerprint = _digest([hashlib.sha256(text.encode()).hexdigest(), *(_version(it.uri) for it in items)])
    return Listing("list", items, fingerprint, labelled)


def _coco_truth(data: dict[str, Any], uri: str) -> dict[int, list[dict[str, Any]]]:
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


def list_coco(uri: str) -> Listing:
    """The images of a COCO file (``images``: ``id``, ``file_name`` relative to the file's folder).

    The file's ids are kept (the COCO results use them); its annotations, where it has any, are
    the labels.

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
    base = _folder_of(uri)
    items = []
    for image in images:
        try:
            image_id, name = int(image["id"]), str(image["file_name"])
        except (KeyError, TypeError, ValueError):
            raise InputError(f"{uri}: every image needs an integer 'id' and a 'file_name', got {image!r}") from None
        items.append(Item(_resolve(base, name), name, image_id, truth.get(image_id, []) if labelled else None))
    fingerprint = _digest([hashlib.sha256(text.encode()).hexdigest(), *(_version(it.uri) for it in items)])
    return Listing("coco", items, fingerprint, labelled)


def list_dataset(uri: str, split: str) -> Listing:
    """The records of one split of a converted dataset, in shard order; their labels come with them.

    Raises:
        InputError: the split does not exist or is empty.
    """
    info = load_dataset_info(uri)
    if split not in info.splits:
        raise InputError(f"{uri}: no split {split!r}; its splits: {sorted(info.splits)}")
    items = []
    for shard, path in zip(info.splits[split].shards, info.shard_paths(split), strict=True):
        for n in range(shard.count):
            items.append(Item(path, f"{split}/{shard.file}#{n}", len(items) + 1, record=n))
    if not items:
        raise InputError(f"{uri}: the {split!r} split is empty; give a split with records")
    manifest = storage.read_bytes(storage.join(uri, MANIFEST_NAME))
    return Listing("dataset", items, _digest([split, hashlib.sha256(manifest).hexdigest()]), labelled=True)


def list_input(data: str, split: str = "test") -> Listing:
    """Lists any input kind (module docstring) by what ``data`` is.

    Raises:
        InputError: nothing to score there; the message names the input kinds.
    """
    lower = data.lower().rstrip("/")
    if lower.endswith((".csv", ".jsonl")):
        return list_paths(data)
    if lower.endswith(".json"):
        return list_coco(data)
    if storage.exists(storage.join(data, MANIFEST_NAME)):
        return list_dataset(data, split)
    return list_folder(data)


def shard_ranges(count: int, per_shard: int) -> list[tuple[int, int]]:
    """``(start, stop)`` item ranges of the shards: as even as possible, none above ``per_shard``."""
    if count < 1:
        raise InputError("nothing to score: the input lists no image")
    shards = -(-count // per_shard)
    bounds = [round(i * count / shards) for i in range(shards + 1)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def items_text(items: Sequence[Item]) -> str:
    """The items as JSON lines (``items.jsonl``, what the shards read their part of)."""
    return "".join(json.dumps(it.to_dict(), separators=(",", ":")) + "\n" for it in items)


def items_from_text(text: str) -> list[Item]:
    """The inverse of :func:`items_text`."""
    return [Item.from_dict(json.loads(line)) for line in text.splitlines() if line.strip()]
