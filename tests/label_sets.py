"""Detection sets written in the labelling tools' documented layouts, from one original (shared by the
label-source tests, their benchmark and a hand check with ``make run``).

An :class:`Original` is images of varied sizes and their boxes as integer pixel edges
(``x, y, width, height``), so that every layout describes exactly the same boxes: COCO (``bbox``
in pixels), Ultralytics YOLO (``class cx cy w h`` fractions, ``data.yaml``), Pascal VOC
(``xmin ymin xmax ymax`` 1-based inclusive: ``xmin = x + 1``, ``xmax = x + width``) and Label
Studio's JSON export (percent of ``original_width``/``original_height``).
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

SIZES = ((24, 16), (64, 48), (100, 100), (333, 250), (640, 480), (480, 640), (1280, 720), (977, 1203))


@dataclass(frozen=True)
class Original:
    """A detection set: classes, images (name, width, height, split) and per image its boxes
    ``(class index, x, y, w, h)`` in pixels.
    """

    classes: tuple[str, ...]
    images: tuple[tuple[str, int, int, str], ...]
    boxes: dict[str, tuple[tuple[int, float, float, float, float], ...]]


def original(
    images: int = 12, boxes: int = 4, seed: int = 0, classes=("cat", "dog", "bird"), integer: bool = True
) -> Original:
    """Random boxes (2 px or more a side) wholly inside images of :data:`SIZES`; integer pixel edges
    unless ``integer`` is False.
    """
    rng = np.random.default_rng(seed)
    listed, by_image = [], {}
    for n in range(images):
        w, h = SIZES[n % len(SIZES)]
        name = f"im{n:04d}.png"
        listed.append((name, w, h, "val" if n % 4 == 3 else "train"))
        found = []
        for _ in range(int(rng.integers(0, boxes * 2 + 1)) if boxes else 0):
            bw, bh = rng.uniform(2, w), rng.uniform(2, h)
            x, y = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
            if integer:
                x, y = int(x), int(y)
                bw, bh = max(2, min(int(bw), w - x)), max(2, min(int(bh), h - y))  # VOC: xmax > xmin
            found.append((int(rng.integers(len(classes))), x, y, bw, bh))
        by_image[name] = tuple(found)
    return Original(tuple(classes), tuple(listed), by_image)


def png(width: int, height: int, shade: int) -> bytes:
    buf = io.BytesIO()
    Image.new("L", (width, height), shade).save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def write_images(folder: Path, orig: Original, by_split: bool = False) -> None:
    """The images as PNGs in ``folder`` (``folder/<split>/`` with ``by_split``)."""
    for n, (name, w, h, split) in enumerate(orig.images):
        target = folder / split if by_split else folder
        target.mkdir(parents=True, exist_ok=True)
        (target / name).write_bytes(png(w, h, (n * 37) % 256))


def coco(folder: Path, orig: Original, images: bool = True) -> Path:
    """``folder/instances.json`` with the images beside it."""
    if images:
        write_images(folder, orig)
    annotations = []
    for n, (name, *_) in enumerate(orig.images, 1):
        for c, x, y, bw, bh in orig.boxes[name]:
            annotations.append(
                {"id": len(annotations) + 1, "image_id": n, "category_id": c + 1, "bbox": [x, y, bw, bh], "iscrowd": 0}
            )
    data = {
        "images": [
            {"id": n, "file_name": name, "width": w, "height": h} for n, (name, w, h, _) in enumerate(orig.images, 1)
        ],
        "annotations": annotations,
        "categories": [{"id": n, "name": c} for n, c in enumerate(orig.classes, 1)],
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "instances.json").write_text(json.dumps(data))
    return folder / "instances.json"


def yolo_lines(orig: Original, name: str, w: int, h: int) -> str:
    return "".join(
        f"{c} {(x + bw / 2) / w!r} {(y + bh / 2) / h!r} {bw / w!r} {bh / h!r}\n" for c, x, y, bw, bh in orig.boxes[name]
    )


def yolo(root: Path, orig: Original, names_as_mapping: bool = False) -> Path:
    """Ultralytics' layout: ``images/<split>/``, ``labels/<split>/<stem>.txt``, ``data.yaml``."""
    write_images(root / "images", orig, by_split=True)
    for name, w, h, split in orig.images:
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        if orig.boxes[name] or int(name[2:6]) % 2:  # some images without objects have no label file at all
            (root / "labels" / split / f"{name[:-4]}.txt").write_text(yolo_lines(orig, name, w, h))
    names = {n: c for n, c in enumerate(orig.classes)} if names_as_mapping else list(orig.classes)
    splits = sorted({s for *_, s in orig.images})
    text = f"path: {root}\n" + "".join(f"{s}: images/{s}\n" for s in splits) + f"names: {json.dumps(names)}\n"
    (root / "data.yaml").write_text(text)
    return root / "data.yaml"


def voc_xml(orig: Original, name: str, w: int, h: int) -> str:
    objects = "".join(
        f"<object><name>{orig.classes[c]}</name><pose>Unspecified</pose><truncated>0</truncated>"
        f"<difficult>0</difficult><bndbox><xmin>{x + 1:g}</xmin><ymin>{y + 1:g}</ymin>"
        f"<xmax>{x + bw:g}</xmax><ymax>{y + bh:g}</ymax></bndbox></object>"
        for c, x, y, bw, bh in orig.boxes[name]
    )
    return (
        f"<annotation><folder>VOC</folder><filename>{name}</filename><size><width>{w}</width>"
        f"<height>{h}</height><depth>1</depth></size><segmented>0</segmented>{objects}</annotation>"
    )


def voc(root: Path, orig: Original, image_sets: bool = True) -> Path:
    """VOC's layout: ``Annotations/<id>.xml``, ``JPEGImages/``, ``ImageSets/Main/<split>.txt``."""
    write_images(root / "JPEGImages", orig)
    (root / "Annotations").mkdir(parents=True, exist_ok=True)
    for name, w, h, _ in orig.images:
        (root / "Annotations" / f"{name[:-4]}.xml").write_text(voc_xml(orig, name, w, h))
    if image_sets:
        (root / "ImageSets" / "Main").mkdir(parents=True, exist_ok=True)
        for split in sorted({s for *_, s in orig.images}):
            ids = [name[:-4] for name, *_, s in orig.images if s == split]
            (root / "ImageSets" / "Main" / f"{split}.txt").write_text("".join(f"{i}\n" for i in ids))
    return root


def ls_result(orig: Original, c: int, box: tuple, w: int, h: int, n: int) -> dict:
    x, y, bw, bh = box
    return {
        "id": f"r{n}",
        "type": "rectanglelabels",
        "from_name": "label",
        "to_name": "image",
        "original_width": w,
        "original_height": h,
        "image_rotation": 0,
        "value": {
            "x": 100.0 * x / w,
            "y": 100.0 * y / h,
            "width": 100.0 * bw / w,
            "height": 100.0 * bh / h,
            "rotation": 0,
            "rectanglelabels": [orig.classes[c]],
        },
    }


def label_studio(folder: Path, orig: Original, local_files: bool = True, config: bool = True) -> Path:
    """Label Studio's JSON export (``folder/export.json``) with the images in ``folder/images/``,
    named by local-storage URLs (or relative paths), and the project's labeling config beside it.
    """
    write_images(folder / "images", orig)
    tasks = []
    for n, (name, w, h, _) in enumerate(orig.images, 1):
        ref = f"/data/local-files/?d=images/{name}" if local_files else f"images/{name}"
        result = [ls_result(orig, c, (x, y, bw, bh), w, h, k) for k, (c, x, y, bw, bh) in enumerate(orig.boxes[name])]
        annotation = {"id": n, "completed_by": 1, "was_cancelled": False, "ground_truth": False, "result": result}
        tasks.append({"id": n, "data": {"image": ref}, "annotations": [annotation], "predictions": []})
    (folder / "export.json").write_text(json.dumps(tasks))
    if config:
        labels = "".join(f'<Label value="{c}"/>' for c in orig.classes)
        (folder / "label_config.xml").write_text(
            f'<View><Image name="image" value="$image"/><RectangleLabels name="label" toName="image">'
            f"{labels}</RectangleLabels></View>"
        )
    return folder / "export.json"


def link(target: Path, link_path: Path) -> None:
    """A symbolic link (an export beside the images it names, without copying them)."""
    link_path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, link_path)
