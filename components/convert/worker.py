"""The per-chunk work of a conversion: no TensorFlow.

A chunk is a run of consecutive items of one shard. :func:`encode_chunk` reads each item, checks or
converts it, builds the record (:func:`trainer.tfrecord_wire.encode_example`) and frames it by hand
(byte-identical to ``tf.io.TFRecordWriter``), gzip-compressed as one member when asked
(concatenated members are one valid gzip stream). It runs in the converting process for small jobs
and in the worker processes of :mod:`components.convert.pool` otherwise.
"""

from __future__ import annotations

import gzip
import hashlib
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import google_crc32c
import numpy as np

from components.image_input import imaging, sources
from trainer.tfrecord_wire import encode_example_parts, frame_parts
from trainer.tfrecords import NO_LABEL


@dataclass
class Options:
    """What every chunk needs besides its items (picklable)."""

    spec: dict[str, Any]
    classes: list[str]
    compression: str | None = None
    resize: tuple[int, int] | None = None
    resize_mode: str = "crop"


@dataclass
class ChunkResult:
    """Framed records of a chunk and what happened to its items."""

    data: list[bytes] = field(default_factory=list)  # the framed records' pieces; empty once written
    count: int = 0
    class_counts: Counter = field(default_factory=Counter)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    converted: Counter = field(default_factory=Counter)
    shapes: set = field(default_factory=set)  # distinct (h, w, c), at most a few kept
    boxes: Counter = field(default_factory=Counter)  # detection: kept, clipped, dropped, crowd, negatives
    dropped: list[dict[str, Any]] = field(default_factory=list)  # detection: one rejected.jsonl row per dropped box
    size: int = 0  # bytes of the framed chunk
    crc: int = 0  # CRC-32C of those bytes

    def write_to(self, f: Any) -> None:
        """Appends the chunk to the open shard ``f`` (in the parent) and sets ``size`` and ``crc``."""
        crc = 0
        for part in self.data:
            crc = google_crc32c.extend(crc, part)
        f.writelines(self.data)
        self.size, self.crc = sum(len(p) for p in self.data), crc
        self.data = []


def _from_array(arr: np.ndarray, opts: Options) -> tuple[bytes, imaging.ImageInfo]:
    if opts.resize is not None:
        from PIL import Image

        img = Image.fromarray(arr[:, :, 0] if arr.ndim == 3 and arr.shape[2] == 1 else arr)
        return imaging.resize_image(img, opts.resize, opts.resize_mode, prefer_jpeg=False)
    h, w = arr.shape[:2]
    c = 1 if arr.ndim == 2 else arr.shape[2]
    return imaging.encode_png(arr), imaging.ImageInfo("png", h, w, c)


def _from_bytes(data: bytes, item: sources.Item, opts: Options, res: ChunkResult):
    info = imaging.inspect(data, item.expected)
    if opts.resize is not None:
        return imaging.resize(data, info, opts.resize, opts.resize_mode)
    if info.convert:
        res.converted[info.convert] += 1
        data, info = imaging.normalize(data, info)
    return data, info


def _array_batch(items: list[sources.Item], load: sources.Loader, opts: Options) -> list | None:
    """The chunk's PNGs in one batch, when it is a run of uint8 images of one array kept at their size."""
    if opts.resize is not None or not load.images or not items:
        return None
    name = items[0].ref[0]
    array = load.images.get(name)
    if array is None or array.dtype != np.uint8 or any(it.ref[0] != name for it in items):
        return None
    batch = array[[it.ref[1] for it in items]]
    info = imaging.ImageInfo("png", batch.shape[1], batch.shape[2], 1 if batch.ndim == 3 else batch.shape[3])
    return [(png, info) for png in imaging.encode_png_batch(batch)]


def _images(items: list[sources.Item], load: sources.Loader, opts: Options, res: ChunkResult):
    """``(item, encoded bytes, ImageInfo)`` per usable item, in order; the others go to ``res.rejected``."""
    batch = _array_batch(items, load, opts)
    if batch is not None:
        for item, (data, info) in zip(items, batch, strict=True):
            yield item, data, info
        return
    for item, loaded in zip(items, load.load_all(items), strict=True):
        if isinstance(loaded, OSError):
            res.rejected.append(_reject(item, f"unreadable: {loaded.strerror or loaded}"))
            continue
        kind, content = loaded
        try:
            if kind == "array":
                data, info = _from_array(content, opts)
            else:
                data, info = _from_bytes(content, item, opts, res)
        except imaging.BadImage as err:
            res.rejected.append(_reject(item, str(err)))
            continue
        yield item, data, info


def encode_chunk(items: list[sources.Item], opts: Options) -> ChunkResult:
    """Turns items into framed TFRecord bytes; bad files become rejections, not errors."""
    load = sources.loader(opts.spec)
    res = ChunkResult()
    out: list[bytes] = []
    classes = opts.classes
    shapes, class_counts, sha256 = res.shapes, res.class_counts, hashlib.sha256
    for item, data, info in _images(items, load, opts, res):
        shape = (info.height, info.width, info.channels)
        if shape not in shapes:
            shapes.add(shape if len(shapes) < 3 else "mixed")
        boxes = None
        if item.boxes is not None:
            boxes = _detection_boxes(item, info, res)
            if boxes is None:  # the image was rejected
                continue
        parts = encode_example_parts(
            image=data,
            image_format=info.format,
            height=info.height,
            width=info.width,
            channels=info.channels,
            label=item.label,
            label_text=classes[item.label] if item.label != NO_LABEL else "",
            source_key=item.key,
            sha256=sha256(data).hexdigest(),
            boxes=boxes["boxes"] if boxes is not None else None,
            box_labels=boxes["labels"] if boxes is not None else None,
            box_texts=[classes[i] for i in boxes["labels"]] if boxes is not None else None,
            is_crowd=boxes["is_crowd"] if boxes is not None else None,
            extra=item.extra,
        )
        frame_parts(parts, out)
        class_counts[item.label] += 1
    res.count = sum(class_counts.values())
    if opts.compression == "GZIP":
        out = [gzip.compress(b"".join(out), compresslevel=6, mtime=0)]  # mtime=0: same bytes every run
    res.data = out
    return res


def _detection_boxes(item: sources.Item, info: imaging.ImageInfo, res: ChunkResult) -> dict[str, list] | None:
    """An image's boxes normalised by the image file's true size, or None when the image is rejected.

    The declared width and height must be those of the file: boxes are in the declared frame, and
    scaling them by another size would misplace every one of them without a trace. Boxes partly
    outside the image are clipped (counted); empty, negative-size, malformed and wholly outside
    boxes are dropped, each with a ``rejected.jsonl`` row. An image left without boxes is a negative.
    """
    width, height = info.width, info.height
    declared = item.boxes.declared
    if declared is not None and (declared[0], declared[1]) != (width, height):
        dw, dh = declared
        rotated = " (swapped: a 90-degree EXIF rotation?)" if (dw, dh) == (height, width) else ""
        res.rejected.append(
            _reject(
                item,
                f"size mismatch: the label file declares {dw}x{dh} (width x height), the image file is "
                f"{width}x{height}{rotated}; its boxes are in the declared frame and cannot be placed: fix the "
                "image's width and height in the label file (COCO, VOC, Label Studio) or annotate the file as it is",
            )
        )
        return None
    out: dict[str, list] = {"boxes": [], "labels": [], "is_crowd": []}
    scale = (width, height, width, height) if item.boxes.normalized else None
    for raw in item.boxes.boxes:
        bbox = raw.bbox
        if scale is not None and isinstance(bbox, (list, tuple)) and len(bbox) == 4 and all(map(_finite, bbox)):
            bbox = [v * s for v, s in zip(bbox, scale, strict=True)]  # YOLO's fractions, in this file's pixels
        reason, box = _check_box(bbox, width, height)
        if box is None:
            res.boxes["dropped"] += 1
            res.dropped.append({**_reject(item, reason), "annotation_id": raw.annotation_id, "bbox": raw.bbox})
            continue
        if reason is not None:
            res.boxes["clipped"] += 1
        res.boxes["kept"] += 1
        res.boxes["crowd"] += raw.is_crowd
        out["boxes"].append(box)
        out["labels"].append(raw.label)
        out["is_crowd"].append(raw.is_crowd)
    if not out["boxes"]:
        res.boxes["negatives"] += 1
    return out


def _check_box(bbox: Any, width: int, height: int) -> tuple[str | None, list[float] | None]:
    """(reason, normalised ``[ymin, xmin, ymax, xmax]``): the box is None when dropped, the reason set when clipped."""
    if not isinstance(bbox, (list, tuple)) or len(bbox) != 4 or not all(_finite(v) for v in bbox):
        return f"malformed box: expected [x, y, width, height] as 4 finite numbers, got {bbox!r}", None
    x, y, w, h = (float(v) for v in bbox)
    if w < 0 or h < 0:
        return f"negative-size box: width {w:g}, height {h:g} (inverted corners?)", None
    if w == 0 or h == 0:
        return f"zero-area box: width {w:g}, height {h:g}", None
    x0, y0, x1, y1 = max(0.0, x), max(0.0, y), min(float(width), x + w), min(float(height), y + h)
    if x1 <= x0 or y1 <= y0:
        return f"box outside the image: [x, y, w, h] {[x, y, w, h]} in a {width}x{height} image", None
    clipped = (x0, y0, x1, y1) != (x, y, x + w, y + h)
    return ("clipped" if clipped else None), [y0 / height, x0 / width, y1 / height, x1 / width]


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _reject(item: sources.Item, reason: str) -> dict[str, Any]:
    ref = item.ref if isinstance(item.ref, str) else list(item.ref)
    return {"key": item.key, "path": ref, "split": item.split, "reason": reason}
