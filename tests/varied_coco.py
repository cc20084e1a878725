"""Seeded generator of varied COCO detection sets, nothing like the built-in ``shapes``.

The acceptance data of the detector's fit to the data: non-square images of varied sizes (JPEG
and PNG mixed, some grayscale), cluttered textured backgrounds with distractors that are no class,
3 to 6 classes of objects with their own shapes and aspect ratios (rings, crosses, stars, bars,
ellipses, diamonds), overlaps, crowd boxes and images without objects. Written as a COCO folder
(``instances.json`` beside ``images/``) that the converter reads like a user's file.

``python -m tests.varied_coco OUT [--count N] [--seed S] [--kind issue|wide]`` writes one:
``issue`` is the set a new user tried (96-160 px images, 3 classes of 24-56 px objects, 0-4 per
image); ``wide`` spans 96-640 px images with objects from 4% to 60% of the short side.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import math
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

KINDS = ("ring", "cross", "star", "bar", "ellipse", "diamond")
# Width / height drawn per kind (a bar is elongated, either way up; an ellipse less so).
_ASPECTS = {
    "ring": (0.85, 1.2),
    "cross": (0.8, 1.25),
    "star": (0.85, 1.2),
    "bar": (2.5, 4.0),
    "ellipse": (1.4, 2.2),
    "diamond": (0.6, 0.9),
}


@dataclasses.dataclass(frozen=True)
class VariedSpec:
    """What a generated set looks like.

    Attributes:
        count: images.
        seed: the generator's seed (the same spec gives the same bytes).
        classes: number of classes (3 to 6), the first of ``KINDS``.
        image_sides: (smallest, largest) image side in pixels; width and height drawn apart.
        object_px: (smallest, largest) object size in pixels (the longer side); None: use
            ``object_share`` of the image's short side instead.
        object_share: (smallest, largest) object size as a share of the image's short side.
        objects: (fewest, most) objects per image; about ``negatives`` of the images have none.
        negatives: share of images without objects.
        grayscale: share of grayscale images.
        jpeg: share of images stored as JPEG (the rest PNG).
        crowd: share of images with one crowd box (a cluster of small marks, ``iscrowd: 1``).
        max_overlap: placements overlapping an earlier object more than this IoU are redrawn.
    """

    count: int = 1500
    seed: int = 0
    classes: int = 3
    image_sides: tuple[int, int] = (96, 160)
    object_px: tuple[int, int] | None = (24, 56)
    object_share: tuple[float, float] = (0.04, 0.6)
    objects: tuple[int, int] = (0, 4)
    negatives: float = 0.08
    grayscale: float = 0.2
    jpeg: float = 0.5
    crowd: float = 0.05
    max_overlap: float = 0.3


ISSUE = VariedSpec()
WIDE = VariedSpec(classes=6, image_sides=(96, 640), object_px=None, objects=(0, 6))


def _background(rng: np.random.Generator, height: int, width: int) -> Image.Image:
    """A textured, cluttered canvas: a colour field, stripes or noise, and distractor strokes."""
    coarse = rng.uniform(30, 225, size=(int(rng.integers(3, 9)), int(rng.integers(3, 9)), 3)).astype(np.uint8)
    field = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC), np.float32)
    yy, xx = np.mgrid[0:height, 0:width]
    angle, period = rng.uniform(0, math.pi), rng.uniform(4, 14)
    stripes = np.sin((xx * math.cos(angle) + yy * math.sin(angle)) * 2 * math.pi / period)[..., None]
    field += rng.uniform(0, 30) * stripes + rng.normal(0, rng.uniform(4, 18), size=(height, width, 3))
    image = Image.fromarray(np.clip(field, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(3, 12))):  # distractors: strokes and blobs that are no class
        colour = tuple(int(v) for v in rng.integers(0, 256, size=3))
        x0, y0 = float(rng.uniform(0, width)), float(rng.uniform(0, height))
        if rng.random() < 0.6:
            x1, y1 = x0 + rng.normal(0, width / 4), y0 + rng.normal(0, height / 4)
            draw.line([x0, y0, x1, y1], fill=colour, width=int(rng.integers(1, 4)))
        else:
            r = float(rng.uniform(2, max(3, min(height, width) / 12)))
            pts = [(x0 + r * rng.uniform(0.5, 1.5) * math.cos(t), y0 + r * rng.uniform(0.5, 1.5) * math.sin(t))
                   for t in np.linspace(0, 2 * math.pi, int(rng.integers(5, 9)), endpoint=False)]  # fmt: skip
            draw.polygon(pts, fill=colour)
    return image


def _draw_object(draw: ImageDraw.ImageDraw, kind: str, box: tuple[float, float, float, float], colour: tuple) -> None:
    """Draws one object filling ``box`` (x, y, w, h)."""
    x, y, w, h = box
    cx, cy = x + w / 2, y + h / 2
    if kind == "ring":
        draw.ellipse([x, y, x + w - 1, y + h - 1], outline=colour, width=max(2, int(min(w, h) / 5)))
    elif kind == "cross":
        tw, th = max(2.0, w / 3.2), max(2.0, h / 3.2)
        draw.rectangle([cx - tw / 2, y, cx + tw / 2, y + h - 1], fill=colour)
        draw.rectangle([x, cy - th / 2, x + w - 1, cy + th / 2], fill=colour)
    elif kind == "star":
        pts = []
        for i in range(10):
            t = -math.pi / 2 + i * math.pi / 5
            r = 1.0 if i % 2 == 0 else 0.45
            pts.append((cx + r * (w / 2) * math.cos(t), cy + r * (h / 2) * math.sin(t)))
        draw.polygon(pts, fill=colour)
    elif kind in ("bar", "ellipse"):
        shape = draw.rounded_rectangle if kind == "bar" else draw.ellipse
        kwargs = {"radius": int(min(w, h) / 4)} if kind == "bar" else {}
        shape([x, y, x + w - 1, y + h - 1], fill=colour, **kwargs)
    else:
        draw.polygon([(cx, y), (x + w - 1, cy), (cx, y + h - 1), (x, cy)], fill=colour)


def _iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    iw = max(0.0, min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1]))
    inter = iw * ih
    return inter / (a[2] * a[3] + b[2] * b[3] - inter)


def _object_box(rng: np.random.Generator, spec: VariedSpec, kind: str, height: int, width: int) -> tuple:
    """(x, y, w, h) of one object of ``kind`` inside the image."""
    if spec.object_px is not None:
        longer = float(rng.uniform(*spec.object_px))
    else:
        longer = float(rng.uniform(*spec.object_share)) * min(height, width)
    aspect = float(rng.uniform(*_ASPECTS[kind]))
    if rng.random() < 0.5:
        aspect = 1 / aspect  # either way up
    w, h = (longer, longer / aspect) if aspect >= 1 else (longer * aspect, longer)
    w, h = max(3.0, min(w, width - 1.0)), max(3.0, min(h, height - 1.0))
    return float(rng.uniform(0, width - w)), float(rng.uniform(0, height - h)), w, h


def _contrasting(rng: np.random.Generator, image: Image.Image, box: tuple) -> tuple[int, int, int]:
    """A colour that stands out from the background under ``box`` (by luminance)."""
    x, y, w, h = (int(v) for v in box)
    patch = np.asarray(image.crop((x, y, x + max(1, w), y + max(1, h))), np.float32)
    mean = float(patch.mean()) if patch.size else 128.0
    base = rng.uniform(0, 60) if mean > 128 else rng.uniform(195, 255)
    return tuple(int(np.clip(base + rng.normal(0, 25), 0, 255)) for _ in range(3))


def _crowd(rng: np.random.Generator, draw: ImageDraw.ImageDraw, height: int, width: int) -> list[float]:
    """A cluster of small marks and its one crowd box (x, y, w, h)."""
    w, h = float(rng.uniform(0.2, 0.4) * width), float(rng.uniform(0.2, 0.4) * height)
    x, y = float(rng.uniform(0, width - w)), float(rng.uniform(0, height - h))
    colour = tuple(int(v) for v in rng.integers(0, 256, size=3))
    for _ in range(int(rng.integers(6, 15))):
        px, py = x + rng.uniform(0, w - 3), y + rng.uniform(0, h - 3)
        draw.ellipse([px, py, px + 3, py + 3], fill=colour)
    return [x, y, w, h]


def make_image(rng: np.random.Generator, spec: VariedSpec) -> tuple[bytes, str, list[dict], tuple[int, int]]:
    """One image: (encoded bytes, ``png``/``jpg``, objects ``{"kind", "bbox", "iscrowd"}``, (height, width))."""
    height, width = (int(rng.integers(spec.image_sides[0], spec.image_sides[1] + 1)) for _ in range(2))
    image = _background(rng, height, width)
    draw = ImageDraw.Draw(image)
    count = 0 if rng.random() < spec.negatives else int(rng.integers(max(1, spec.objects[0]), spec.objects[1] + 1))
    placed: list[tuple] = []
    objects: list[dict] = []
    for _ in range(count):
        kind = KINDS[int(rng.integers(spec.classes))]
        for _try in range(10):
            box = _object_box(rng, spec, kind, height, width)
            if all(_iou(box, p) <= spec.max_overlap for p in placed):
                break
        else:
            continue
        _draw_object(draw, kind, box, _contrasting(rng, image, box))
        placed.append(box)
        objects.append({"kind": kind, "bbox": [round(v, 2) for v in box], "iscrowd": 0})
    if rng.random() < spec.crowd:
        objects.append({"kind": KINDS[int(rng.integers(spec.classes))], "bbox": _crowd(rng, draw, height, width),
                        "iscrowd": 1})  # fmt: skip
    if rng.random() < 0.3:
        image = image.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.3, 0.9))))
    if rng.random() < spec.grayscale:
        image = image.convert("L")
    fmt = "jpg" if rng.random() < spec.jpeg else "png"
    out = io.BytesIO()
    image.save(out, format="JPEG" if fmt == "jpg" else "PNG", quality=int(rng.integers(75, 96)))
    return out.getvalue(), fmt, objects, (height, width)


def generate(folder: str | Path, spec: VariedSpec = ISSUE) -> Path:
    """Writes ``spec.count`` images and ``instances.json`` (COCO) under ``folder``; returns the JSON's path."""
    folder = Path(folder)
    (folder / "images").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(spec.seed)
    images, annotations = [], []
    for i in range(spec.count):
        data, fmt, objects, (height, width) = make_image(rng, spec)
        name = f"images/{i:05d}.{fmt}"
        (folder / name).write_bytes(data)
        images.append({"id": i + 1, "file_name": name, "width": width, "height": height})
        for obj in objects:
            x, y, w, h = obj["bbox"]
            annotations.append({"id": len(annotations) + 1, "image_id": i + 1,
                                "category_id": KINDS.index(obj["kind"]) + 1, "bbox": [x, y, w, h],
                                "area": round(w * h, 2), "iscrowd": obj["iscrowd"]})  # fmt: skip
    categories = [{"id": k + 1, "name": KINDS[k]} for k in range(spec.classes)]
    info = {"description": "varied COCO test set", **dataclasses.asdict(spec)}
    target = folder / "instances.json"
    target.write_text(json.dumps({"info": info, "images": images, "annotations": annotations,
                                  "categories": categories}))  # fmt: skip
    return target


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point: writes one set."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--count", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kind", choices=("issue", "wide"), default="issue")
    args = parser.parse_args(argv)
    spec = dataclasses.replace(ISSUE if args.kind == "issue" else WIDE, count=args.count, seed=args.seed)
    print(generate(args.out, spec))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
