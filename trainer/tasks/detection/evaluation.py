"""Detection's evaluation: COCO metrics with pycocotools (the reference implementation) on a split.

Computed through the exported ``serving_default``: what is served is what is scored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from trainer import slices as slicing
from trainer.slices import SliceRow
from trainer.tasks.base import EvaluationResultBase, Metric, TaskError

METRICS: tuple[Metric, ...] = (
    Metric("ap", True, "COCO AP averaged over IoU 0.50:0.95", label="AP@[.5:.95]", table_label="AP"),
    Metric("ap50", True, "COCO AP at IoU 0.50", label="AP@0.5", table_label="mAP@0.5"),
    Metric("ap75", True, "COCO AP at IoU 0.75", label="AP@0.75"),
    Metric("ar100", True, "COCO recall with 100 detections per image", label="AR@100"),
)
# A training's figures (``TrainingSummary.metrics``), validation first.
TRAINING_METRICS: tuple[Metric, ...] = (
    Metric("val_box_loss", False, "box regression loss, validation split, last epoch", label="validation box loss"),
    Metric("val_class_loss", False, "focal class loss, validation split, last epoch", label="validation class loss"),
    Metric("train_box_loss", False, "box regression loss, training batches, last epoch", label="training box loss"),
    Metric("train_class_loss", False, "focal class loss, training batches, last epoch", label="training class loss"),
)
# The metrics each slice is scored by (trainer/slices.py); the first orders the slice table.
SLICE_METRICS: tuple[str, ...] = ("ap", "ap50")
# COCO's object areas in pixels² (pycocotools' areaRng): index 1, 2, 3 of its precision array.
AREAS: tuple[tuple[str, float, float], ...] = (
    ("small", 0.0, 32.0**2),
    ("medium", 32.0**2, 96.0**2),
    ("large", 96.0**2, 1e10),
)
# The detections an example image shows and is scored by (per-image F1): per-class NMS keeps a
# weak second class on the same object, which clutters a picture (the COCO metrics use them all).
EXAMPLE_SCORE = 0.5
# A served detection of a known example counts when it overlaps the true box this much, with
# at least this score, and a negative image (no objects) must have no detection above it.
MATCH_IOU = 0.5
MATCH_SCORE = 0.3


@dataclasses.dataclass(frozen=True)
class DetectionEvaluation(EvaluationResultBase):
    """What a detection evaluation produces.

    Attributes:
        metrics: ``ap``, ``ap50``, ``ap75``, ``ar100`` and ``num_examples``.
        class_names: class names, index = label.
        per_class: one dict per class: ``name``, ``ap``, ``ap50``, ``instances``.
        pr_curves: per class, precision at the 101 COCO recall points at IoU 0.5 (-1: undefined).
        examples: the worst and the best detected test images for a person to look at, worst
            first (:func:`scored_examples`): ``image`` (base64 of the encoded bytes), ``truth``
            (``[box, label]`` pairs, crowd boxes left out), ``predicted`` (``[box, label, score]``,
            score >= ``EXAMPLE_SCORE``), boxes normalised ``[ymin, xmin, ymax, xmax]``, and the
            image's quality: ``matched``, ``missed``, ``false`` and ``f1`` (:func:`image_quality`).
        slices: the slice table (``trainer.slices``), worst AP first: per class and per COCO
            object area from the evaluation's COCOeval run, per extra column value and image-size
            bucket from a COCOeval run on the slice's images.
    """

    metrics: dict[str, float]
    class_names: list[str]
    per_class: list[dict[str, Any]]
    pr_curves: dict[str, list[float]]
    examples: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    slices: list[SliceRow] = dataclasses.field(default_factory=list)


def box_iou(a: Sequence[float], b: Sequence[float]) -> float:
    """IoU of two ``[ymin, xmin, ymax, xmax]`` boxes (any common unit)."""
    ih = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iw = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ih * iw
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def image_quality(
    truth: Sequence[tuple[Sequence[float], int]], found: Sequence[tuple[Sequence[float], int, float]]
) -> dict[str, Any]:
    """How well one image was detected: true boxes matched one to one (same class, IoU >= ``MATCH_IOU``).

    Detections are matched greedily, highest score first, each to the unmatched true box of its
    class it overlaps most.

    Args:
        truth: the image's ``(box, label)`` pairs (crowd boxes left out).
        found: its ``(box, label, score)`` detections at or above the score that counts.

    Returns:
        ``matched`` (true positives), ``missed`` (false negatives), ``false`` (false positives)
        and ``f1`` (``2 TP / (2 TP + FP + FN)``; None for an image with neither boxes nor detections).
    """
    free = list(range(len(truth)))
    matched = 0
    for box, label, _score in sorted(found, key=lambda d: -d[2]):
        overlaps = [(box_iou(box, truth[i][0]), i) for i in free if truth[i][1] == label]
        best = max(overlaps, default=(0.0, -1))
        if best[0] >= MATCH_IOU:
            free.remove(best[1])
            matched += 1
    missed, false = len(truth) - matched, len(found) - matched
    scored = 2 * matched + missed + false
    return {"matched": matched, "missed": missed, "false": false, "f1": 2 * matched / scored if scored else None}


def _truth_of(record: Mapping[str, Any]) -> list[tuple[list[float], int]]:
    """A record's non-crowd ``(box, label)`` pairs."""
    pairs = zip(record["boxes"], record["labels"], record["crowd"], strict=True)
    return [(list(b), int(label)) for b, label, crowd in pairs if not crowd]


def _found_of(prediction: Mapping[str, Any]) -> list[tuple[list[float], int, float]]:
    """A served prediction's ``(box, label, score)`` detections at or above ``EXAMPLE_SCORE`` (labels from 0)."""
    n = int(prediction["num_detections"])
    found = zip(
        prediction["detection_boxes"][:n], prediction["detection_classes"][:n], prediction["detection_scores"][:n],
        strict=True,
    )  # fmt: skip
    return [(list(b), int(c) - 1, float(s)) for b, c, s in found if s >= EXAMPLE_SCORE]


def _example(record: Mapping[str, Any], prediction: Mapping[str, Any]) -> dict[str, Any]:
    """One scored image: its bytes, true boxes, the detections that count, and its quality."""
    import base64

    truth, found = _truth_of(record), _found_of(prediction)
    return {
        "image": base64.b64encode(record["encoded"]).decode("ascii"),
        "truth": [list(t) for t in truth],
        "predicted": [list(f) for f in found],
        **image_quality(truth, found),
    }


def scored_examples(
    records: Sequence[Mapping[str, Any]], predictions: Sequence[Mapping[str, Any]], count: int = 8
) -> list[dict[str, Any]]:
    """The ``count`` worst and ``count`` best detected images of a split, worst first (a person's look).

    Every image is scored by :func:`image_quality` from the predictions the evaluation made (the
    model runs once); images with neither boxes nor detections say nothing and are left out. The
    worst are the lowest F1 (more true boxes first among equals), the best the highest among the
    rest; a split of fewer than ``2 * count`` such images gives them all.
    """
    quality = [
        (i, image_quality(_truth_of(r), _found_of(p)))
        for i, (r, p) in enumerate(zip(records, predictions, strict=True))
    ]
    ranked = sorted(
        ((i, q) for i, q in quality if q["f1"] is not None),
        key=lambda item: (item[1]["f1"], -(item[1]["matched"] + item[1]["missed"]), item[0]),
    )
    chosen = ranked if len(ranked) <= 2 * count else ranked[:count] + ranked[-count:]
    return [_example(records[i], predictions[i]) for i, _ in chosen]


def _ground_truth(records: Sequence[Mapping[str, Any]], class_names: list[str]) -> tuple[dict[str, Any], list[int]]:
    """The records' boxes as a COCO ground-truth dataset (original pixels), and non-crowd instances per class."""
    gt: dict[str, Any] = {
        "images": [{"id": i, "height": r["height"], "width": r["width"]} for i, r in enumerate(records)],
        "categories": [{"id": c, "name": name} for c, name in enumerate(class_names)],
        "annotations": [],
    }
    instances = [0] * len(class_names)
    for i, r in enumerate(records):
        h, w = r["height"], r["width"]
        for (y1, x1, y2, x2), label, crowd in zip(r["boxes"], r["labels"], r["crowd"], strict=True):
            bw, bh = (x2 - x1) * w, (y2 - y1) * h
            gt["annotations"].append(
                {"id": len(gt["annotations"]) + 1, "image_id": i, "category_id": int(label), "iscrowd": int(crowd),
                 "bbox": [x1 * w, y1 * h, bw, bh], "area": bw * bh}
            )  # fmt: skip
            instances[int(label)] += 0 if crowd else 1
    return gt, instances


def _detections(records: Sequence[Mapping[str, Any]], predictions: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Served-format predictions as COCO results in the original images' pixels."""
    dets = []
    for i, (r, p) in enumerate(zip(records, predictions, strict=True)):
        h, w = r["height"], r["width"]
        n = int(p["num_detections"])
        for (y1, x1, y2, x2), score, cls in zip(
            p["detection_boxes"][:n], p["detection_scores"][:n], p["detection_classes"][:n], strict=True
        ):
            dets.append(
                {"image_id": i, "category_id": int(cls) - 1, "score": float(score),
                 "bbox": [x1 * w, y1 * h, (x2 - x1) * w, (y2 - y1) * h]}
            )  # fmt: skip
    return dets


def _run_cocoeval(gt: dict[str, Any], dets: list[dict]) -> tuple[Any, Any]:
    """Pycocotools' summary stats (undefined -1 counted as 0) and its precision array (None: no detections)."""
    import contextlib
    import io

    import numpy as np
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
        coco_gt = COCO()
        coco_gt.dataset = gt
        coco_gt.createIndex()
        if not dets:
            return np.zeros(12), None
        evaluator = COCOeval(coco_gt, coco_gt.loadRes(dets), "bbox")
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return np.maximum(evaluator.stats, 0.0), evaluator.eval["precision"]  # precision: [T, R, K, A, M]


def _per_class(
    precision: Any, class_names: list[str], instances: list[int]
) -> tuple[list[dict[str, Any]], dict[str, list[float]]]:
    """AP, AP@0.5 and instances per class, and each class's precision at the 101 recall points at IoU 0.5."""
    per_class, curves = [], {}
    for k, name in enumerate(class_names):
        if precision is None:
            ap, ap50, curve = 0.0, 0.0, [0.0] * 101
        else:
            p_all = precision[:, :, k, 0, -1]
            ap = float(p_all[p_all > -1].mean()) if (p_all > -1).any() else 0.0
            p50 = precision[0, :, k, 0, -1]
            ap50 = float(p50[p50 > -1].mean()) if (p50 > -1).any() else 0.0
            curve = [float(v) for v in p50]
        per_class.append({"name": name, "ap": ap, "ap50": ap50, "instances": instances[k]})
        curves[name] = curve
    return per_class, curves


def _mean_defined(values: Any) -> float:
    """The mean of pycocotools' precision entries that are defined (> -1); 0 when none is."""
    defined = values[values > -1]
    return float(defined.mean()) if defined.size else 0.0


def _area_slices(precision: Any, gt: Mapping[str, Any], min_size: int) -> list[SliceRow]:
    """AP and AP@0.5 per COCO object area (small, medium, large) from one COCOeval run's precision."""
    rows = []
    boxes = [a["area"] for a in gt["annotations"] if not a["iscrowd"]]
    for index, (name, low, high) in enumerate(AREAS, start=1):
        count = sum(1 for area in boxes if low <= area < high)
        metrics = {"ap": 0.0, "ap50": 0.0}
        if precision is not None:
            metrics = {
                "ap": _mean_defined(precision[:, :, :, index, -1]),
                "ap50": _mean_defined(precision[0, :, :, index, -1]),
            }
        rows.append(slicing.row(slicing.slice_key("area", name), count, metrics, min_size))
    return rows


def coco_evaluate(
    records: Sequence[Mapping[str, Any]],
    predictions: Sequence[Mapping[str, Any]],
    class_names: list[str],
    min_slice_size: int = slicing.MIN_SLICE_SIZE,
) -> DetectionEvaluation:
    """COCO metrics (pycocotools) of served-format predictions against the records' true boxes.

    Boxes are compared in the original images' pixels; crowd boxes are passed as ``iscrowd``.
    The result's slices are those of the same COCOeval run: per class and per object area.

    Raises:
        TaskError: no records, or a prediction count that differs from the record count.
    """
    if not records:
        raise TaskError("no examples to evaluate: the split is empty")
    if len(records) != len(predictions):
        raise TaskError(f"{len(predictions)} predictions for {len(records)} images")
    gt, instances = _ground_truth(records, class_names)
    stats, precision = _run_cocoeval(gt, _detections(records, predictions))
    per_class, curves = _per_class(precision, class_names, instances)
    metrics = {
        "ap": float(stats[0]),
        "ap50": float(stats[1]),
        "ap75": float(stats[2]),
        "ar100": float(stats[8]),
        "num_examples": float(len(records)),
    }
    by_class = [
        slicing.row(
            slicing.slice_key("class", c["name"]), c["instances"], {"ap": c["ap"], "ap50": c["ap50"]}, min_slice_size
        )
        for c in per_class
    ]
    return DetectionEvaluation(
        metrics=metrics,
        class_names=list(class_names),
        per_class=per_class,
        pr_curves=curves,
        slices=by_class + _area_slices(precision, gt, min_slice_size),
    )


def slice_table(
    records: Sequence[Mapping[str, Any]],
    predictions: Sequence[Mapping[str, Any]],
    class_names: list[str],
    keys: Sequence[Sequence[str]],
    whole: DetectionEvaluation,
    min_size: int = slicing.MIN_SLICE_SIZE,
) -> list[SliceRow]:
    """The whole slice table: the evaluation's class and area slices, and per records' slice
    (extra column value, size bucket) the AP of a COCOeval run on that slice's images, worst first.
    """

    def score(indices: Sequence[int]) -> dict[str, float]:
        part = coco_evaluate([records[i] for i in indices], [predictions[i] for i in indices], class_names)
        return {"ap": part.metrics["ap"], "ap50": part.metrics["ap50"]}

    rows = slicing.score_slices(slicing.group(keys), score, min_size) + list(whole.slices)
    return slicing.worst_first(rows, (("ap", True), ("ap50", True)))
