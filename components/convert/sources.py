"""Sources of images: scanning them into light items, and loading one item's pixels or bytes.

A source is scanned once, in the parent process, into :class:`Item` records (a key, a label, maybe a
split, and a reference to the bytes), never the images themselves. Worker processes rebuild a
:class:`Loader` from :meth:`Source.spec` (plain data, cheap to pickle) and read the bytes of the
items they were given, so memory stays bounded whatever the size of the source.

Kinds: ``folder`` (one subfolder per class), ``csv``/``jsonl`` manifests, ``npz``, ``idx``
(MNIST-style, optionally gzipped), ``coco`` (detection JSON), and the built-in ``fashion-mnist``,
``digits`` and ``shapes`` (detection, generated: :mod:`components.convert.shapes`). Local paths and gs:// URIs.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import logging
import os
import posixpath
import struct
import threading
import zlib
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from components.convert.imaging import EXTENSIONS
from trainer import storage
from trainer.storage import is_gcs, read_bytes  # read_bytes: the workers' local fast path (os.read)
from trainer.tfrecords import NO_LABEL

KINDS = ("folder", "csv", "jsonl", "npz", "idx", "coco", "fashion-mnist", "digits", "shapes")
BUILTINS = ("fashion-mnist", "digits", "shapes")
TASKS = ("classification", "detection")
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]
EXPECTED = (
    "an image folder (one subfolder per class), a .csv/.jsonl manifest, a .npz file, a folder of "
    "IDX files, a COCO .json file, or a built-in name: fashion-mnist, digits, shapes (detection; "
    "shapes:<count> for another count)"
)


log = logging.getLogger(__name__)


class ConvertError(ValueError):
    """A conversion cannot go on; the message says what is wrong, what was expected and the fix."""


class SourceError(ConvertError):
    """The source as a whole is unusable (systemic): nothing is written."""


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
    boxes: dict[str, list] | None = None
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
    options: dict[str, Any] = field(default_factory=dict)  # what a Loader needs
    task: str = "classification"  # what the dataset is for: one of TASKS, recorded in dataset.json
    # What was rejected while scanning (COCO annotations of images that do not exist), as rejected.jsonl rows.
    rejected: list[dict[str, Any]] = field(default_factory=list)

    def spec(self) -> dict[str, Any]:
        """Plain data from which a worker process rebuilds the loader."""
        return {"kind": self.kind, "uri": self.uri, **self.options}


# --------------------------------------------------------------------------------------------
# Paths: local or gs:// (trainer.storage)
# --------------------------------------------------------------------------------------------


def _exists(path: str) -> bool:
    """A file or a folder (on GCS: an object or a prefix with objects under it)."""
    if is_gcs(path):
        return storage.exists(path) or storage.isdir(path)
    return os.path.exists(path)


def _hash(parts: list[Any]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(repr(p).encode())
        h.update(b"\0")
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# Detecting and opening
# --------------------------------------------------------------------------------------------


def _is_idx_name(name: str) -> bool:
    base = name[:-3] if name.endswith(".gz") else name
    return base.endswith(("-idx1-ubyte", "-idx2-ubyte", "-idx3-ubyte", "-idx4-ubyte"))


def detect(uri: str) -> str:
    """The kind of a source from its name and, for folders, what is inside."""
    if is_builtin(uri):
        return uri.split(":", 1)[0]
    if not _exists(uri):
        raise SourceError(f"source not found: {uri}; expected {EXPECTED}")
    lower = uri.lower().rstrip("/")
    for suffix, kind in ((".csv", "csv"), (".jsonl", "jsonl"), (".npz", "npz"), (".json", "coco")):
        if lower.endswith(suffix):
            return kind
    if storage.isdir(uri):
        if not is_gcs(uri) and any(_is_idx_name(n) for n in os.listdir(uri)):
            return "idx"
        return "folder"
    raise SourceError(f"unknown source format: {uri}; expected {EXPECTED}")


def open_source(
    uri: str,
    kind: str | None = None,
    classes: list[str] | None = None,
) -> Source:
    """Scans a source into items (no image bytes are read).

    Args:
        uri: a path, gs:// URI or built-in name.
        kind: one of ``KINDS``; None detects it.
        classes: the declared class names (manifests); labels outside them are an error.

    Raises:
        SourceError: missing path, no images, unknown format, bad manifest, bad labels.
    """
    uri = str(uri)
    kind = kind or detect(uri)
    if kind not in KINDS:
        raise SourceError(f"unknown source format {kind!r}; expected one of {', '.join(KINDS)}")
    if kind not in BUILTINS and not _exists(uri):
        raise SourceError(f"source not found: {uri}; expected {EXPECTED}")
    opener = {
        "folder": _open_folder,
        "csv": _open_manifest,
        "jsonl": _open_manifest,
        "npz": _open_npz,
        "idx": _open_idx,
        "coco": _open_coco,
        "fashion-mnist": _open_fashion_mnist,
        "digits": _open_digits,
        "shapes": _open_shapes,
    }[kind]
    source = opener(uri, kind, classes)
    if not source.items:
        raise SourceError(f"no images in {uri}: the {kind} source lists none; expected {EXPECTED}")
    return source


# --------------------------------------------------------------------------------------------
# Image folders
# --------------------------------------------------------------------------------------------


def _walk_local(root: str) -> tuple[list[tuple[str, int]], Counter, list[Any], set[str]]:
    """Lists the visible files under root; hidden ones are counted.

    Returns:
        (relative posix path, size) per file, the skipped counts, (path, size, mtime) per file, and
        the visible subfolders of root (the class folders, empty ones included).
    """
    files: list[tuple[str, int]] = []
    fp: list[Any] = []
    skipped: Counter = Counter()
    folders: set[str] = set()
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(os.path.join(root, rel)) as it:
            for entry in it:
                if entry.name.startswith("."):
                    skipped["hidden"] += 1
                    continue
                path = posixpath.join(rel, entry.name) if rel else entry.name
                if entry.is_dir(follow_symlinks=True):
                    stack.append(path)
                    if not rel:
                        folders.add(entry.name)
                elif entry.is_file(follow_symlinks=True):
                    st = entry.stat()
                    files.append((path, st.st_size))
                    fp.append((path, st.st_size, st.st_mtime_ns))
                elif entry.is_symlink():  # dangling: listed, so that it is rejected as unreadable
                    files.append((path, 0))
                    fp.append((path, 0, 0))
    files.sort()
    return files, skipped, sorted(fp), folders


def _walk_gcs(uri: str) -> tuple[list[tuple[str, int]], Counter, list[Any], set[str]]:
    """What :func:`_walk_local` returns, for a gs:// prefix."""
    bucket, name = storage.split_gcs(uri)
    prefix = f"{name}/" if name else ""
    files, skipped, fp, folders = [], Counter(), [], set()
    for blob in storage.client().list_blobs(bucket, prefix=prefix):
        rel = blob.name[len(prefix) :]
        top = rel.split("/", 1)[0]
        if "/" in rel and not top.startswith("."):
            folders.add(top)  # a folder placeholder ("cat/") or any object under it makes a class folder
        if not rel or rel.endswith("/"):
            continue
        if any(part.startswith(".") for part in rel.split("/")):
            skipped["hidden"] += 1
            continue
        files.append((rel, blob.size))
        fp.append((rel, blob.size, blob.generation))
    files.sort()
    return files, skipped, sorted(fp), folders


def _open_folder(uri: str, kind: str, classes: list[str] | None) -> Source:
    root = uri.rstrip("/")
    if is_gcs(uri):
        files, skipped, fp, folders = _walk_gcs(uri)
    else:
        files, skipped, fp, folders = _walk_local(root)
    if not files:
        raise SourceError(
            f"no images in {uri}: the folder is empty; expected one subfolder per class holding "
            f"images (.jpg/.png/.gif/.bmp/.webp, any case) (e.g. {root}/cat/001.jpg)"
        )
    by_class: dict[str, list[tuple[str, int, str]]] = {}
    other_ext: Counter = Counter()
    for rel, size in files:
        ext = posixpath.splitext(rel)[1].lower()
        fmt = EXTENSIONS.get(ext)
        if fmt is None:
            skipped["not_image"] += 1
            other_ext[ext or "(none)"] += 1
            continue
        if "/" not in rel:
            skipped["outside_class_folder"] += 1
            continue
        by_class.setdefault(rel.split("/", 1)[0], []).append((rel, size, fmt))
    if not by_class:
        found = ", ".join(f"{n} {e}" for e, n in other_ext.most_common(5)) or "none"
        loose = skipped.get("outside_class_folder", 0)
        raise SourceError(
            f"no images in {uri}: found {len(files)} files (extensions: {found}; {loose} images directly "
            f"in the folder), none inside a class subfolder; expected {root}/<class>/<image> with "
            f"extensions {', '.join(sorted(EXTENSIONS))}"
        )
    names = sorted(by_class)
    if classes is not None:
        unknown = sorted(set(names) - set(classes))
        if unknown:
            raise SourceError(
                f"class folders {unknown} are not among the declared classes {list(classes)}; "
                "rename the folders or add the classes"
            )
        names = list(classes)
        empty = [c for c in names if c not in by_class]  # declared: kept as classes, with no images
    else:
        empty = sorted(folders - set(by_class))  # undeclared: a folder without images is no class
    if empty:
        log.warning(
            "%s: %d class folder(s) hold no images: %s; %s. A class without images cannot be learned: "
            "add images (%s) or remove the folder",
            uri,
            len(empty),
            ", ".join(f"{root}/{c}" for c in empty),
            "they stay among the declared classes, with 0 images"
            if classes is not None
            else "they are left out of the classes",
            ", ".join(sorted(EXTENSIONS)),
        )
    items = []
    for label, name in enumerate(names):
        for rel, size, fmt in by_class.get(name, []):
            items.append(Item(rel, label, f"{root}/{rel}", size=size, expected=fmt))
    # Empty folders join the fingerprint only when there are any: datasets made before stay up to date.
    fingerprint = _hash(fp + [("empty_classes", empty)] if empty else fp)
    return Source(kind, uri, names, items, fingerprint, ignored=dict(skipped), empty_classes=empty)


# --------------------------------------------------------------------------------------------
# CSV / JSONL manifests
# --------------------------------------------------------------------------------------------


def _read_rows(uri: str, kind: str) -> list[dict[str, Any]]:
    text = read_bytes(uri).decode("utf-8-sig")
    if kind == "csv":
        reader = csv.DictReader(io.StringIO(text))
        header = [h.strip() for h in (reader.fieldnames or [])]
        if "path" not in header or "label" not in header:
            raise SourceError(f"bad manifest header in {uri}: expected columns path,label[,split,...], got {header}")
        reader.fieldnames = header
        return [dict(r) for r in reader]
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise SourceError(f"bad JSONL manifest {uri} line {n}: {err}") from None
        if not isinstance(row, dict) or "path" not in row or "label" not in row:
            raise SourceError(
                f"bad JSONL manifest {uri} line {n}: expected an object with 'path' and 'label', got {line[:80]}"
            )
        rows.append(row)
    return rows


def _labels(values: list[Any], classes: list[str] | None, where: str) -> tuple[list[int], list[str]]:
    """Label indices and class names from names or indices, checked against declared classes."""

    def as_int(v: Any) -> int | None:
        if isinstance(v, bool):
            return None
        if isinstance(v, int):
            return v
        if isinstance(v, str) and v.strip().lstrip("-").isdigit():
            return int(v)
        return None

    ints = [as_int(v) for v in values]
    names = [str(v).strip() for v in values]
    if classes is None:
        if all(i is not None for i in ints):
            top = max(ints)
            if min(ints) < 0:
                raise SourceError(f"{where}: label indices must be >= 0, got {min(ints)}")
            return ints, [str(i) for i in range(top + 1)]
        classes = sorted(set(names))
        index = {c: i for i, c in enumerate(classes)}
        return [index[n] for n in names], classes
    index = {c: i for i, c in enumerate(classes)}
    out = []
    for row, (i, name) in enumerate(zip(ints, names, strict=True), 1):
        if name in index:
            out.append(index[name])
        elif i is not None and 0 <= i < len(classes):
            out.append(i)
        else:
            raise SourceError(
                f"{where} row {row}: label {name!r} is outside the declared classes {list(classes)} "
                f"(give a class name or an index 0..{len(classes) - 1})"
            )
    return out, list(classes)


def _resolve(base: str, path: str) -> str:
    if is_gcs(path) or os.path.isabs(path):
        return path
    return posixpath.join(base, path) if is_gcs(base) else os.path.join(base, path)


def _open_manifest(uri: str, kind: str, classes: list[str] | None) -> Source:
    rows = _read_rows(uri, kind)
    base = posixpath.dirname(uri) if is_gcs(uri) else os.path.dirname(os.path.abspath(uri))
    if not rows:
        raise SourceError(f"no images in {uri}: the manifest has no rows; expected path,label[,split] rows")
    for n, row in enumerate(rows, 1):
        if not str(row.get("path") or "").strip() or str(row.get("label", "")).strip() == "":
            raise SourceError(f"{uri} row {n}: empty path or label: {row}")
    labels, names = _labels([r["label"] for r in rows], classes, uri)
    items, missing, fp = [], [], []
    for row, label in zip(rows, labels, strict=True):
        path = _resolve(base, str(row["path"]).strip())
        size = 0
        if not is_gcs(path):
            try:
                st = os.stat(path)
                size = st.st_size
                fp.append((path, st.st_size, st.st_mtime_ns))
            except OSError:
                missing.append(str(row["path"]))
                continue
        else:
            fp.append((path,))
        split = str(row.get("split") or "").strip() or None
        extra = {k: v for k, v in row.items() if k not in ("path", "label", "split") and v not in (None, "")}
        ext = posixpath.splitext(path)[1].lower()
        items.append(Item(str(row["path"]).strip(), label, path, split, size, EXTENSIONS.get(ext), extra or None))
    if missing:
        raise SourceError(
            f"{uri}: {len(missing)} rows point nowhere (e.g. {missing[:3]}); paths are relative to the "
            "manifest's folder or absolute; fix or drop those rows"
        )
    fingerprint = _hash([read_bytes(uri), *fp])
    return Source(kind, uri, names, items, fingerprint)


# --------------------------------------------------------------------------------------------
# COCO detection JSON
# --------------------------------------------------------------------------------------------


# Bump when what the COCO reader makes of the same file changes (v2: strict checks, boxes normalised by
# the image file's true size in the worker). It joins COCO fingerprints only, so that COCO datasets are
# converted again while every other dataset stays up to date.
COCO_READER_VERSION = 2


def _coco_entries(data: dict[str, Any], name: str, uri: str) -> list[dict]:
    entries = data[name]
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise SourceError(f"{uri}: '{name}' must be a list of objects, got {type(entries).__name__}")
    return entries


def _coco_field(entry: dict, field_name: str, what: str, n: int, uri: str) -> Any:
    if field_name not in entry:
        raise SourceError(
            f"{uri}: {what} #{n} ({json.dumps(entry)[:80]}) has no '{field_name}'; every COCO {what} needs one: "
            "add it or drop the entry"
        )
    return entry[field_name]


def _open_coco(uri: str, kind: str, classes: list[str] | None) -> Source:
    """Scans a COCO detection file: images, their raw boxes, and what the file gets wrong.

    Systemic defects raise :class:`SourceError` naming the file and the fix (an image id listed
    twice, an undeclared category, a missing required field, no annotation matching any image).
    Annotations of image ids that do not exist are listed in ``Source.rejected`` (an export
    filtered to fewer images leaves them behind; they harm nothing, so they are reported, not
    fatal). Boxes stay in the file's pixel ``[x, y, width, height]``: the worker normalises them by
    the size of the image file itself, after checking the declared size against it.
    """
    try:
        data = json.loads(read_bytes(uri))
    except json.JSONDecodeError as err:
        raise SourceError(f"{uri} is not valid JSON: {err}") from None
    if not isinstance(data, dict) or not {"images", "annotations", "categories"} <= set(data):
        raise SourceError(f"{uri}: expected COCO JSON with images, annotations and categories")
    cats = _coco_entries(data, "categories", uri)
    for n, cat in enumerate(cats):
        _coco_field(cat, "id", "category", n, uri)
        _coco_field(cat, "name", "category", n, uri)
    ids = Counter(c["id"] for c in cats)
    twice = sorted(i for i, k in ids.items() if k > 1)
    if twice:
        raise SourceError(f"{uri}: category ids {twice} are declared more than once; give each category one id")
    cats = sorted(cats, key=lambda c: c["id"])
    names = [str(c["name"]) for c in cats]
    index = {c["id"]: i for i, c in enumerate(cats)}
    base = posixpath.dirname(uri) if is_gcs(uri) else os.path.dirname(os.path.abspath(uri))
    images: dict[Any, dict] = {}
    for n, img in enumerate(_coco_entries(data, "images", uri)):
        image_id = _coco_field(img, "id", "image", n, uri)
        _coco_field(img, "file_name", "image", n, uri)
        if image_id in images:
            raise SourceError(
                f"{uri}: image id {image_id!r} is listed twice ({images[image_id]['file_name']!r} and "
                f"{img['file_name']!r}); one id would be two images, which could land in different splits "
                "(a leak) and mix their boxes: give every image its own id"
            )
        images[image_id] = img
    by_image: dict[Any, list[dict]] = {}
    orphans: list[dict] = []
    annotations = _coco_entries(data, "annotations", uri)
    for n, ann in enumerate(annotations):
        image_id = _coco_field(ann, "image_id", "annotation", n, uri)
        category = _coco_field(ann, "category_id", "annotation", n, uri)
        if category not in index:
            raise SourceError(
                f"{uri}: annotation {ann.get('id')} has category_id {category!r}, not among the declared "
                f"categories {sorted(index)}; declare it under 'categories' ({{\"id\": {category!r}, "
                '"name": ...}) or drop the annotations that use it'
            )
        if image_id not in images:
            orphans.append(
                {
                    "key": f"annotation:{ann.get('id')}",
                    "path": uri,
                    "split": None,
                    "reason": f"orphan annotation: image_id {image_id!r} is not among the images",
                    "annotation_id": ann.get("id"),
                    "bbox": ann.get("bbox"),
                }
            )
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
    items, missing, fp = [], [], []
    for img in images.values():
        path = _resolve(base, img["file_name"])
        if not is_gcs(path) and not os.path.exists(path):
            alt = _resolve(base, posixpath.join("images", img["file_name"]))
            if os.path.exists(alt):
                path = alt
            else:
                missing.append(img["file_name"])
                continue
        anns = by_image.get(img["id"], [])
        declared = (img.get("width"), img.get("height"))
        boxes = {
            "bbox": [a.get("bbox") for a in anns],
            "ids": [a.get("id") for a in anns],
            "labels": [index[a["category_id"]] for a in anns],
            "is_crowd": [int(bool(a.get("iscrowd", 0))) for a in anns],
            "declared": declared if declared != (None, None) else None,
        }
        size = 0 if is_gcs(path) else os.path.getsize(path)
        fp.append((img["file_name"], size))
        ext = posixpath.splitext(path)[1].lower()
        items.append(Item(str(img["file_name"]), NO_LABEL, path, None, size, EXTENSIONS.get(ext), boxes=boxes))
    if missing:
        raise SourceError(
            f"{uri}: {len(missing)} images point nowhere (e.g. {missing[:3]}); file_name is relative to the "
            "JSON's folder or its images/ folder: fix the names or drop those images"
        )
    fingerprint = _hash(["coco", COCO_READER_VERSION, read_bytes(uri), *fp])
    return Source(kind, uri, names, items, fingerprint, task="detection", rejected=orphans)


def is_builtin(uri: str) -> bool:
    """A built-in name: ``fashion-mnist``, ``digits``, ``shapes`` or ``shapes:<count>``."""
    return uri in BUILTINS or uri.startswith("shapes:")


def _shapes_count(uri: str) -> int:
    if uri == "shapes":
        from components.convert.shapes import DEFAULT_COUNT

        return DEFAULT_COUNT
    text = uri.split(":", 1)[1]
    if not text.isdigit() or int(text) < 1:
        raise SourceError(f"bad built-in source {uri!r}: expected 'shapes' or 'shapes:<count>' (e.g. shapes:500)")
    return int(text)


def _open_shapes(uri: str, kind: str, classes: list[str] | None) -> Source:
    """The built-in detection data: generated once into the cache, then read as the COCO file it is."""
    from components.convert import shapes

    count = _shapes_count(uri)
    path = shapes.cached(count)
    src = _open_coco(str(path), "coco", None)
    src.kind, src.uri = "shapes", uri
    # Where the cache lives is no part of the data: the fingerprint does not depend on it.
    src.fingerprint = _hash(["shapes", shapes.GENERATOR_VERSION, count, src.fingerprint])
    return src


# --------------------------------------------------------------------------------------------
# Arrays: IDX, .npz, built-ins
# --------------------------------------------------------------------------------------------


_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def _idx_header(raw: bytes, path: str) -> tuple[np.dtype, tuple[int, ...], int]:
    """(dtype, shape, data offset) from the first bytes of an IDX file's content."""
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise SourceError(f"{path} is not an IDX file: bad magic {raw[:4]!r}")
    if raw[2] not in _IDX_DTYPES:
        raise SourceError(f"{path}: unknown IDX data type 0x{raw[2]:02x}")
    ndim = raw[3]
    if len(raw) < 4 + 4 * ndim:
        raise SourceError(f"{path}: truncated IDX header")
    return np.dtype(_IDX_DTYPES[raw[2]]), struct.unpack_from(f">{ndim}I", raw, 4), 4 + 4 * ndim


def read_idx(path: str) -> np.ndarray:
    """Reads an MNIST-style IDX file (optionally gzipped) into a NumPy array."""
    raw = read_bytes(path)
    if path.endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as err:
            raise SourceError(f"{path} is not a readable gzip file ({err}); re-download or gunzip it") from None
    dtype, shape, offset = _idx_header(raw, path)
    data = np.frombuffer(raw, dtype=dtype, offset=offset) if len(raw) > offset else np.empty(0, dtype)
    if data.size != int(np.prod(shape)):
        raise SourceError(f"{path}: truncated IDX file, header says {shape}, holds {data.size} values")
    return data.reshape(shape)


def _idx_prefix(path: str, want: int) -> bytes:
    """The first ``want`` bytes of an IDX file's content (gunzipped as far as needed)."""
    with open(path, "rb") as f:
        if not path.endswith(".gz"):
            return f.read(want)
        inflate, out = zlib.decompressobj(31), bytearray()
        try:
            while len(out) < want:
                block = inflate.unconsumed_tail or f.read(1 << 16)
                if not block:
                    break
                out += inflate.decompress(block, want - len(out))
        except zlib.error as err:
            raise SourceError(f"{path} is not a readable gzip file ({err}); re-download or gunzip it") from None
        if len(out) < want and not inflate.eof:
            raise SourceError(f"{path} is not a readable gzip file (it ends too early); re-download or gunzip it")
        return bytes(out)


@dataclass
class IdxImages:
    """An IDX images file: its header and first images now, all its pixels from a background thread.

    Gunzipping Fashion-MNIST's training images takes 0.2 s; zlib releases the GIL, so the labels,
    the split hashing and the shard plan are done meanwhile on another core. :meth:`array` waits
    for the pixels (and raises a truncated or corrupt file's error).
    """

    path: str
    shape: tuple[int, ...]
    head: np.ndarray  # the first images (up to 32), for the size estimate
    pending: Future

    @classmethod
    def open(cls, path: str) -> IdxImages:
        dtype, shape, offset = _idx_header(_idx_prefix(path, 4 + 4 * 255), path)
        if len(shape) not in (3, 4):
            raise SourceError(f"{path}: IDX images must be [N, H, W] or [N, H, W, C], the header says {shape}")
        per_image = int(np.prod(shape[1:])) * dtype.itemsize
        raw = _idx_prefix(path, offset + min(32, shape[0]) * per_image)
        got = (len(raw) - offset) // per_image if per_image else 0
        head = np.frombuffer(raw, dtype, count=got * per_image // dtype.itemsize, offset=offset)
        pending: Future = Future()

        def read() -> None:
            try:
                pending.set_result(read_idx(path))
            except BaseException as err:  # handed to whoever waits for the pixels
                pending.set_exception(err)

        threading.Thread(target=read, name="idx-read", daemon=True).start()
        return cls(path, tuple(shape), head.reshape(got, *shape[1:]), pending)

    def __len__(self) -> int:
        return self.shape[0]

    def array(self) -> np.ndarray:
        return self.pending.result()


def _idx_pairs(folder: str) -> dict[str, tuple[str, str]]:
    """Split name -> (images file, labels file): ``train-images-idx3-ubyte.gz`` etc."""
    names = sorted(os.listdir(folder))
    pairs: dict[str, dict[str, str]] = {}
    for n in names:
        if not _is_idx_name(n):
            continue
        prefix, _, rest = n.partition("-")
        role = "images" if "idx3" in n or "idx4" in n else "labels"
        split = {"t10k": "test", "training": "train"}.get(prefix, prefix)
        pairs.setdefault(split, {})[role] = os.path.join(folder, n)
    out = {}
    for split, d in pairs.items():
        if set(d) != {"images", "labels"}:
            raise SourceError(f"{folder}: IDX split {split!r} needs both an images and a labels file, got {d}")
        out[split] = (d["images"], d["labels"])
    if not out:
        raise SourceError(f"no IDX files in {folder}: expected <split>-images-idx3-ubyte[.gz] pairs")
    return out


def _array_source(
    kind: str,
    uri: str,
    labels: dict[str, np.ndarray],
    images: dict[str, np.ndarray],
    classes: list[str],
    fingerprint: str,
    given_splits: bool,
    options: dict[str, Any],
) -> Source:
    items = []
    for name, lab in labels.items():
        imgs = images[name]
        est = _png_size_estimate(imgs)
        if len(lab) != len(imgs):
            raise SourceError(f"{uri}: {name} has {len(imgs)} images but {len(lab)} labels")
        bad = (lab < 0) | (lab >= len(classes))
        if bad.any():
            raise SourceError(
                f"{uri}: {name} has labels outside the classes 0..{len(classes) - 1}: {sorted(set(lab[bad]))[:5]}"
            )
        split = name if given_splits else None
        prefix = f"{kind}:{name}:"
        # tolist(): Python ints at once (indexing a NumPy array per item costs more than the Item)
        items.extend(Item(prefix + str(i), y, (name, i), split, est) for i, y in enumerate(lab.tolist()))
    return Source(kind, uri, classes, items, fingerprint, options=options)


def _png_size_estimate(images: np.ndarray | IdxImages) -> int:
    from components.convert.imaging import encode_png

    if len(images) == 0:
        return 0
    if isinstance(images, IdxImages):  # its first images: the rest are still being read
        sample = images.head
    else:
        sample = images[:: max(1, len(images) // 32)][:32]
    if len(sample) == 0:
        return 0
    return int(np.mean([len(encode_png(_as_uint8(x))) for x in sample])) + 150  # + record overhead


def _as_uint8(x: np.ndarray) -> np.ndarray:
    if x.dtype == np.uint8:
        return x
    if np.issubdtype(x.dtype, np.floating):
        scale = 255.0 if float(np.nanmax(x, initial=0)) <= 1.0 else 1.0
        return np.clip(np.rint(x * scale), 0, 255).astype(np.uint8)
    return np.clip(x, 0, 255).astype(np.uint8)


_IDX_CACHE: dict[tuple, tuple[dict[str, IdxImages], dict[str, np.ndarray]]] = {}


def _load_idx(folder: str) -> tuple[dict[str, IdxImages], dict[str, np.ndarray]]:
    # Scanning and loading in the same process (and forked workers) decompress the files once.
    key = _stamp(folder)
    if key not in _IDX_CACHE:
        _IDX_CACHE.clear()
        _IDX_CACHE[key] = _load_idx_files(folder)
    return _IDX_CACHE[key]


def _load_idx_files(folder: str) -> tuple[dict[str, IdxImages], dict[str, np.ndarray]]:
    images, labels = {}, {}
    for split, (img, lab) in _idx_pairs(folder).items():
        images[split] = IdxImages.open(img)  # pixels arrive in the background
        labels[split] = read_idx(lab).astype(np.int64)
    return images, labels


def _open_idx(uri: str, kind: str, classes: list[str] | None, names: list[str] | None = None) -> Source:
    images, labels = _load_idx(uri)
    top = max(int(v.max()) for v in labels.values()) + 1
    names = list(classes or names or [str(i) for i in range(top)])
    files = sorted(p for pair in _idx_pairs(uri).values() for p in pair)
    fp = _hash([(os.path.basename(p), os.path.getsize(p), _sha_file(p)) for p in files])
    return _array_source(kind, uri, labels, images, names, fp, True, {})


def _sha_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fashion_mnist_dir() -> str:
    """The local Fashion-MNIST IDX folder; downloads it with Keras where it is missing (clusters)."""
    if os.path.isdir(FASHION_MNIST_DIR) and any(_is_idx_name(n) for n in os.listdir(FASHION_MNIST_DIR)):
        return FASHION_MNIST_DIR
    import keras

    keras.datasets.fashion_mnist.load_data()  # caches the same gzipped IDX files
    return os.path.join(os.path.expanduser("~"), ".keras", "datasets", "fashion-mnist")


def _open_fashion_mnist(uri: str, kind: str, classes: list[str] | None) -> Source:
    folder = fashion_mnist_dir()
    src = _open_idx(folder, "idx", None, FASHION_MNIST_CLASSES)
    src.kind, src.uri, src.options = "fashion-mnist", "fashion-mnist", {"folder": folder}
    for item in src.items:
        item.key = item.key.replace("idx:", "fashion-mnist:", 1)
    return src


# scikit-learn's copy of the UCI handwritten digits (1,797 8x8 images), shipped with the package so
# that the built-in source needs neither scikit-learn (about 150 MB with SciPy, in no image) nor a
# download. Made by ``load_digits()`` of the scikit-learn version stored inside, intensities 0..16
# scaled to 0..255 (docs/tfrecords.md).
DIGITS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits.npz")


def _digits_file() -> tuple[np.ndarray, np.ndarray, str]:
    if not os.path.isfile(DIGITS_FILE):
        raise SourceError(
            f"the built-in digits data is missing: expected {DIGITS_FILE}, part of the package; "
            "reinstall lean-tpu-pipelines (its package data includes components/convert/digits.npz)"
        )
    with np.load(DIGITS_FILE, allow_pickle=False) as z:
        return z["images"], z["labels"].astype(np.int64), str(z["sklearn_version"])


def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    images, labels, _ = _digits_file()
    return images, labels


def _open_digits(uri: str, kind: str, classes: list[str] | None) -> Source:
    images, labels, version = _digits_file()
    # The same fingerprint as when the arrays came from scikit-learn itself (that version, same
    # pixels): a dataset converted before keeps matching its source.
    fp = _hash(["sklearn-digits", version, hashlib.sha256(images.tobytes()).hexdigest()])
    names = [str(i) for i in range(10)]
    return _array_source(kind, "digits", {"all": labels}, {"all": images}, names, fp, False, {})


_NPZ_PAIRS = (("images", "labels"), ("x", "y"), ("x_train", "y_train"), ("x_test", "y_test"))


def _npz_arrays(uri: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], list[str] | None]:
    with np.load(io.BytesIO(read_bytes(uri)), allow_pickle=False) as z:
        keys = set(z.files)
        images, labels = {}, {}
        for xk, yk in _NPZ_PAIRS:
            if xk in keys and yk in keys:
                name = xk.split("_", 1)[1] if "_" in xk else "all"
                images[name], labels[name] = z[xk], z[yk].astype(np.int64).reshape(-1)
        names = [str(c) for c in z["classes"]] if "classes" in keys else None
    if not images:
        raise SourceError(
            f"{uri}: expected arrays images+labels (or x+y, or x_train+y_train[+x_test+y_test]), got {sorted(keys)}"
        )
    for name, arr in images.items():
        if arr.ndim not in (3, 4) or (arr.ndim == 4 and arr.shape[3] not in (1, 3, 4)):
            raise SourceError(f"{uri}: {name} images must be [N, H, W] or [N, H, W, C<=4], got {arr.shape}")
    return images, labels, names


def _open_npz(uri: str, kind: str, classes: list[str] | None) -> Source:
    images, labels, names = _npz_arrays(uri)
    top = max(int(v.max(initial=0)) for v in labels.values()) + 1
    names = list(classes or names or [str(i) for i in range(top)])
    given = set(images) != {"all"}
    return _array_source(kind, uri, labels, images, names, _hash([read_bytes(uri)]), given, {})


# --------------------------------------------------------------------------------------------
# Loading in worker processes
# --------------------------------------------------------------------------------------------


class Loader:
    """Reads one item's content in a worker: ``("bytes", data)`` or ``("array", pixels)``."""

    def __init__(self, spec: dict[str, Any]):
        self.kind = spec["kind"]
        self.images: dict[str, np.ndarray] = {}
        if self.kind in ("fashion-mnist", "idx"):
            pending, _ = _load_idx(spec["folder"] if self.kind == "fashion-mnist" else spec["uri"])
            self.images = {name: images.array() for name, images in pending.items()}
        elif self.kind == "digits":
            self.images = {"all": _digits_arrays()[0]}
        elif self.kind == "npz":
            self.images = _npz_arrays(spec["uri"])[0]

    def load(self, item: Item) -> tuple[str, Any]:
        if self.images:
            name, i = item.ref
            return "array", _as_uint8(self.images[name][i])
        return "bytes", read_bytes(item.ref)

    def load_all(self, items: list[Item]) -> Iterator[tuple[str, Any] | OSError]:
        """Loads items in order; gs:// objects are fetched by threads (each request waits on the network)."""
        if self.images or not items or not is_gcs(str(items[0].ref)):
            for item in items:
                try:
                    yield self.load(item)
                except OSError as err:
                    yield err
            return

        def fetch(item: Item) -> tuple[str, Any] | OSError:
            try:
                return self.load(item)
            except OSError as err:
                return err

        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=16) as pool:
            yield from pool.map(fetch, items)


_LOADERS: dict[str, Loader] = {}


def loader(spec: dict[str, Any]) -> Loader:
    """The process's cached loader for a source spec (arrays are read once per process).

    For array files the cache key includes their sizes and times: a file replaced since is read again.
    """
    key = json.dumps(spec, sort_keys=True)
    if spec["kind"] in ("idx", "fashion-mnist", "npz"):
        key += repr(_stamp(spec.get("folder") or spec["uri"]))
    if key not in _LOADERS:
        _LOADERS.clear()  # one source at a time: an earlier one's arrays are let go
        _LOADERS[key] = Loader(spec)
    return _LOADERS[key]


def _stamp(path: str) -> tuple:
    """Sizes and modification times of a local file or of a folder's files (nothing for gs://)."""
    if is_gcs(path) or not os.path.exists(path):
        return ()
    paths = [os.path.join(path, n) for n in sorted(os.listdir(path))] if os.path.isdir(path) else [path]
    return tuple((p, st.st_size, st.st_mtime_ns) for p in paths for st in [os.stat(p)])
