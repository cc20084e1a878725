"""Predictions out to the labelling tools, for review: Label Studio tasks with pre-annotations, a
CVAT "COCO 1.0" archive, YOLO label files (with the confidence, as Ultralytics' ``save_conf``) and,
for the round trip of a VOC set, Pascal VOC annotations.

The input is a list of :class:`ReviewItem` (an image, its size, its predicted boxes in the
original image's pixels or its predicted class, the score a reviewer sorts by and why it was
picked); :func:`review_items_of_predictions` makes them from batch prediction's rows and
:func:`review_items_of_dataset` from a converted dataset's records (a labelled set out to a tool).
Read back by the source kinds (``yolo``, ``voc``, ``label-studio``, ``coco``), an export gives the
same boxes (docs/labels.md, the round trip). Every file is written atomically (a temporary name,
then a rename: :mod:`trainer.storage`). No TensorFlow.
"""

from __future__ import annotations

import io
import json
import posixpath
import xml.etree.ElementTree as ElementTree
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer import storage

# Label Studio names: the controls of the labeling config :func:`label_studio_config` writes.
LS_IMAGE, LS_BOXES, LS_CHOICES = "image", "label", "choice"
CVAT_ANNOTATIONS = "annotations/instances_default.json"


@dataclass(frozen=True)
class ReviewBox:
    """One predicted box, in pixels of the original image: top-left corner, width and height."""

    x: float
    y: float
    width: float
    height: float
    label: str
    score: float


@dataclass(frozen=True)
class ReviewItem:
    """One image for review.

    Attributes:
        image: the path or URI of the image as the pool lists it.
        width, height: the image's size in pixels (0 where unknown: classification).
        boxes: the predicted boxes (detection).
        label: the predicted class (classification), and its score ``label_score``.
        score: the task-level score reviewers sort by (an uncertainty, say).
        reason: why the image was picked (free text).
    """

    image: str
    width: int
    height: int
    boxes: tuple[ReviewBox, ...] = ()
    label: str | None = None
    label_score: float | None = None
    score: float | None = None
    reason: str = ""


def _check(items: Sequence[ReviewItem], classes: Sequence[str]) -> None:
    known = set(classes)
    for item in items:
        unknown = sorted({b.label for b in item.boxes} - known | ({item.label} - known if item.label else set()))
        if unknown:
            raise ValueError(f"{item.image}: labels {unknown} are not among the classes {list(classes)[:8]}")
        if item.boxes and (item.width <= 0 or item.height <= 0):
            raise ValueError(f"{item.image}: boxes need the image's size, got {item.width}x{item.height}")


def _write(path: str | Path, data: bytes) -> Path:
    target = str(path)
    if not storage.is_gcs(target):
        Path(target).parent.mkdir(parents=True, exist_ok=True)
    storage.write_bytes(target, data)
    return Path(target)


# ------------------------------------------------------------------------------------------------
# Label Studio
# ------------------------------------------------------------------------------------------------


def with_boxes(task: str) -> bool:
    """Whether a task's labels are boxes (its records hold boxes: detection), asked of the task.

    Raises:
        ValueError: no task has that name.
    """
    from trainer.tasks import task_types

    types = task_types()
    if task not in types:
        raise ValueError(f"task must be one of {sorted(types)}, got {task!r}")
    return types[task].records_boxes


def label_studio_config(classes: Sequence[str], task: str) -> str:
    """The labeling config the exported tasks fit: an image with RectangleLabels or Choices of the classes."""
    boxes = with_boxes(task)
    tag, child = ("RectangleLabels", "Label") if boxes else ("Choices", "Choice")
    name = LS_BOXES if boxes else LS_CHOICES
    values = "".join(f'\n    <{child} value="{_xml_attr(c)}"/>' for c in classes)
    return (
        f'<View>\n  <Image name="{LS_IMAGE}" value="${LS_IMAGE}"/>\n'
        f'  <{tag} name="{name}" toName="{LS_IMAGE}">{values}\n  </{tag}>\n</View>\n'
    )


def _xml_attr(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")


def _ls_results(item: ReviewItem, boxes: bool) -> list[dict[str, Any]]:
    if not boxes:
        if item.label is None:
            return []
        result = {"id": "c0", "type": "choices", "from_name": LS_CHOICES, "to_name": LS_IMAGE}
        result["value"] = {"choices": [item.label]}
        return [{**result, "score": item.label_score} if item.label_score is not None else result]
    w, h = item.width, item.height
    out = []
    for n, b in enumerate(item.boxes):
        value = {
            "x": 100.0 * b.x / w,
            "y": 100.0 * b.y / h,
            "width": 100.0 * b.width / w,
            "height": 100.0 * b.height / h,
            "rotation": 0,
            "rectanglelabels": [b.label],
        }
        out.append(
            {"id": f"r{n}", "type": "rectanglelabels", "from_name": LS_BOXES, "to_name": LS_IMAGE,
             "original_width": w, "original_height": h, "image_rotation": 0, "value": value, "score": b.score}
        )  # fmt: skip
    return out


def ls_image(image: str, local_root: str | None) -> str:
    """An image as Label Studio reads it: under ``local_root`` a local-storage URL, else as it is."""
    if local_root is None or storage.is_gcs(image):
        return image
    root = str(local_root).rstrip("/") + "/"
    if not image.startswith(root):
        return image
    from urllib.parse import quote

    return "/data/local-files/?d=" + quote(image[len(root) :])


def write_label_studio(
    items: Iterable[ReviewItem],
    path: str | Path,
    *,
    model_version: str,
    classes: Sequence[str],
    task: str,
    annotations: bool = False,
    local_root: str | None = None,
) -> Path:
    """Label Studio tasks (its JSON import) with the predictions as pre-annotations.

    Each task is ``{"data": {"image", "reason"?}, "predictions": [{"model_version", "score", "result"}]}``:
    boxes in percent of ``original_width``/``original_height`` (``rectanglelabels`` of the control
    ``label``) or the class (``choices`` of ``choice``), each with its score, and the task's
    ``score`` (Label Studio sorts by it). The project's labeling config is
    :func:`label_studio_config` (``<path>.xml`` is written beside it with it).

    Args:
        items: the images and their predictions.
        path: the ``.json`` file to write (local or gs://).
        model_version: the model that predicted (Label Studio shows it per prediction).
        classes: the class names; a prediction of another class is an error.
        task: ``detection`` or ``classification``.
        annotations: write the boxes as completed annotations instead (a labelled set out to Label
            Studio; what the round trip reads back).
        local_root: images under this folder are named by Label Studio's local-storage URL
            (``/data/local-files/?d=<path under it>``): set it to the document root Label Studio serves.

    Returns:
        The path written.
    """
    items = list(items)
    _check(items, classes)
    config = label_studio_config(classes, task)
    tasks = []
    for item in items:
        data: dict[str, Any] = {LS_IMAGE: ls_image(item.image, local_root)}
        if item.reason:
            data["reason"] = item.reason
        entry: dict[str, Any] = {"result": _ls_results(item, with_boxes(task))}
        if annotations:
            tasks.append({"data": data, "annotations": [{"was_cancelled": False, **entry}]})
            continue
        entry["model_version"] = model_version
        if item.score is not None:
            entry["score"] = item.score
        tasks.append({"data": data, "predictions": [entry]})
    _write(posixpath.splitext(str(path))[0] + ".xml", config.encode())
    return _write(path, json.dumps(tasks, indent=1).encode())


# ------------------------------------------------------------------------------------------------
# CVAT (COCO 1.0), YOLO, Pascal VOC
# ------------------------------------------------------------------------------------------------


def _file_names(items: Sequence[ReviewItem]) -> list[str]:
    """Each image's file name as a tool matches it: its base name, or its whole path where two share one."""
    names = [posixpath.basename(it.image) for it in items]
    return names if len(set(names)) == len(names) else [it.image for it in items]


def _stems(items: Sequence[ReviewItem], what: str) -> list[str]:
    """Each image's file name without its extension, which names its label file; two alike are an error."""
    stems = [posixpath.splitext(posixpath.basename(it.image))[0] for it in items]
    twice = sorted({s for s in stems if stems.count(s) > 1})
    if twice:
        raise ValueError(f"images {twice[:3]} share a file name: {what} are named by it; rename them")
    return stems


def coco_of(items: Sequence[ReviewItem], classes: Sequence[str]) -> dict[str, Any]:
    """The items as one COCO instances file: category ids 1..N in class order, ``bbox`` in pixels."""
    ids = {c: n for n, c in enumerate(classes, 1)}
    images, annotations = [], []
    for image_id, (item, name) in enumerate(zip(items, _file_names(items), strict=True), 1):
        images.append({"id": image_id, "file_name": name, "width": item.width, "height": item.height})
        for b in item.boxes:
            annotations.append(
                {"id": len(annotations) + 1, "image_id": image_id, "category_id": ids[b.label], "segmentation": [],
                 "area": b.width * b.height, "bbox": [b.x, b.y, b.width, b.height], "iscrowd": 0,
                 "score": b.score, "attributes": {"occluded": False}}
            )  # fmt: skip
    categories = [{"id": n, "name": c, "supercategory": ""} for c, n in ids.items()]
    info = {"description": "predictions for review (lean-tpu-pipelines)"}
    return {"info": info, "licenses": [], "categories": categories, "images": images, "annotations": annotations}


def write_cvat_coco(items: Iterable[ReviewItem], path: str | Path, *, classes: Sequence[str]) -> Path:
    """A CVAT "COCO 1.0" archive: a zip holding ``annotations/instances_default.json``, no images.

    Upload it to a CVAT task holding the images (Actions > Upload annotations > COCO 1.0): CVAT
    matches the images by file name (the base name; the whole path where two images share one).
    Each box keeps its ``score`` (CVAT shows it where the label has a ``score`` attribute). An image
    without boxes (a classification pick) is listed without annotations.

    Returns:
        The path written.
    """
    items = list(items)
    _check(items, classes)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(CVAT_ANNOTATIONS, json.dumps(coco_of(items, classes)))
    return _write(path, buffer.getvalue())


def _g(value: float) -> str:
    return f"{value:.6g}"


def write_yolo_labels(items: Iterable[ReviewItem], folder: str | Path, *, classes: Sequence[str]) -> Path:
    """One ``<image stem>.txt`` per image in ``folder``: ``class cx cy w h conf`` lines, fractions of
    the image, as Ultralytics' ``save_txt`` with ``save_conf`` writes them (an image without boxes
    gets an empty file). Our ``yolo`` kind reads them back, the confidence ignored.

    Returns:
        The folder.
    """
    items = list(items)
    _check(items, classes)
    index = {c: n for n, c in enumerate(classes)}
    for item, stem in zip(items, _stems(items, "YOLO label files"), strict=True):
        w, h = item.width, item.height
        lines = [
            " ".join([str(index[b.label])] + [_g(v) for v in ((b.x + b.width / 2) / w, (b.y + b.height / 2) / h,
                                                              b.width / w, b.height / h, b.score)])
            for b in item.boxes
        ]  # fmt: skip
        _write(storage.join(str(folder), f"{stem}.txt"), "".join(f"{line}\n" for line in lines).encode())
    return Path(str(folder))


def voc_xml(item: ReviewItem, file_name: str) -> str:
    """One Pascal VOC annotation: 1-based inclusive integer pixels, as VOC's tools write them."""
    root = ElementTree.Element("annotation")
    ElementTree.SubElement(root, "folder").text = "JPEGImages"
    ElementTree.SubElement(root, "filename").text = file_name
    size = ElementTree.SubElement(root, "size")
    for tag, value in (("width", item.width), ("height", item.height), ("depth", 3)):
        ElementTree.SubElement(size, tag).text = str(value)
    for b in item.boxes:
        obj = ElementTree.SubElement(root, "object")
        for tag, value in (("name", b.label), ("pose", "Unspecified"), ("truncated", "0"), ("difficult", "0")):
            ElementTree.SubElement(obj, tag).text = value
        box = ElementTree.SubElement(obj, "bndbox")
        corners = (b.x + 1, b.y + 1, b.x + b.width, b.y + b.height)  # pixel edges -> 1-based inclusive
        for tag, value in zip(("xmin", "ymin", "xmax", "ymax"), corners, strict=True):
            ElementTree.SubElement(box, tag).text = str(round(value))
    ElementTree.indent(root)
    return ElementTree.tostring(root, encoding="unicode") + "\n"


def write_voc(items: Iterable[ReviewItem], folder: str | Path, *, classes: Sequence[str]) -> Path:
    """``Annotations/<image stem>.xml`` per image under ``folder`` (a VOC root: the images go in its
    ``JPEGImages/``; ``ImageSets/Main/<split>.txt`` is left to the caller).

    Returns:
        The folder.
    """
    items = list(items)
    _check(items, classes)
    for item, stem in zip(items, _stems(items, "VOC annotations"), strict=True):
        xml = voc_xml(item, posixpath.basename(item.image))
        _write(storage.join(str(folder), "Annotations", f"{stem}.xml"), xml.encode())
    return Path(str(folder))


# ------------------------------------------------------------------------------------------------
# Review items from batch prediction's rows and from a converted dataset
# ------------------------------------------------------------------------------------------------


def review_item_of_prediction(row: Mapping[str, Any], image: str | None = None) -> ReviewItem:
    """A batch prediction row (``predictions/*.jsonl``) as a review item.

    Detection rows (``detections``: ``box`` ``[xmin, ymin, xmax, ymax]`` pixels, ``class``, ``score``;
    ``width``, ``height``) give boxes; classification rows (``classes``, best first) the top class.
    The task score is the row's ``score`` where it has one.
    """
    where = image or str(row["path"])
    score = row.get("score")
    if "detections" in row:
        boxes = tuple(
            ReviewBox(x0, y0, x1 - x0, y1 - y0, str(d["class"]), float(d["score"]))
            for d in row["detections"]
            for x0, y0, x1, y1 in [d["box"]]
        )
        return ReviewItem(where, int(row["width"]), int(row["height"]), boxes, score=score)
    top = (row.get("classes") or [None])[0]
    label, label_score = (None, None) if top is None else (str(top["class"]), float(top["score"]))
    size = int(row.get("width") or 0), int(row.get("height") or 0)
    return ReviewItem(where, *size, label=label, label_score=label_score, score=score)


def review_items_of_predictions(rows: Iterable[Mapping[str, Any]], root: str | None = None) -> list[ReviewItem]:
    """Batch prediction rows as review items; ``root`` joined to their relative ``path`` where given."""
    return [
        review_item_of_prediction(r, storage.join(root, str(r["path"])) if root else None)
        for r in rows
        if "detections" in r or "classes" in r
    ]


def review_items_of_dataset(dataset: str, split: str, root: str | None = None) -> list[ReviewItem]:
    """A converted dataset's records as review items (their labels, score 1): a labelled set out to a tool.

    Args:
        dataset: the dataset folder.
        split: the split to read.
        root: joined to each record's ``source_key`` (the image's name in its source) where given.
    """
    from trainer.tfrecord_read import iter_split_features
    from trainer.tfrecords import load_dataset_info

    info = load_dataset_info(dataset)
    out = []
    for f in iter_split_features(info, split):
        key = f["image/source_key"][0].decode("utf-8")
        w, h = int(f["image/width"][0]), int(f["image/height"][0])
        corners = zip(*(f.get(f"image/object/bbox/{k}", []) for k in ("xmin", "ymin", "xmax", "ymax")), strict=True)
        texts = f.get("image/object/class/text", [])
        boxes = tuple(
            ReviewBox(x0 * w, y0 * h, (x1 - x0) * w, (y1 - y0) * h, t.decode("utf-8"), 1.0)
            for (x0, y0, x1, y1), t in zip(corners, texts, strict=True)
        )
        text = (f.get("image/class/text") or [b""])[0].decode("utf-8") or None
        image = storage.join(root, key) if root else key
        out.append(ReviewItem(image, w, h, boxes, label=text, label_score=1.0 if text else None))
    return out
