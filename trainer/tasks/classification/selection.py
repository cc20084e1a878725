"""Classification's uncertainty strategies (the task's selection facet, :class:`ClassificationSelection`).

Each image's class probabilities (its batch prediction record, every class kept) give one score in
[0, 1], higher for an image the model is less sure of:

- ``least_confidence``: one less the top class's probability;
- ``margin``: one less the gap between the two most probable classes (two classes neck and neck
  score near 1 even when a third is far behind);
- ``entropy``: the entropy of the probabilities over its maximum, ``log(classes)`` (the whole
  distribution, not its top two).

Pure NumPy on ``[images, classes]`` arrays (:func:`least_confidence`, :func:`margin`,
:func:`entropy`); the facet turns records into that array and back into reasons.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

import numpy as np

from trainer.errors import TaskError
from trainer.tasks.selection import Proposal, Selection, Uncertainty


def least_confidence(probabilities: np.ndarray) -> np.ndarray:
    """``1 - max p`` per row."""
    return 1.0 - np.max(probabilities, axis=1)


def margin(probabilities: np.ndarray) -> np.ndarray:
    """``1 - (p1 - p2)`` per row, the two largest probabilities (a single class: 0)."""
    if probabilities.shape[1] < 2:
        return np.zeros(len(probabilities))
    top2 = -np.sort(-probabilities, axis=1)[:, :2]
    return 1.0 - (top2[:, 0] - top2[:, 1])


def entropy(probabilities: np.ndarray) -> np.ndarray:
    """The entropy of each row over ``log(classes)``: 0 for a sure model, 1 for a uniform one."""
    if probabilities.shape[1] < 2:
        return np.zeros(len(probabilities))
    p = np.clip(probabilities, 1e-12, 1.0)
    return np.clip(-np.sum(p * np.log(p), axis=1) / np.log(probabilities.shape[1]), 0.0, 1.0)


STRATEGIES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "least_confidence": least_confidence,
    "margin": margin,
    "entropy": entropy,
}


def probabilities(records: Sequence[Mapping[str, Any]], classes: int) -> np.ndarray:
    """``[images, classes]`` probabilities from records ``{"classes": [{"index", "score"}, ...]}``.

    A class a record leaves out counts as 0.

    Raises:
        TaskError: a record names a class index outside ``classes``.
    """
    out = np.zeros((len(records), classes), dtype=np.float64)
    for row, record in enumerate(records):
        for entry in record["classes"]:
            index = int(entry["index"])
            if not 0 <= index < classes:
                raise TaskError(f"a prediction names class {index}, but the model has {classes} classes")
            out[row, index] = float(entry["score"])
    return out


def _reason(strategy: str, row: np.ndarray, class_names: Sequence[str]) -> str:
    order = np.argsort(-row, kind="stable")
    first = f"top class {class_names[order[0]]} at {row[order[0]]:.2f}"
    if len(order) < 2:
        return f"{strategy.replace('_', ' ')}: {first}"
    return f"{strategy.replace('_', ' ')}: {first}, then {class_names[order[1]]} at {row[order[1]]:.2f}"


class ClassificationSelection(Selection):
    """The classifier's strategies: least confidence (its default), margin, entropy."""

    strategies = tuple(STRATEGIES)

    def uncertainty(
        self,
        records: Sequence[Mapping[str, Any]],
        flipped: Optional[Sequence[Mapping[str, Any]]],
        *,
        strategy: str,
        class_names: Sequence[str],
    ) -> list[Uncertainty]:
        """The strategy's score of each record's probabilities, with its top two classes as the reason."""
        p = probabilities(records, len(class_names))
        scores = STRATEGIES[strategy](p)
        return [Uncertainty(float(s), _reason(strategy, row, class_names)) for s, row in zip(scores, p, strict=True)]

    def proposal(self, record: Mapping[str, Any]) -> Proposal:
        """The top class and its score (none when the record has no class)."""
        classes = record["classes"]
        if not classes:
            return Proposal()
        top = max(classes, key=lambda c: float(c["score"]))
        return Proposal(label=str(top["class"]), label_score=float(top["score"]))
