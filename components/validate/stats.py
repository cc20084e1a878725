"""The statistics of a converted dataset: what ``stats.json`` holds, and how one pass over the records builds it.

Per split: the records, the classes (images per class, or objects per class for a split whose
images have no class of their own, detection's), their shares, the stored formats and channels,
the images' heights and widths (range, median, coarse buckets), a digest of the images' sha256s
(a changed test split shows in it), for detection the boxes (per image, side in pixels, share of
the image's area, aspect ratio) and the ``extra/`` columns a CSV or JSONL source kept, with their
most frequent values. :class:`DatasetStats` is a strict record: ``stats.json`` written by one
validation is read back (:func:`read_stats`) as the baseline of the next.

No TensorFlow: records are read with :mod:`trainer.tfrecord_read`, their images never decoded.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from trainer import records, storage
from trainer.tfrecord_read import Values
from trainer.tfrecords import NO_LABEL, DatasetInfo

STATS_NAME = "stats.json"
STATS_VERSION = 1
EXTRA_PREFIX = "extra/"
IMAGES, OBJECTS = "images", "objects"  # what a split's class counts count

# Bucket edges of the coarse distributions: a bucket holds [edge, next edge).
SIDE_EDGES = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)  # image height or width, pixels
BOXES_EDGES = (1, 2, 4, 8, 16, 32, 64)  # boxes per image
BOX_PX_EDGES = (2, 4, 8, 16, 32, 64, 128, 256, 512)  # box side (square root of its area), pixels
SHARE_EDGES = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 0.9)  # box area / image area
ASPECT_EDGES = (0.25, 0.5, 0.8, 1.25, 2.0, 4.0)  # box width / height, in pixels
_MAX_DISTINCT = 1000  # distinct values of one extra/ column counted before the rest are "other"


class StatsError(ValueError):
    """A ``stats.json`` is missing or malformed; the message names the file and the fix."""


class _StatsPart(records.Record):
    _error = StatsError
    _hint = "write it again with the validate step of this version"


# --------------------------------------------------------------------------------------------
# The records
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Spread(_StatsPart):
    """A quantity over a split: how many values, their range and median, and a coarse histogram.

    Attributes:
        count: the values.
        min: the smallest (None without values).
        median: the median (the mean of the two middle values for an even count).
        max: the largest.
        buckets: bucket label (``32-63``, ``<16``, ``>=4096``, ``0.01-0.05``) -> values in it,
            the non-empty buckets in increasing order.
    """

    count: int
    min: Optional[float]
    median: Optional[float]
    max: Optional[float]
    buckets: dict[str, int]

    @classmethod
    def of(cls, counts: Mapping[float, int], edges: Sequence[float], integer: bool = False) -> Spread:
        """The spread of ``value -> how many``, bucketed by ``edges`` (labelled as integers or not)."""
        total = sum(counts.values())
        if not total:
            return cls(0, None, None, None, {})
        ordered = sorted(counts.items())
        labels = _bucket_labels(edges, integer)
        buckets = [0] * len(labels)
        for value, n in ordered:
            buckets[bisect.bisect_right(edges, value)] += n
        histogram = {label: n for label, n in zip(labels, buckets, strict=True) if n}
        return cls(total, float(ordered[0][0]), median(counts), float(ordered[-1][0]), histogram)


def median(counts: Mapping[float, int]) -> float:
    """The median of ``value -> how many`` (the mean of the two middle values for an even count).

    Raises:
        ValueError: no values.
    """
    total = sum(counts.values())
    if not total:
        raise ValueError("the median of no values")
    ordered = sorted(counts.items())
    return float(_nth(ordered, (total - 1) // 2) + _nth(ordered, total // 2)) / 2


def _nth(ordered: Sequence[tuple[float, int]], index: int) -> float:
    """The value at ``index`` of the sorted values ``ordered`` gives as (value, how many)."""
    for value, n in ordered:
        if index < n:
            return value
        index -= n
    raise IndexError(index)


def _bucket_labels(edges: Sequence[float], integer: bool) -> list[str]:
    """One label per bucket: below the first edge, each [edge, next), and from the last edge on."""
    labels = ["0" if integer and edges[0] == 1 else f"<{edges[0]:g}"]
    for lo, hi in zip(edges, edges[1:], strict=False):
        labels.append((f"{lo}" if hi - lo == 1 else f"{lo}-{hi - 1}") if integer else f"{lo:g}-{hi:g}")
    return [*labels, f">={edges[-1]:g}"]


@dataclasses.dataclass(frozen=True)
class ObjectStats(_StatsPart):
    """The boxes of a split's images (detection).

    Attributes:
        images: records that carry box lists (maybe empty: negatives).
        boxes: the boxes.
        class_counts: class name -> boxes.
        per_image: boxes per image.
        side_px: a box's side in pixels: the square root of its area.
        image_share: a box's area as a share of its image's.
        aspect: a box's width / height, in pixels.
    """

    images: int
    boxes: int
    class_counts: dict[str, int]
    per_image: Spread
    side_px: Spread
    image_share: Spread
    aspect: Spread


@dataclasses.dataclass(frozen=True)
class ColumnStats(_StatsPart):
    """One ``extra/<name>`` column a manifest source kept.

    Attributes:
        records: records that have it.
        distinct: distinct values counted (at most 1000; ``capped`` when there were more).
        capped: more distinct values than were counted; the rest are in ``other``.
        values: the most frequent values (a list's values joined by commas) -> records.
        other: records whose value is not listed.
    """

    records: int
    distinct: int
    capped: bool
    values: dict[str, int]
    other: int


@dataclasses.dataclass(frozen=True)
class SplitStats(_StatsPart):
    """One split's statistics.

    Attributes:
        count: records.
        class_unit: ``images`` when the class counts count images (classification), ``objects``
            when they count boxes (the split's images have no class of their own).
        class_counts: class name -> images or objects, every class of the dataset.
        class_shares: class name -> its share of the split's images or objects.
        unlabelled: records without an image-level class.
        formats: stored image format (``png``, ``jpeg``...) -> records.
        channels: channels (``1``, ``3``...) -> records.
        height: the images' heights in pixels.
        width: the images' widths in pixels.
        distinct_images: distinct ``image/sha256`` values.
        sha256_digest: sha256 of the sorted distinct ``image/sha256`` values, one per line: equal
            digests, the same images.
        boxes: the boxes, for a split whose records carry them; else None.
        columns: ``extra/`` column name (without the prefix) -> its values.
    """

    _omit_empty = ("boxes", "columns")

    count: int
    class_unit: str
    class_counts: dict[str, int]
    class_shares: dict[str, float]
    unlabelled: int
    formats: dict[str, int]
    channels: dict[str, int]
    height: Spread
    width: Spread
    distinct_images: int
    sha256_digest: str
    boxes: Optional[ObjectStats] = None
    columns: dict[str, ColumnStats] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class DatasetStats(_StatsPart):
    """The statistics of a dataset: ``stats.json``.

    Attributes:
        schema_version: this file's layout (``STATS_VERSION``).
        dataset: the dataset folder they were computed from.
        task: the dataset's task (``dataset.json``'s).
        source_fingerprint: the source's fingerprint (``dataset.json``'s).
        classes: the class names.
        splits: split name -> its statistics, in the dataset's order.
    """

    schema_version: int
    dataset: str
    task: str
    source_fingerprint: str
    classes: tuple[str, ...]
    splits: dict[str, SplitStats]

    def present_classes(self) -> dict[str, int]:
        """Class name -> images or objects over every split, the classes that have any."""
        total: collections.Counter = collections.Counter()
        for split in self.splits.values():
            total.update(split.class_counts)
        return {name: n for name, n in total.items() if n > 0}

    def class_unit(self) -> str:
        """What the class counts count: ``objects`` where any split counts boxes, else ``images``."""
        return OBJECTS if any(s.class_unit == OBJECTS for s in self.splits.values()) else IMAGES


def read_stats(path: str) -> DatasetStats:
    """Reads a ``stats.json`` (local or gs://).

    Raises:
        StatsError: no such file, not JSON, another schema version, or unknown or missing keys.
    """
    try:
        data = json.loads(storage.read_bytes(path))
    except FileNotFoundError:
        raise StatsError(f"{path}: no such file; give the stats.json of an earlier validation") from None
    except (OSError, ValueError) as err:
        raise StatsError(
            f"{path}: cannot read it as JSON ({err}); give the stats.json of an earlier validation"
        ) from None
    if isinstance(data, dict) and data.get("schema_version", STATS_VERSION) != STATS_VERSION:
        raise StatsError(
            f"{path} has schema_version {data['schema_version']}, this code reads {STATS_VERSION}; "
            "validate the baseline dataset again with this version"
        )
    return DatasetStats.from_dict(data, f"{path}: ")


# --------------------------------------------------------------------------------------------
# One record, as the statistics and the checks see it
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Box:
    """One box in pixels: its size, its share of the image's area, its class name."""

    width_px: float
    height_px: float
    share: float
    label: str


@dataclasses.dataclass(frozen=True, slots=True)
class RecordView:
    """What the statistics and the checks read of one record (never its image bytes)."""

    split: str
    key: str
    sha256: str
    label: int
    height: int
    width: int
    channels: int
    format: str
    boxes: Optional[tuple[Box, ...]]
    extra: dict[str, str]


def _one(features: Mapping[str, Values], name: str, default: Any) -> Any:
    values = features.get(name)
    return values[0] if values else default


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return f"{value:g}" if isinstance(value, float) else str(value)


def class_name(classes: Sequence[str], label: int) -> str:
    """A label's class name; a label outside the classes is shown as ``#<label>``."""
    return classes[label] if 0 <= label < len(classes) else f"#{label}"


def _boxes(
    features: Mapping[str, Values], height: int, width: int, classes: Sequence[str]
) -> Optional[tuple[Box, ...]]:
    if "image/object/bbox/xmin" not in features:
        return None
    xmin, xmax = features["image/object/bbox/xmin"], features.get("image/object/bbox/xmax", [])
    ymin, ymax = features.get("image/object/bbox/ymin", []), features.get("image/object/bbox/ymax", [])
    labels = features.get("image/object/class/label", [])
    boxes = []
    for i in range(min(len(xmin), len(xmax), len(ymin), len(ymax))):
        w, h = (xmax[i] - xmin[i]) * width, (ymax[i] - ymin[i]) * height
        share = max(xmax[i] - xmin[i], 0.0) * max(ymax[i] - ymin[i], 0.0)
        label = class_name(classes, int(labels[i])) if i < len(labels) else "#?"
        boxes.append(Box(w, h, share, label))
    return tuple(boxes)


def view_of(features: Mapping[str, Values], split: str, classes: Sequence[str]) -> RecordView:
    """The view of one record's features (as :func:`trainer.tfrecord_read.parse_example` gives them)."""
    height, width = int(_one(features, "image/height", 0)), int(_one(features, "image/width", 0))
    extra = {
        name[len(EXTRA_PREFIX) :]: ",".join(_text(v) for v in values)
        for name, values in features.items()
        if name.startswith(EXTRA_PREFIX)
    }
    return RecordView(
        split=split,
        key=_text(_one(features, "image/source_key", b"")),
        sha256=_text(_one(features, "image/sha256", b"")),
        label=int(_one(features, "image/class/label", NO_LABEL)),
        height=height,
        width=width,
        channels=int(_one(features, "image/channels", 0)),
        format=_text(_one(features, "image/format", b"")),
        boxes=_boxes(features, height, width, classes),
        extra=extra,
    )


# --------------------------------------------------------------------------------------------
# Building the statistics, one record at a time
# --------------------------------------------------------------------------------------------


class _Column:
    """The values of one extra/ column: counted up to a bound of distinct values."""

    def __init__(self) -> None:
        self.records = 0
        self.counts: collections.Counter = collections.Counter()
        self.capped = False

    def add(self, value: str) -> None:
        self.records += 1
        if value in self.counts or len(self.counts) < _MAX_DISTINCT:
            self.counts[value] += 1
        else:
            self.capped = True

    def stats(self, limit: int) -> ColumnStats:
        top = dict(sorted(self.counts.items(), key=lambda item: (-item[1], item[0]))[:limit])  # ties by value
        return ColumnStats(self.records, len(self.counts), self.capped, top, self.records - sum(top.values()))


class _Objects:
    """The boxes of one split's records."""

    def __init__(self) -> None:
        self.images = 0
        self.per_image: collections.Counter = collections.Counter()
        self.sides: collections.Counter = collections.Counter()
        self.shares: collections.Counter = collections.Counter()
        self.aspects: collections.Counter = collections.Counter()
        self.classes: collections.Counter = collections.Counter()

    def add(self, boxes: Sequence[Box]) -> None:
        self.images += 1
        self.per_image[len(boxes)] += 1
        for box in boxes:
            w, h = max(box.width_px, 0.0), max(box.height_px, 0.0)
            # Rounded: the medians stay exact enough and the counters small.
            self.sides[round(math.sqrt(w * h), 2)] += 1
            self.shares[round(box.share, 6)] += 1
            if w > 0 and h > 0:
                self.aspects[round(w / h, 3)] += 1
            self.classes[box.label] += 1

    def stats(self, classes: Sequence[str]) -> ObjectStats:
        return ObjectStats(
            images=self.images,
            boxes=sum(self.classes.values()),
            class_counts={**{c: 0 for c in classes}, **self.classes},
            per_image=Spread.of(self.per_image, BOXES_EDGES, integer=True),
            side_px=Spread.of(self.sides, BOX_PX_EDGES),
            image_share=Spread.of(self.shares, SHARE_EDGES),
            aspect=Spread.of(self.aspects, ASPECT_EDGES),
        )


class _Split:
    """What one split's records add up to."""

    def __init__(self) -> None:
        self.count = 0
        self.labels: collections.Counter = collections.Counter()
        self.formats: collections.Counter = collections.Counter()
        self.channels: collections.Counter = collections.Counter()
        self.heights: collections.Counter = collections.Counter()
        self.widths: collections.Counter = collections.Counter()
        self.shas: set[str] = set()
        self.objects: Optional[_Objects] = None
        self.columns: dict[str, _Column] = {}

    def add(self, view: RecordView) -> None:
        self.count += 1
        self.labels[view.label] += 1
        self.formats[view.format] += 1
        self.channels[str(view.channels)] += 1
        self.heights[view.height] += 1
        self.widths[view.width] += 1
        self.shas.add(view.sha256)
        if view.boxes is not None:
            self.objects = self.objects or _Objects()
            self.objects.add(view.boxes)
        for name, value in view.extra.items():
            self.columns.setdefault(name, _Column()).add(value)

    def stats(self, classes: Sequence[str], column_values: int) -> SplitStats:
        objects = self.objects.stats(classes) if self.objects else None
        unlabelled = self.labels.get(NO_LABEL, 0)
        if objects is not None and unlabelled == self.count:
            unit, counts = OBJECTS, dict(objects.class_counts)
        else:
            unit = IMAGES
            counts = {c: 0 for c in classes}
            for label, n in self.labels.items():
                if label != NO_LABEL:
                    counts[class_name(classes, label)] = counts.get(class_name(classes, label), 0) + n
        total = sum(counts.values())
        return SplitStats(
            count=self.count,
            class_unit=unit,
            class_counts=counts,
            class_shares={c: round(n / total, 6) if total else 0.0 for c, n in counts.items()},
            unlabelled=unlabelled,
            formats=dict(self.formats.most_common()),
            channels=dict(sorted(self.channels.items())),
            height=Spread.of(self.heights, SIDE_EDGES, integer=True),
            width=Spread.of(self.widths, SIDE_EDGES, integer=True),
            distinct_images=len(self.shas),
            sha256_digest=hashlib.sha256("".join(s + "\n" for s in sorted(self.shas)).encode()).hexdigest(),
            boxes=objects,
            columns={name: col.stats(column_values) for name, col in sorted(self.columns.items())},
        )


class StatsBuilder:
    """Adds up a dataset's records into its :class:`DatasetStats`.

    Args:
        info: the dataset.
        column_values: values per ``extra/`` column the statistics list.
    """

    def __init__(self, info: DatasetInfo, column_values: int) -> None:
        self.info = info
        self.column_values = column_values
        self.splits = {name: _Split() for name in info.splits}

    def add(self, view: RecordView) -> None:
        """Counts one record into its split."""
        self.splits[view.split].add(view)

    def stats(self) -> DatasetStats:
        """The statistics of the records added so far."""
        classes = self.info.classes
        return DatasetStats(
            schema_version=STATS_VERSION,
            dataset=self.info.where,
            task=self.info.task,
            source_fingerprint=self.info.source.fingerprint,
            classes=tuple(classes),
            splits={name: split.stats(classes, self.column_values) for name, split in self.splits.items()},
        )
