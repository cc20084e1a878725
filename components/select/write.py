"""What a selection writes under its output: the picked images, the exports a labelling tool opens
(``components/image_input/exports.py``), the report, and ``selection.json`` last.

Every file goes through storage (an output under ``gs://`` gets the same files).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Sequence

from components.select.result import Pick, SelectionResult
from components.select.run import (
    CVAT,
    IMAGES,
    LABEL_STUDIO,
    LABEL_STUDIO_CONFIG,
    REPORT_HTML,
    SELECTION,
    YOLO,
    SelectError,
)
from trainer import storage

# What the files map of selection.json names, name -> file or folder under the output.
FILES = {
    "label_studio": LABEL_STUDIO,
    "label_studio_config": LABEL_STUDIO_CONFIG,
    "cvat": CVAT,
    "yolo": YOLO,
    "images": IMAGES,
    "report": REPORT_HTML,
}


def check_writable(output_uri: str) -> None:
    """Writes and deletes a probe file under ``output_uri``.

    Raises:
        SelectError: it cannot be written (the message says why).
    """
    probe = storage.join(output_uri, f".write-probe-{time.time_ns()}")
    try:
        storage.write_bytes(probe, b"")
        storage.delete(probe)
    except Exception as err:  # noqa: BLE001 (any storage error means the same to the user)
        raise SelectError(
            f"cannot write under {output_uri} ({type(err).__name__}: {err}); give an output_uri this step can write"
        ) from None


def review_items(output_uri: str, picks: Sequence[Pick]) -> list:
    """The picks as the exports' ``ReviewItem``: each image where it was written under the output,
    boxes as ``x, y, width, height`` pixels.
    """
    from components.image_input.exports import ReviewBox, ReviewItem

    items = []
    for pick in picks:
        boxes = tuple(
            ReviewBox(x=b["box"][0], y=b["box"][1], width=b["box"][2] - b["box"][0], height=b["box"][3] - b["box"][1],
                      label=b["class"], score=b["score"])
            for b in pick.boxes
        )  # fmt: skip
        items.append(
            ReviewItem(
                image=local_path(output_uri, pick.image), width=pick.width, height=pick.height, boxes=boxes,
                label=pick.label, label_score=pick.label_score, score=pick.score, reason=pick.reason,
            )
        )  # fmt: skip
    return items


def write_exports(output_uri: str, result: SelectionResult) -> None:
    """Label Studio tasks (and their labeling config beside them), the CVAT COCO 1.0 archive and the
    YOLO label files of the picks. Label Studio names the images by its local-storage URL under the
    output (serve the output as its document root), or by their ``gs://`` URI.
    """
    from components.image_input.exports import write_cvat_coco, write_label_studio, write_yolo_labels

    items = review_items(output_uri, result.picks)
    classes = list(result.class_names)
    root = local_path(output_uri, "")
    write_label_studio(
        items, local_path(output_uri, LABEL_STUDIO), model_version=result.model.label, classes=classes,
        task=result.model.task, local_root=None if storage.is_gcs(root) else root,
    )  # fmt: skip
    write_cvat_coco(items, local_path(output_uri, CVAT), classes=classes)
    write_yolo_labels(items, local_path(output_uri, YOLO), classes=classes)


def write_selection(
    output_uri: str, result: SelectionResult, images: Sequence[bytes], *, seconds: float
) -> SelectionResult:
    """Writes the picked images, the exports, the report, then ``selection.json``; returns the result
    with its wall time.
    """
    from components.select.page import write_reports

    for folder in (IMAGES, YOLO):  # an earlier selection's picks there would mix with these
        storage.delete_tree(storage.join(output_uri, folder))
    for pick, data in zip(result.picks, images, strict=True):
        storage.write_bytes(storage.join(output_uri, *pick.image.split("/")), data)
    write_exports(output_uri, result)
    done = dataclasses.replace(result, seconds=round(seconds, 3))
    write_reports(output_uri, done, images)
    storage.write_json(storage.join(output_uri, SELECTION), done.to_dict())
    return done


def local_path(output_uri: str, name: str) -> str:
    """A file of the output as a path to show (local outputs: absolute)."""
    path = storage.join(output_uri, name) if name else output_uri
    return path if storage.is_gcs(path) else os.path.abspath(path)
