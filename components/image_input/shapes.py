"""The built-in detection dataset ``shapes``: generated, deterministic, written as a COCO folder.

Squares, circles and triangles (16-32 px) on textured 64 x 64 canvases, 0-4 objects per image
(about one image in ten has none: a negative), objects overlapping little. Nothing is
downloaded: the images and ``instances.json`` are generated from a seed, then converted through
the same COCO reader users' files go through, so ``make run TASK=detection`` works on a fresh
machine and tests train a real detector on it.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

CLASSES = ("square", "circle", "triangle")
DEFAULT_COUNT = 3000
DEFAULT_SIZE = 64
MIN_SIDE, MAX_SIDE = 16, 32
MAX_OBJECTS = 4
# Placements overlapping an earlier object more than this are redrawn (a few tries), so every
# object stays visible enough to be found.
MAX_OVERLAP = 0.25
GENERATOR_VERSION = 1


def _texture(rng: np.random.Generator, size: int) -> np.ndarray:
    """A smooth random colour field with fine noise: backgrounds that are not trivially flat."""
    coarse = rng.uniform(40, 215, size=(4, 4, 3)).astype(np.uint8)
    smooth = np.asarray(Image.fromarray(coarse).resize((size, size), Image.BICUBIC), dtype=np.float32)
    noise = rng.normal(0, 12, size=(size, size, 3))
    return np.clip(smooth + noise, 0, 255).astype(np.uint8)


def _iou(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    ax, ay, aw, ah = a
    bx, by, bw, bh = b
    iw = max(0.0, min(ax + aw, bx + bw) - max(ax, bx))
    ih = max(0.0, min(ay + ah, by + bh) - max(ay, by))
    inter = iw * ih
    return inter / (aw * ah + bw * bh - inter)


def _draw(draw: ImageDraw.ImageDraw, kind: str, box: tuple[int, int, int, int], colour: tuple[int, ...]) -> None:
    x, y, w, h = box
    if kind == "square":
        draw.rectangle([x, y, x + w - 1, y + h - 1], fill=colour)
    elif kind == "circle":
        draw.ellipse([x, y, x + w - 1, y + h - 1], fill=colour)
    else:
        draw.polygon([(x + w / 2, y), (x + w - 1, y + h - 1), (x, y + h - 1)], fill=colour)


def make_image(rng: np.random.Generator, size: int = DEFAULT_SIZE) -> tuple[bytes, list[dict]]:
    """One PNG image and its objects: ``[{"category": name, "bbox": [x, y, w, h]}]`` in pixels."""
    image = Image.fromarray(_texture(rng, size))
    draw = ImageDraw.Draw(image)
    count = 0 if rng.random() < 0.1 else int(rng.integers(1, MAX_OBJECTS + 1))
    placed: list[tuple[int, int, int, int]] = []
    objects = []
    for _ in range(count):
        for _try in range(10):
            side = int(rng.integers(MIN_SIDE, MAX_SIDE + 1))
            w = h = side
            x, y = int(rng.integers(0, size - w + 1)), int(rng.integers(0, size - h + 1))
            if all(_iou((x, y, w, h), p) <= MAX_OVERLAP for p in placed):
                break
        else:
            continue
        kind = CLASSES[int(rng.integers(len(CLASSES)))]
        # Colours far from the background's mid tones, so the objects stand out.
        colour = tuple(int(v) for v in rng.choice([15, 240], size=3))
        _draw(draw, kind, (x, y, w, h), colour)
        placed.append((x, y, w, h))
        objects.append({"category": kind, "bbox": [x, y, w, h]})
    out = io.BytesIO()
    image.save(out, format="PNG", compress_level=1)
    return out.getvalue(), objects


def _write_atomic(path: Path, data: bytes) -> None:
    """Writes under a temporary name, then renames: a concurrent generation never reads half a file."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def cache_root() -> Path:
    """Where generated data is kept: ``trainer.storage.cache_root()`` (``~/.cache/lean-tpu-pipelines``)."""
    from trainer.storage import cache_root as root

    return Path(root())


def cached(count: int = DEFAULT_COUNT, seed: int = 0, size: int = DEFAULT_SIZE) -> Path:
    """The ``instances.json`` of a generation in the cache, generated there on first use.

    The folder name carries everything the bytes depend on (generator version, count, seed, and the
    size when not the default), so a generation is made once per machine and reused. Where the
    cache cannot be written (a read-only home in a container), the system's temporary folder is used.
    """
    name = f"shapes-v{GENERATOR_VERSION}-{count}-{seed}" + (f"-{size}px" if size != DEFAULT_SIZE else "")
    try:
        return generate(cache_root() / name, count, size, seed)
    except PermissionError:
        return generate(Path(tempfile.gettempdir()) / "lean-tpu-pipelines" / name, count, size, seed)


def generate(folder: str | Path, count: int = DEFAULT_COUNT, size: int = DEFAULT_SIZE, seed: int = 0) -> Path:
    """Writes ``count`` images and ``instances.json`` (COCO) under ``folder``; returns the JSON's path.

    Deterministic: the same arguments give the same bytes. A folder that already holds the
    same generation (``instances.json`` with the same ``info``) is reused as it is. The JSON is
    written last, under a temporary name and renamed, so a killed generation is redone.
    """
    folder = Path(folder)
    target = folder / "instances.json"
    info = {"description": "lean-tpu-pipelines built-in shapes", "version": GENERATOR_VERSION, "count": count,
            "size": size, "seed": seed}  # fmt: skip
    if target.exists():
        try:
            if json.loads(target.read_text()).get("info") == info:
                return target
        except (OSError, ValueError):
            pass  # unreadable: generate again
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    images, annotations = [], []
    for i in range(count):
        data, objects = make_image(rng, size)
        name = f"images/{i:05d}.png"
        _write_atomic(folder / name, data)
        images.append({"id": i + 1, "file_name": name, "width": size, "height": size})
        for obj in objects:
            x, y, w, h = obj["bbox"]
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": i + 1,
                    "category_id": CLASSES.index(obj["category"]) + 1,
                    "bbox": [x, y, w, h],
                    "area": w * h,
                    "iscrowd": 0,
                }
            )
    coco = {
        "info": info,
        "images": images,
        "annotations": annotations,
        "categories": [{"id": i + 1, "name": name} for i, name in enumerate(CLASSES)],
    }
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".instances.")
    with os.fdopen(fd, "w") as f:
        json.dump(coco, f)
    os.replace(tmp, target)
    return target
