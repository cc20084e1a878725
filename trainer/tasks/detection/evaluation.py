"""Detection's evaluation: COCO metrics with pycocotools (the reference implementation) on a split.

Computed through the exported ``serving_default``: what is served is what is scored.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from trainer.tasks.base import EvaluationResultBase, Metric, TaskError

METRICS: tuple[Metric, ...] = (
    Metric("ap", True, "COCO AP averaged over IoU 0.50:0.95", label="AP@[.5:.95]", table_label="AP"),
    Metric("ap50", True, "COCO AP at IoU 0.50", label="AP@0.5", table_label="mAP@0.5"),
    Metric("ap75", True, "COCO AP at IoU 0.75", label="AP@0.75"),
    Metric("ar100", True, "COCO recall with 100 detections per image", label="AR@100"),
)
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
        examples: a few scored test images for a person to look at: ``image`` (base64 of the
            encoded bytes), ``truth`` (``[box, label]`` pairs) and ``predicted`` (``[box, label,
            score]``, score >= 0.3), boxes normalised ``[ymin, xmin, ymax, xmax]``.
    """

    metrics: dict[str, float]
    class_names: list[str]
    per_class: list[dict[str, Any]]
    pr_curves: dict[str, list[float]]
    examples: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data."""
        return dataclasses.asdict(self)


def box_iou(a: Sequence[float], b: Sequence[float]) -> float:
    """IoU of two ``[ymin, xmin, ymax, xmax]`` boxes (any common unit)."""
    ih = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iw = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ih * iw
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def scored_examples(
    records: Sequence[Mapping[str, Any]], predictions: Sequence[Mapping[str, Any]], count: int = 8
) -> list[dict[str, Any]]:
    """The first ``count`` images that have objects, with true and predicted boxes (the HTML page's)."""
    import base64

    out = []
    for r, p in zip(records, predictions, strict=True):
        if not r["boxes"]:
            continue
        n = int(p["num_detections"])
        found = zip(p["detection_boxes"][:n], p["detection_classes"][:n], p["detection_scores"][:n], strict=True)
        out.append(
            {
                "image": base64.b64encode(r["encoded"]).decode("ascii"),
                "truth": [[list(b), int(label)] for b, label in zip(r["boxes"], r["labels"], strict=True)],
                "predicted": [[list(b), int(c) - 1, float(s)] for b, c, s in found if s >= MATCH_SCORE],
            }
        )
        if len(out) == count:
            break
    return out


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


def coco_evaluate(
    records: Sequence[Mapping[str, Any]], predictions: Sequence[Mapping[str, Any]], class_names: list[str]
) -> DetectionEvaluation:
    """COCO metrics (pycocotools) of served-format predictions against the records' true boxes.

    Boxes are compared in the original images' pixels; crowd boxes are passed as ``iscrowd``.

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
    return DetectionEvaluation(metrics=metrics, class_names=list(class_names), per_class=per_class, pr_curves=curves)
