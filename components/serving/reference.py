"""The reference a stage's sampled traffic is compared with (docs/observability.md).

What the model answered on its own test split at evaluation, summarized as the served traffic is
(``components.serving.traffic``): the shares of each predicted class, the decode-failure and
empty-answer rates, and for each watched figure (score, margin, width, height, channels,
brightness, contrast) the edges of its deciles and the share in each bin. The evaluation writes
it beside the model as ``traffic_reference.json``; the monitor's drift checks read it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

REFERENCE_FILE = "traffic_reference.json"
DRIFT_FORMAT = 1
ANSWER_FIGURES = ("score", "margin")
IMAGE_FIGURES = ("width", "height", "channels", "brightness", "contrast")
BINS = 10
FLOOR = 1e-4  # the share an empty bin counts as (PSI and divergence stay finite)


def figure_values(lines: Sequence[Mapping[str, Any]], name: str) -> np.ndarray:
    """The finite values of one watched figure in ``lines`` (an answer's or an image's)."""
    part = "answer" if name in ANSWER_FIGURES else "image"
    values = [line.get(part, {}).get(name) for line in lines]
    return np.asarray([v for v in values if isinstance(v, (int, float)) and math.isfinite(v)], dtype=np.float64)


def class_shares(counts: Mapping[str, int]) -> dict[str, float]:
    """Each key's share of the counts (empty when there are none)."""
    total = sum(counts.values())
    return {k: v / total for k, v in sorted(counts.items())} if total else {}


def answered_lines(lines: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The summaries whose answer names a class."""
    return [line for line in lines if line.get("answer", {}).get("class") is not None]


def quality_rates(lines: Sequence[Mapping[str, Any]]) -> tuple[float, float]:
    """The decode-failure and empty-answer rates of ``lines`` (0 when empty)."""
    if not lines:
        return 0.0, 0.0
    failures = sum(not line.get("image", {}).get("decoded", False) for line in lines)
    empty = sum(bool(line.get("answer", {}).get("empty", True)) for line in lines)
    return failures / len(lines), empty / len(lines)


def bins_of(values: np.ndarray) -> dict[str, list[float]]:
    """Decile edges of ``values`` (repeated edges merged) and the share of values in each bin."""
    edges = np.unique(np.quantile(values, np.linspace(0, 1, BINS + 1)[1:-1])) if values.size else np.array([])
    counts = np.bincount(np.searchsorted(edges, values, side="right"), minlength=edges.size + 1)
    shares = counts / max(values.size, 1)
    return {"edges": [float(e) for e in edges], "shares": [float(s) for s in shares]}


def build_reference(lines: Sequence[Mapping[str, Any]], source: str = "") -> dict[str, Any]:
    """The reference of a model from the summaries of its answers on its test split (module docstring)."""
    if not lines:
        raise ValueError("a reference needs at least one summary: the test split gave none")
    answered = answered_lines(lines)
    failures, empty = quality_rates(lines)
    return {
        "format": DRIFT_FORMAT,
        "source": source,
        "count": len(lines),
        "classes": class_shares(Counter(str(line["answer"]["class"]) for line in answered)),
        "decode_failure_rate": failures,
        "empty_answer_rate": empty,
        "figures": {name: bins_of(figure_values(lines, name)) for name in ANSWER_FIGURES + IMAGE_FIGURES},
    }
