"""Finalizing a conversion: every shard's marker added up into ``dataset.json`` and ``rejected.jsonl``.

``dataset.json`` is published last: a folder without it is not a dataset.
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass, field
from typing import Any

from components.convert import delta
from components.convert.config import ConvertConfig
from components.convert.markers import MARKERS, SHARD_RE, up_to_date, valid_marker
from components.convert.plan import Plan, make_plan
from components.convert.storage import Output
from components.image_input.sources import ConvertError, Item, Source
from trainer.tasks import task_types
from trainer.tfrecords import (
    KEYS_NAME,
    MANIFEST_NAME,
    REJECTED_NAME,
    SCHEMA_VERSION,
    BoxStats,
    DatasetInfo,
    ImageShape,
    LabelSource,
    ShardInfo,
    SourceInfo,
    SplitInfo,
)


def _reason_kind(reason: str) -> str:
    return reason.split(":", 1)[0]


def _markers(plan: Plan, out: Output, output: str, sizes: dict[str, int]) -> dict[str, dict]:
    """Every shard's valid marker.

    Raises:
        ConvertError: a shard of the plan is missing (a worker did not finish).
    """
    markers = {shard.file: valid_marker(plan, out, shard, sizes) for shard in plan.shards}
    missing = [name for name, marker in markers.items() if marker is None]
    if missing:
        raise ConvertError(
            f"cannot finalize {output}: {len(missing)} shards are not written (e.g. {missing[:3]}); "
            "run write_shards for them (or the whole conversion) first"
        )
    return markers


@dataclass
class _Totals:
    """What the markers of every shard add up to."""

    splits: dict[str, SplitInfo] = field(default_factory=dict)
    rejected: list[dict] = field(default_factory=list)
    converted: collections.Counter = field(default_factory=collections.Counter)
    boxes: collections.Counter = field(default_factory=collections.Counter)
    dropped: list[dict] = field(default_factory=list)
    shapes: set = field(default_factory=set)
    mixed: bool = False

    def add_split(self, split: str, markers: list[dict], classes: list[str]) -> None:
        class_counts: collections.Counter = collections.Counter()
        shards = []
        for m in markers:
            shards.append(ShardInfo(m["file"], m["count"], m["bytes"], m["crc32c"]))
            class_counts.update({int(k): v for k, v in m["class_counts"].items()})
            self.rejected.extend(m["rejected"])
            self.converted.update(m["converted"])
            self.boxes.update(m.get("boxes", {}))  # markers of an interrupted run of an older version lack them
            self.dropped.extend(m.get("dropped", []))
            if m["shapes"] == "mixed":
                self.mixed = True
            else:
                self.shapes.update(tuple(s) for s in m["shapes"])
        self.splits[split] = SplitInfo(
            count=sum(s.count for s in shards),
            class_counts={name: class_counts.get(i, 0) for i, name in enumerate(classes)},
            shards=tuple(shards),
            unlabelled=class_counts[-1] if class_counts.get(-1) else None,
        )

    def image(self) -> ImageShape | None:
        if self.mixed or len(self.shapes) != 1:
            return None
        return ImageShape(*next(iter(self.shapes)))

    def box_stats(self, orphans: list[dict]) -> BoxStats:
        boxes = self.boxes
        return BoxStats(
            kept=boxes["kept"],
            clipped=boxes["clipped"],
            dropped=boxes["dropped"],
            dropped_reasons=dict(collections.Counter(_reason_kind(r["reason"]) for r in self.dropped)),
            crowd=boxes["crowd"],
            negatives=boxes["negatives"],
            orphan_annotations=sum(1 for r in orphans if "annotation_id" in r and r["reason"].startswith("orphan")),
        )


def _kind(value: Any) -> str:
    """A value's kind as ``dataset.json``'s ``columns`` names it (a list: its items' kind)."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if values and all(isinstance(v, (bool, int)) for v in values):
        return "int"
    if values and all(isinstance(v, (bool, int, float)) for v in values):
        return "float"
    return "string" if all(isinstance(v, (str, bytes)) for v in values) else "mixed"


def extra_columns(items: list[Item]) -> dict[str, str]:
    """The ``extra/`` columns the items carry, name -> kind (``string``, ``int``, ``float``, ``mixed``).

    Ints and floats in one column make a ``float`` column; any other mix is ``mixed`` (its records'
    features then differ in type, which a reader must allow for).
    """
    kinds: dict[str, set[str]] = collections.defaultdict(set)
    for item in items:
        for name, value in (item.extra or {}).items():
            kinds[name].add(_kind(value))
    out = {}
    for name in sorted(kinds):
        found = kinds[name]
        out[name] = found.pop() if len(found) == 1 else ("float" if found <= {"int", "float"} else "mixed")
    return out


def _labels(source: Source) -> LabelSource | None:
    """A labelling tool's export: its name, its class ids and the label entries rejected while scanning."""
    if source.label_tool is None:
        return None
    reasons = collections.Counter(_reason_kind(r["reason"]) for r in source.rejected)
    return LabelSource(source.label_tool, len(source.rejected), dict(reasons), dict(source.class_ids))


def _dataset_info(plan: Plan, config: ConvertConfig, totals: _Totals) -> DatasetInfo:
    source = plan.source
    with_boxes = task_types()[source.task].records_boxes
    splits, image, parent = totals.splits, totals.image(), plan.parent
    boxes = totals.box_stats(source.rejected) if with_boxes else None
    if parent is not None:  # a delta lists the union: its parents' shards, then its own
        image = delta.union_image(image, sum(s.count for s in splits.values()), parent)
        splits, boxes = delta.union_splits(splits, parent), delta.union_boxes(boxes, parent)
    return DatasetInfo(
        schema_version=SCHEMA_VERSION,
        task=source.task,
        source=SourceInfo(source.uri, source.kind, source.fingerprint, _labels(source)),
        classes=tuple(source.classes),
        image=image,
        compression=config.compression,
        splits=splits,
        rejected=len(totals.rejected),
        rejected_reasons=dict(collections.Counter(_reason_kind(r["reason"]) for r in totals.rejected)),
        converted=dict(totals.converted),
        ignored=dict(source.ignored),
        empty_classes=tuple(source.empty_classes),
        plan_key=plan.key,
        config=config.to_dict(),
        boxes=boxes,
        columns=extra_columns(source.items),
        parent=None if parent is None else delta.parent_info(parent),
    )


def finalize(config: ConvertConfig, output: str, *, plan: Plan | None = None) -> dict[str, Any]:
    """Checks every shard of the plan is written, then writes ``rejected.jsonl`` and ``dataset.json``.

    Returns:
        The content of ``dataset.json`` (:meth:`DatasetInfo.to_json`).

    Raises:
        ConvertError: a shard of the plan is missing (a worker did not finish).
    """
    return finalize_info(config, output, plan or make_plan(config)).to_json()


def finalize_info(config: ConvertConfig, output: str, plan: Plan) -> DatasetInfo:
    """:func:`finalize`, returning the written (or already up-to-date) info."""
    out = Output(output)
    existing = up_to_date(plan, out)
    if existing is not None:
        return existing
    sizes = out.sizes()
    markers = _markers(plan, out, output, sizes)
    totals = _Totals()
    for split, shards in plan.splits.items():
        totals.add_split(split, [markers[shard.file] for shard in shards], plan.source.classes)
    info = _dataset_info(plan, config, totals)
    rejected = totals.rejected
    if info.boxes is not None or plan.source.label_tool is not None:
        # One file for every rejection: images first, then dropped boxes, orphan annotations and a
        # labelling tool's rejected label entries, which name their annotation, file or line.
        rejected = rejected + totals.dropped + plan.source.rejected
    planned = {s.file for s in plan.shards}
    for name in sizes:  # shards of an earlier, different plan must not look like part of this one
        if SHARD_RE.match(name) and name not in planned:
            out.delete(name)
    # dataset.json is the folder's marker: written last, a folder without it is not a dataset.
    rejected_text = "".join(json.dumps(r) + "\n" for r in rejected)
    keys = delta.keys_text(((s.split, it) for s in plan.shards for it in s.items), totals.rejected)
    out.publish_marked({REJECTED_NAME: rejected_text, KEYS_NAME: keys}, MANIFEST_NAME, info.to_text())
    out.delete_tree(MARKERS)
    return info
