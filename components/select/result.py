"""``selection.json``: what a selection picked, why, and how (records, read back by the tests and tools)."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from components.select.run import SELECTION
from components.serving.pinned import ModelRef
from trainer import records, storage


@dataclasses.dataclass(frozen=True)
class Pick(records.Record):
    """One picked image.

    Attributes:
        rank: its place in the pick, from 1.
        path: its name in the pool (as batch prediction names it).
        image: its file under the output, ``images/<name>`` (what the exports point at).
        score: how unsure the model is of it, in [0, 1] (the ranking strategy's; ``random`` keeps
            the task's default strategy's, for the reviewer to sort by).
        reason: why it was picked, in words.
        sha256: its bytes' sha256.
        phash: its 64-bit perceptual hash in hex (empty where the diversity step computed none).
        width: its width in pixels.
        height: its height in pixels.
        label: the class the model proposes (classification), else None.
        label_score: that class's score.
        boxes: the boxes the model proposes (detection): ``{"box": [xmin, ymin, xmax, ymax] pixels,
            "class", "score"}``.
    """

    _what = "selection pick"
    _omit_empty = ("label", "label_score", "boxes", "phash")

    rank: int
    path: str
    image: str
    score: float
    reason: str
    sha256: str
    width: int
    height: int
    phash: str = ""
    label: Optional[str] = None
    label_score: Optional[float] = None
    boxes: tuple[dict[str, Any], ...] = ()


@dataclasses.dataclass(frozen=True)
class SelectionResult(records.Record):
    """``selection.json``.

    Attributes:
        strategy: the ranking (``random``, or one of the task's strategies).
        scored_by: the task's strategy the scores are (the ranking's, or with ``random`` the task's first).
        seed: the seed of the random order (and of ties).
        diversity: ``hash``, ``kcenter`` or ``none``.
        near_bits: near-copies differ in at most this many hash bits.
        count: how many picks were asked for.
        data: the pool.
        dataset: the labelled dataset whose images were left out, or None.
        model: the model it was scored with.
        class_names: the model's classes.
        pool: images the pool lists.
        scored: images scored.
        unreadable: images that could not be read or decoded.
        labelled: images left out because the dataset has them (equal sha256).
        near_copies: images passed over as near-copies of a pick.
        picks: the picks, in rank order.
        files: what was written, name -> file under the output (``label_studio``, ``cvat``, ``yolo``,
            ``report``).
        seconds: the selection's wall time (the model's loading included).
        selected_at: when, ISO 8601 in UTC.
    """

    _what = "selection"
    _mode = records.FORWARD_COMPATIBLE
    _omit_empty = ("dataset",)

    strategy: str
    scored_by: str
    seed: int
    diversity: str
    near_bits: int
    count: int
    data: str
    model: ModelRef
    class_names: tuple[str, ...]
    pool: int
    scored: int
    unreadable: int
    labelled: int
    near_copies: int
    picks: tuple[Pick, ...]
    files: dict[str, str]
    seconds: float
    selected_at: str
    dataset: Optional[str] = None
    extra: dict[str, Any] = records.extra_field()


def read_selection(output_uri: str) -> Optional[SelectionResult]:
    """The selection written under ``output_uri``, or None."""
    data = storage.read_json(storage.join(output_uri, SELECTION))
    return None if data is None else SelectionResult.from_dict(data)
