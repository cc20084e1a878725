"""Detection's uncertainty strategies (the task's selection facet, :class:`DetectionSelection`).

Two signals, each a score in [0, 1] per image, higher for an image the detector is less sure of:

- **near the threshold** (``threshold``): the box whose score is closest to the score at which a
  box is taken for an object (``selection_options.threshold``, 0.5): ``1 - |score - t| / max(t, 1 - t)``
  of that box, 0 for an image without boxes. A box at 0.48 is a coin toss; one at 0.95 or 0.06 is not.
- **disagreement under a flip** (``flip``): the image is scored again mirrored left to right, its
  boxes flipped back (``x -> width - x``) and matched to the first boxes greedily by IoU, class
  for class (a pair overlapping by at least ``match_iou``); the agreement is the matched pairs' IoU
  summed over every box of either side (``sum IoU / (boxes + flipped boxes - pairs)``: an unmatched
  box counts 0), the disagreement one less it (two empty sides agree). Boxes scoring at least half
  the threshold take part.

``uncertainty``, the default, is their mean. Pure NumPy on box arrays ``[n, 4]`` (``xmin, ymin,
xmax, ymax`` in pixels): :func:`near_threshold`, :func:`box_iou`, :func:`mirror`, :func:`flip_agreement`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np

from trainer.tasks.selection import Proposal, ProposedBox, Selection, Uncertainty

STRATEGIES = ("uncertainty", "threshold", "flip")
_FLIPPED = frozenset({"uncertainty", "flip"})


def near_threshold(scores: np.ndarray, threshold: float) -> tuple[float, int]:
    """``(closeness, index)`` of the box whose score is nearest ``threshold``; ``(0.0, -1)`` without boxes."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.size == 0:
        return 0.0, -1
    closeness = 1.0 - np.abs(scores - threshold) / max(threshold, 1.0 - threshold)
    index = int(np.argmax(closeness))
    return float(np.clip(closeness[index], 0.0, 1.0)), index


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``[len(a), len(b)]`` IoU of ``xmin, ymin, xmax, ymax`` boxes."""
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    low = np.maximum(a[:, None, :2], b[None, :, :2])
    high = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(high - low, 0.0, None), axis=-1)
    area_a = np.prod(np.clip(a[:, 2:] - a[:, :2], 0.0, None), axis=-1)
    area_b = np.prod(np.clip(b[:, 2:] - b[:, :2], 0.0, None), axis=-1)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def mirror(boxes: np.ndarray, width: float) -> np.ndarray:
    """Boxes of an image mirrored left to right, in the unmirrored image's frame (and back)."""
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    return np.stack([width - boxes[:, 2], boxes[:, 1], width - boxes[:, 0], boxes[:, 3]], axis=-1)


def flip_agreement(
    boxes: np.ndarray, labels: Sequence[Any], other: np.ndarray, other_labels: Sequence[Any], match_iou: float
) -> tuple[float, int, list[float]]:
    """``(agreement, pairs, their IoUs)`` of two sets of boxes of one image (module docstring).

    Pairs are matched greedily, the highest IoU first, a box at most once, only within a class and
    at ``match_iou`` or more. Two empty sets agree fully.
    """
    n, m = len(labels), len(other_labels)
    if n == 0 and m == 0:
        return 1.0, 0, []
    iou = box_iou(boxes, other)
    same = np.asarray(labels, dtype=object)[:, None] == np.asarray(other_labels, dtype=object)[None, :]
    iou = np.where(same, iou, -1.0)
    matched: list[float] = []
    while iou.size and iou.max() >= match_iou:
        i, j = np.unravel_index(int(np.argmax(iou)), iou.shape)
        matched.append(float(iou[i, j]))
        iou[i, :], iou[:, j] = -1.0, -1.0
    return sum(matched) / (n + m - len(matched)), len(matched), matched


def _arrays(record: Mapping[str, Any], floor: float) -> tuple[np.ndarray, list[str], np.ndarray]:
    """The record's boxes scoring at least ``floor``: ``(boxes [n, 4], classes, scores)``."""
    kept = [d for d in record["detections"] if float(d["score"]) >= floor]
    boxes = np.array([d["box"] for d in kept], dtype=np.float64).reshape(-1, 4)
    return boxes, [str(d["class"]) for d in kept], np.array([float(d["score"]) for d in kept])


class DetectionSelection(Selection):
    """The detector's strategies: ``uncertainty`` (its default: near the threshold and the flip), ``threshold``,
    ``flip``.
    """

    strategies = STRATEGIES

    @property
    def threshold(self) -> float:
        return float(getattr(self.options, "threshold", 0.5))

    @property
    def match_iou(self) -> float:
        return float(getattr(self.options, "match_iou", 0.5))

    def flips(self, strategy: str) -> bool:
        """``uncertainty`` and ``flip`` score each image mirrored too."""
        return strategy in _FLIPPED

    def uncertainty(
        self,
        records: Sequence[Mapping[str, Any]],
        flipped: Optional[Sequence[Mapping[str, Any]]],
        *,
        strategy: str,
        class_names: Sequence[str],
    ) -> list[Uncertainty]:
        """The strategy's score of each image, with the doubtful box and the flip's agreement as the reason."""
        if self.flips(strategy) and (flipped is None or len(flipped) != len(records)):
            raise ValueError(f"strategy {strategy!r} needs the mirrored images' records, one per record")
        out = []
        for n, record in enumerate(records):
            parts: list[tuple[float, str]] = []
            if strategy != "flip":
                parts.append(self._near(record))
            if strategy != "threshold":
                parts.append(self._disagreement(record, flipped[n]))  # type: ignore[index]
            score = sum(p[0] for p in parts) / len(parts)
            out.append(Uncertainty(score, "; ".join(p[1] for p in parts)))
        return out

    def _near(self, record: Mapping[str, Any]) -> tuple[float, str]:
        boxes, classes, scores = _arrays(record, 0.0)
        closeness, index = near_threshold(scores, self.threshold)
        if index < 0:
            return 0.0, "no box at all"
        return closeness, f"box {classes[index]} at {scores[index]:.2f} near the threshold {self.threshold:.2f}"

    def _disagreement(self, record: Mapping[str, Any], mirrored: Mapping[str, Any]) -> tuple[float, str]:
        floor = self.threshold / 2
        boxes, classes, _ = _arrays(record, floor)
        other, other_classes, _ = _arrays(mirrored, floor)
        width = float(mirrored.get("width") or record.get("width") or 0.0)
        agreement, pairs, ious = flip_agreement(boxes, classes, mirror(other, width), other_classes, self.match_iou)
        if not classes and not other_classes:
            return 0.0, "flip: no box either way"
        mean = f", mean IoU {sum(ious) / len(ious):.2f}" if ious else ""
        return 1.0 - agreement, (
            f"flip: {pairs} of {len(classes)} boxes found again in the mirror image ({len(other_classes)} there){mean}"
        )

    def proposal(self, record: Mapping[str, Any]) -> Proposal:
        """The boxes at or over the threshold, for the reviewer to correct."""
        boxes = tuple(
            ProposedBox(*(float(v) for v in d["box"]), label=str(d["class"]), score=float(d["score"]))
            for d in record["detections"]
            if float(d["score"]) >= self.threshold
        )
        return Proposal(boxes=boxes)
