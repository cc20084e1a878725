"""Quality by slice: which slices each scored example belongs to, and the task's metrics per slice.

A slice is named ``<column>:<value>`` (``:``, not ``=``, so that ``SET``'s ``name=value`` items
keep it whole):

- ``<name>:<value>`` for each value of an ``extra/<name>`` column a CSV or JSONL manifest kept
  (``camera:night``);
- ``size:<bucket>`` for the image's shorter side in pixels, bucketed at :data:`SIZE_EDGES`
  (``size:<64``, ``size:64-255``, ``size:256-1023``, ``size:>=1024``);
- ``class:<name>`` for the example's true class (classification) or the class's objects
  (detection: the per-class AP of the evaluation's COCOeval run);
- ``area:small|medium|large`` (detection): COCO's object areas (below 32², up to 96², above),
  AP from the same COCOeval run.

A slice with fewer than ``min_size`` examples (:data:`MIN_SLICE_SIZE`; objects for the class and
area slices of detection) is listed with its count and not scored: a metric of a handful of
images says more about chance than about the model. An extra column named like a built-in one
(``class``, ``size``, ``area``) is keyed ``extra/<name>``.

What the evaluation records for the promotion (and so for the next gate's per-slice comparison
with prod): ``slice/<slice>/<metric>`` keys among the scalar metrics (:func:`recorded_metrics`,
:func:`parse_recorded`). Plain Python; the records are read without TensorFlow.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Optional

from trainer.records import Record

SIZE_EDGES: tuple[int, ...] = (64, 256, 1024)  # shorter image side, pixels
MIN_SLICE_SIZE = 30  # examples (objects for detection's class and area slices) below which a slice is not scored
BUILTIN_COLUMNS = ("class", "size", "area")
EXTRA_PREFIX = "extra/"
RECORDED_PREFIX = "slice/"


class SliceError(ValueError):
    """A slice setting names a column, slice or metric that does not exist; the message lists those that do."""


@dataclasses.dataclass(frozen=True)
class SliceRow(Record):
    """One slice of an evaluation.

    Attributes:
        key: ``<column>:<value>``.
        column: the column (``camera``, ``size``, ``class``, ``area``).
        value: the value within the column.
        count: examples in the slice (objects, for detection's class and area slices).
        metrics: the task's slice metrics; empty when the slice is too small to be scored.
    """

    key: str
    column: str
    value: str
    count: int
    metrics: dict[str, float]

    @property
    def scored(self) -> bool:
        return bool(self.metrics)


def slice_key(column: str, value: Any) -> str:
    """``column:value``."""
    return f"{column}:{value}"


def column_of(key: str) -> str:
    """The column of a slice key (what comes before the first ``:``)."""
    return key.partition(":")[0]


def size_labels(edges: Sequence[int] = SIZE_EDGES) -> list[str]:
    """The bucket names of ``edges``: ``<64``, ``64-255``, ``256-1023``, ``>=1024``."""
    labels = [f"<{edges[0]}"] if edges else []
    labels += [f"{low}-{high - 1}" for low, high in zip(edges, edges[1:], strict=False)]
    return [*labels, f">={edges[-1]}"] if edges else ["all"]


def size_bucket(height: int, width: int, edges: Sequence[int] = SIZE_EDGES) -> str:
    """The bucket of an image by its shorter side."""
    side, labels = min(height, width), size_labels(edges)
    for edge, label in zip(edges, labels, strict=False):
        if side < edge:
            return label
    return labels[-1]


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return f"{value:g}" if isinstance(value, float) else str(value)


def extra_columns(features: Mapping[str, Sequence[Any]]) -> dict[str, str]:
    """A record's ``extra/`` columns as slice column -> value text (several values joined by commas)."""
    out = {}
    for name, values in features.items():
        if name.startswith(EXTRA_PREFIX):
            column = name[len(EXTRA_PREFIX) :]
            out[f"{EXTRA_PREFIX}{column}" if column in BUILTIN_COLUMNS else column] = ",".join(map(_text, values))
    return out


def example_slices(
    features: Mapping[str, Sequence[Any]],
    columns: Optional[Collection[str]] = None,
    edges: Sequence[int] = SIZE_EDGES,
) -> list[str]:
    """The extra-column and size slices one record belongs to (the task adds its class slices).

    Args:
        features: the record's features (:func:`trainer.tfrecord_read.parse_example`).
        columns: the extra columns to slice by; None: every one the record has.
        edges: the size buckets' edges.
    """
    keys = [slice_key(c, v) for c, v in sorted(extra_columns(features).items()) if columns is None or c in columns]
    height, width = features.get("image/height", [0])[0], features.get("image/width", [0])[0]
    if height and width:
        keys.append(slice_key("size", size_bucket(int(height), int(width), edges)))
    return keys


@dataclasses.dataclass(frozen=True)
class SplitSlices:
    """What the evaluation needs of a split's records besides the pixels, in record order.

    Attributes:
        keys: the slices of each record (extra columns and size; the task adds class slices).
        shas: each record's ``image/sha256`` (for the split's digest).
        columns: the extra columns found in the records.
    """

    keys: list[list[str]]
    shas: list[str]
    columns: set[str]


def read_split_slices(
    dataset_dir: str,
    split: str,
    limit: Optional[int] = None,
    columns: Optional[Collection[str]] = None,
    edges: Sequence[int] = SIZE_EDGES,
) -> SplitSlices:
    """Every record's slices of one split, in the order TensorFlow reads them (shard after shard).

    Raises:
        SliceError: a named column exists in no record of the split (the message lists those that do).
    """
    from trainer import tfrecords
    from trainer.tfrecord_read import iter_split_features

    info = tfrecords.load_dataset_info(dataset_dir)
    keys: list[list[str]] = []
    shas: list[str] = []
    found: set[str] = set()
    for features in iter_split_features(info, split):
        if limit is not None and len(keys) >= limit:
            break
        found.update(extra_columns(features))
        keys.append(example_slices(features, columns, edges))
        shas.append(_text(features.get("image/sha256", [b""])[0]))
    missing = sorted(set(columns or ()) - found - set(BUILTIN_COLUMNS))
    if missing:
        have = ", ".join(sorted(found)) or "none (the source kept no extra columns)"
        raise SliceError(
            f"slice column {missing[0]!r} exists in no record of the {split} split of {info.where}; "
            f"its extra columns: {have}"
        )
    return SplitSlices(keys, shas, found)


def group(keys: Iterable[Sequence[str]]) -> dict[str, list[int]]:
    """Slice key -> the indices of the examples in it, keys in first-seen order."""
    members: dict[str, list[int]] = collections.defaultdict(list)
    for index, example_keys in enumerate(keys):
        for key in example_keys:
            members[key].append(index)
    return dict(members)


def score_slices(
    members: Mapping[str, Sequence[int]],
    score: Callable[[Sequence[int]], Mapping[str, float]],
    min_size: int = MIN_SLICE_SIZE,
) -> list[SliceRow]:
    """A row per slice, scored by ``score(indices)`` when it has at least ``min_size`` examples."""
    rows = []
    for key, indices in members.items():
        column, _, value = key.partition(":")
        metrics = {k: float(v) for k, v in score(indices).items()} if len(indices) >= min_size else {}
        rows.append(SliceRow(key, column, value, len(indices), metrics))
    return rows


def row(key: str, count: int, metrics: Mapping[str, float], min_size: int = MIN_SLICE_SIZE) -> SliceRow:
    """A slice whose metrics were computed elsewhere (detection's class and area slices)."""
    column, _, value = key.partition(":")
    return SliceRow(key, column, value, count, dict(metrics) if count >= min_size else {})


def worst_first(rows: Iterable[SliceRow], order: Sequence[tuple[str, bool]]) -> list[SliceRow]:
    """Scored slices worst first, then the unscored ones, largest first.

    Args:
        rows: the slices.
        order: ``(metric, higher is better)`` pairs: the first decides, the next break ties.
    """
    rows = list(rows)

    def badness(r: SliceRow) -> tuple[Any, ...]:
        return (*[r.metrics.get(m, 0.0) * (1.0 if higher else -1.0) for m, higher in order], r.key)

    scored = sorted((r for r in rows if r.scored), key=badness)
    rest = sorted((r for r in rows if not r.scored), key=lambda r: (-r.count, r.key))
    return scored + rest


def recorded_metrics(rows: Iterable[SliceRow]) -> dict[str, float]:
    """The scored slices' metrics as ``slice/<slice>/<metric>`` scalar metrics (what a stage record keeps)."""
    return {f"{RECORDED_PREFIX}{r.key}/{name}": value for r in rows for name, value in r.metrics.items()}


def parse_recorded(metrics: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """Slice -> metric -> value from a record's scalar metrics (:func:`recorded_metrics`' keys)."""
    out: dict[str, dict[str, float]] = collections.defaultdict(dict)
    for name, value in metrics.items():
        if name.startswith(RECORDED_PREFIX) and isinstance(value, (int, float)) and not isinstance(value, bool):
            key, _, metric = name[len(RECORDED_PREFIX) :].rpartition("/")
            if key:
                out[key][metric] = float(value)
    return dict(out)
