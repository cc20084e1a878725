"""Datasets that grow by deltas: a conversion with a ``parent`` writes only the items its parents lack.

Every dataset lists the items it converted in ``keys.jsonl`` (key, split, size, label, a digest of
its boxes, extra columns and given split; a rejected item flagged), beside its shards. A
conversion with ``convert.parent`` lists the source as usual (no image is read), leaves out
every item a dataset of the parent chain holds (or rejected), and plans only the others: their
splits are drawn from each item's own hash (its key, or its content with ``split_by: content``),
never stratified, so an item keeps its split as the source grows and no parent item moves. Its
``dataset.json`` names the parent by its ``plan_key`` and lists the union: the parents' shards
(each with its folder, ``dir``) and its own, the counts added up; the one reader
(:func:`trainer.tfrecords.load_dataset_info`) checks the chain when it is read.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable

from components.convert.config import ConvertConfig
from components.image_input.sources import ConvertError, Item, Source
from trainer import storage
from trainer.tfrecords import (
    KEYS_NAME,
    MANIFEST_NAME,
    BoxStats,
    DatasetError,
    DatasetInfo,
    ImageShape,
    ParentInfo,
    SplitInfo,
    check_parent,
    load_dataset_info,
)


@dataclasses.dataclass(frozen=True)
class Held:
    """An item a dataset of the parent chain holds: where, and what it was when converted."""

    split: str | None
    size: int
    label: int
    rejected: bool = False
    meta: str | None = None  # a digest of the item's boxes, extra columns and given split, when it has any


@dataclasses.dataclass
class Parent:
    """The dataset a conversion grows from: its info and the items its chain holds, by key."""

    uri: str
    info: DatasetInfo
    held: dict[str, Held]
    gone: int = 0  # items the parents hold that the source no longer lists (they stay in the union)


def parent_uri(config: ConvertConfig) -> str | None:
    """``convert.parent`` as a folder that does not depend on the working directory; None: no parent."""
    if not config.parent:
        return None
    return config.parent if storage.is_gcs(config.parent) else os.path.abspath(config.parent)


def load_parent(config: ConvertConfig) -> Parent | None:
    """The parent dataset and the keys of its chain; None when the config names none.

    Raises:
        ConvertError: the parent is not a dataset, a dataset of its chain is gone or changed or
            lists no keys, or its settings differ from the config's (compression, resize, classes).
    """
    uri = parent_uri(config)
    if uri is None:
        return None
    if not storage.exists(storage.join(uri, MANIFEST_NAME)):
        raise ConvertError(
            f"convert.parent {uri} is not a dataset (no {MANIFEST_NAME}): give the folder of the dataset this "
            "conversion grows from, or no parent"
        )
    try:
        info = load_dataset_info(uri)
    except DatasetError as err:
        raise ConvertError(f"convert.parent: {err}") from None
    _check_settings(config, info)
    return Parent(uri, info, _held(info))


def _check_settings(config: ConvertConfig, info: DatasetInfo) -> None:
    """Refuses a delta whose records would not read like its parent's."""
    made = info.config
    for name in ("compression", "resize", "resize_mode"):
        mine, theirs = config.to_dict().get(name), made.get(name)
        if name == "resize_mode" and config.resize is None:
            continue  # without a resize the mode writes nothing
        if (list(mine) if isinstance(mine, (list, tuple)) else mine) != (
            list(theirs) if isinstance(theirs, (list, tuple)) else theirs
        ):
            raise ConvertError(
                f"convert.{name} is {mine!r} but the parent {info.where} was converted with {theirs!r}: a delta's "
                f"records must read like its parent's; set {name}: {theirs!r}, or convert without a parent"
            )
    if config.classes is not None and tuple(config.classes) != tuple(info.classes):
        raise ConvertError(
            f"convert.classes {list(config.classes)} differ from the parent's {list(info.classes)} ({info.where}): "
            "a delta cannot change the classes; convert without a parent"
        )


def _held(info: DatasetInfo) -> dict[str, Held]:
    """The items of every dataset of the chain, by key (read from each one's ``keys.jsonl``)."""
    held: dict[str, Held] = {}
    level: DatasetInfo | None = info
    while level is not None:
        path = storage.join(level.where, KEYS_NAME)
        if not storage.exists(path):
            raise ConvertError(
                f"convert.parent: {level.where} lists no keys ({KEYS_NAME}: converted before datasets could grow by "
                "deltas); convert it again once, or convert without a parent"
            )
        lines = storage.read_text(path).splitlines()
        for row in json.loads("[" + ",".join(lines) + "]"):  # one parse: 3x faster than one a line
            held.setdefault(
                row["key"],
                Held(row.get("split"), row["size"], row["label"], row.get("rejected", False), row.get("meta")),
            )
        level = check_parent(level)
    return held


def _meta(item: Item) -> str | None:
    """A digest of what an item carries beside its file and label (boxes, extra columns, the split its
    source gives); None: nothing.
    """
    if item.boxes is None and not item.extra and item.split is None:
        return None
    carried = (item.boxes, sorted((item.extra or {}).items()), item.split)
    return hashlib.sha256(repr(carried).encode()).hexdigest()[:16]


def _changed(was: Held, item: Item) -> bool:
    """Whether an item the parents hold is another one now: its file's size, label, boxes, columns or given split."""
    return (was.size, was.label, was.meta) != (item.size, item.label, _meta(item))


def new_items(source: Source, parent: Parent) -> list[Item]:
    """The source's items the parent chain lacks (a rejected item whose file changed counts as new).

    Raises:
        ConvertError: an item the parents hold has another size, label, boxes, columns or given
            split now (a delta only adds).
    """
    fresh, changed = [], []
    for item in source.items:
        was = parent.held.get(item.key)
        if was is None or (was.rejected and was.size != item.size):
            fresh.append(item)
        elif not was.rejected and _changed(was, item):
            changed.append(item.key)
    if changed:
        raise ConvertError(
            f"{len(changed)} items of {source.uri} changed since the parent {parent.uri} converted them (e.g. "
            f"{', '.join(changed[:3])}): a delta only adds items; convert without a parent"
        )
    listed = {item.key for item in source.items}
    parent.gone = sum(1 for key in parent.held if key not in listed)
    return fresh


def split_limit(limit: int | None, parent: Parent | None, split: str) -> int | None:
    """``limit_per_split`` for a split of the plan: with a parent, what the union still has room for."""
    if limit is None or parent is None:
        return limit
    split_info = parent.info.splits.get(split)
    return max(0, limit - (split_info.count if split_info else 0))


def keys_text(placed: Iterable[tuple[str, Item]], rejected: list[dict]) -> str:
    """``keys.jsonl``: one line per item converted (``(split, item)``) or rejected, in order; ``meta``
    is a digest of its boxes, extra columns and given split when it has any (a delta sees them change).
    """
    bad = {r["key"] for r in rejected if "key" in r}
    lines = []
    for split, it in placed:
        row = {"key": it.key, "split": split, "size": it.size, "label": it.label, "rejected": it.key in bad}
        meta = _meta(it)
        lines.append(json.dumps(row if meta is None else {**row, "meta": meta}))
    return "".join(line + "\n" for line in lines)


def union_splits(own: dict[str, SplitInfo], parent: Parent) -> dict[str, SplitInfo]:
    """The splits of a delta: the parents' shards (with their folder) then its own, the counts added up."""
    theirs = parent.info.splits
    out = {}
    for name in list(theirs) + [s for s in own if s not in theirs]:
        a, b = theirs.get(name), own.get(name)
        shards = tuple(dataclasses.replace(s, dir=s.dir or parent.uri) for s in (a.shards if a else ()))
        counts: collections.Counter = collections.Counter()
        for part in (a, b):
            counts.update(part.class_counts if part else {})
        unlabelled = sum((part.unlabelled or 0) for part in (a, b) if part)
        out[name] = SplitInfo(
            count=sum(part.count for part in (a, b) if part),
            class_counts={c: counts.get(c, 0) for c in parent.info.classes},
            shards=shards + (b.shards if b else ()),
            unlabelled=unlabelled or None,
        )
    return out


def union_image(own: ImageShape | None, own_records: int, parent: Parent) -> ImageShape | None:
    """The common image size of a delta and its parents, None when they differ."""
    if own_records == 0 or own == parent.info.image:
        return parent.info.image
    return None


def union_boxes(own: BoxStats | None, parent: Parent) -> BoxStats | None:
    """A detection delta's box counts with its parents' added (orphan annotations: the source's, its own)."""
    theirs = parent.info.boxes
    if own is None or theirs is None:
        return own
    reasons = collections.Counter(theirs.dropped_reasons) + collections.Counter(own.dropped_reasons)
    added = {k: getattr(own, k) + getattr(theirs, k) for k in ("kept", "clipped", "dropped", "crowd", "negatives")}
    return dataclasses.replace(own, **added, dropped_reasons=dict(reasons))


def parent_info(parent: Parent) -> ParentInfo:
    """``dataset.json``'s ``parent``: the parent's folder, its plan key and the records it reuses."""
    return ParentInfo(parent.uri, parent.info.plan_key, parent.info.records)
