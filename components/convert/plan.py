"""The layout of a conversion, planned deterministically from the config and the scanned source.

:func:`make_plan` assigns every item to a split (:func:`assign_splits`), cuts each split into shards
of about ``target_shard_mb`` (:func:`shard_count`), and keys the plan by everything that changes the
bytes written: every part of a fan-out rebuilds the same plan and checks its key.
"""

from __future__ import annotations

import collections
import hashlib
import math
import operator
from dataclasses import dataclass, field

from components.convert import delta
from components.convert.config import ConvertConfig
from components.image_input import sources
from components.image_input.sources import ConvertError, Item, Source
from trainer.tasks import task_types
from trainer.tfrecords import SCHEMA_VERSION, shard_name

CONVERTER_VERSION = 3  # bump when the bytes written for the same input change


@dataclass
class ShardPlan:
    """One shard to write: its file name, split and items (in record order)."""

    index: int  # global index over all splits, what fan-out ranges refer to
    split: str
    file: str
    items: list[Item]


@dataclass
class Plan:
    """The deterministic layout of a conversion."""

    key: str
    source: Source
    splits: dict[str, list[ShardPlan]]
    shards: list[ShardPlan] = field(default_factory=list)
    parent: delta.Parent | None = None  # a delta's: its shards hold only what the parent lacks


# --------------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------------


def _unit(seed: int, key: str) -> float:
    """A stable uniform number in [0, 1) for a key: the same input lands in the same split."""
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def _pick(u: float, names: list[str], cumulative: list[float]) -> str:
    for name, edge in zip(names, cumulative, strict=True):
        if u < edge:
            return name
    return names[-1]


def assign_splits(
    items: list[Item],
    shares: dict[str, float],
    seed: int = 0,
    stratify: bool = False,
    hashed: dict[int, str] | None = None,
    given: set[str] | None = None,
) -> dict[str, list[Item]]:
    """Assigns every item to a split; each split's items come back in a stable shuffled order.

    Items whose source gives a split keep it. Items without one are hashed over ``shares``. When
    the source gives some splits but not all the configured ones (Fashion-MNIST has train and
    test files), the missing ones are carved out of ``train`` with their shares renormalised.

    Args:
        items: scanned items.
        shares: split name -> share (adds up to 1).
        seed: salt of the hash.
        stratify: assign per class, so that every split keeps the class balance exactly.
        hashed: item position -> the text hashed in place of its key (its image's sha256, to
            split by content: equal images get equal orders, so one split, stratified or not).
        given: the splits the whole source gives, when ``items`` are part of it (a delta's new
            items): the missing splits are carved out of ``train`` as for the whole source.

    Returns:
        split name -> items, ordered by hash (classes mixed across shards).
    """
    given = given if given is not None else {it.split for it in items if it.split is not None}
    missing = [s for s in shares if s not in given]
    carve = given and missing and "train" in given
    prefix, sha256 = f"{seed}:", hashlib.sha256
    for n, it in enumerate(items):  # _unit(seed, it.key), inlined: it runs once per item of the source
        text = it.key if hashed is None else hashed.get(n, it.key)
        it.order = int.from_bytes(sha256((prefix + text).encode()).digest()[:8], "big") / 2.0**64
    groups: dict[tuple[str, ...], list[Item]] = collections.defaultdict(list)
    out: dict[str, list[Item]] = collections.defaultdict(list)
    for it in items:
        if it.split is None:
            groups[tuple(shares)].append(it)
        elif carve and it.split == "train":
            groups[("train", *missing)].append(it)
        else:
            out[it.split].append(it)
    for names, members in groups.items():
        names = [n for n in names if shares.get(n, 0) > 0] or list(names)
        weights = [shares.get(n, 0.0) for n in names]
        total = sum(weights) or 1.0
        cumulative = list(_accumulate([w / total for w in weights]))
        if not stratify:
            for it in members:
                out[_pick(it.order, names, cumulative)].append(it)
            continue
        by_class: dict[int, list[Item]] = collections.defaultdict(list)
        for it in members:
            by_class[it.label].append(it)
        for cls_items in by_class.values():
            cls_items.sort(key=_ORDER)
            n, previous = len(cls_items), None
            for pos, it in enumerate(cls_items):  # exact proportions per class
                # an equal order is an equal image (split by content): it goes where its copy went
                same = previous is not None and previous[0] == it.order
                name = previous[1] if same else _pick((pos + 0.5) / n, names, cumulative)
                out[name].append(it)
                previous = (it.order, name)
    for members in out.values():
        members.sort(key=_ORDER)
    return dict(out)


_ORDER = operator.attrgetter("order", "key")


def _accumulate(values: list[float]) -> list[float]:
    total, out = 0.0, []
    for v in values:
        total += v
        out.append(total)
    out[-1] = 1.0
    return out


# --------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------


def items_bytes(items: list[Item], config: ConvertConfig) -> int:
    """The records' estimated bytes."""
    if config.resize is not None:  # re-encoded at the new size: a rough JPEG/PNG estimate
        h, w = config.resize
        return (int(h * w * 3 * 0.3) + 200) * len(items)
    return sum(map(_SIZE, items)) + 200 * len(items)  # record overhead: keys, label, sha256...


_SIZE = operator.attrgetter("size")


def shard_count(total_bytes: int, items: int, target_mb: float, power_of_two: bool) -> int:
    """Shards for a split: toward ``target_mb`` each, optionally a power of two, never empty."""
    if items == 0:
        return 0
    n = max(1, math.ceil(total_bytes / (target_mb * 1e6)))
    if power_of_two:
        n = 1 << (n - 1).bit_length()
    return min(n, items)


def open_config_source(config: ConvertConfig, parent: delta.Parent | None = None) -> Source:
    """Scans the configured source (systemic problems raise ConvertError before any write); a delta
    takes its parent's classes, so that its labels index into the same names.
    """
    classes = list(config.classes) if getattr(config, "classes", None) else None
    if classes is None and parent is not None:
        classes = list(parent.info.classes)
    return sources.open_source(config.source, config.source_format, classes)


def _check_task(config: ConvertConfig, source: Source) -> None:
    """Refuses settings the source's task cannot take.

    Raises:
        ConvertError: a resize of a detection source.
    """
    if task_types()[source.task].records_boxes and config.resize is not None:
        raise ConvertError(
            f"convert.resize {list(config.resize)} with the {source.task} source {config.source}: resizing here "
            "would crop or pad the images away from their boxes; keep the images at their size (drop resize): the "
            f"{source.task} trainer letterboxes images and their boxes together"
        )


def content_hashes(source: Source, items: list[Item] | None = None) -> dict[int, str]:
    """The sha256 of each image file whose split is not given, by position in ``items`` (the
    source's by default): split by content. A delta reads only its new items' files.

    Raises:
        ConvertError: the source's images are arrays, not files (split them by path).
    """
    import concurrent.futures

    from trainer import storage

    items = source.items if items is None else items
    todo = [(n, it.ref) for n, it in enumerate(items) if it.split is None]
    if any(not isinstance(ref, str) for _, ref in todo):
        raise ConvertError(
            f"convert.split_by=content needs a source of image files (folder, CSV/JSONL manifest, COCO); "
            f"{source.uri} ({source.kind}) holds arrays: leave split_by at path"
        )

    def digest(ref: str) -> str:
        return hashlib.sha256(storage.read_bytes(ref)).hexdigest()

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool_:
        return dict(zip([n for n, _ in todo], pool_.map(digest, [ref for _, ref in todo]), strict=True))


def make_plan(config: ConvertConfig, source: Source | None = None) -> Plan:
    """Lays out splits and shards deterministically from the config and the scanned source.

    With ``config.parent``, only the items the parent chain lacks, split by their own hash (a
    stratified split would move items as the source grows).
    """
    parent = delta.load_parent(config)
    source = source or open_config_source(config, parent)
    items = source.items if parent is None else delta.new_items(source, parent)
    hashed = content_hashes(source, items) if config.split_by == "content" else None
    stratify = config.stratify and parent is None
    given = None if parent is None else {it.split for it in source.items if it.split is not None}
    by_split = assign_splits(items, dict(config.splits), config.seed, stratify, hashed, given)
    order = [s for s in config.splits if s in by_split] + sorted(s for s in by_split if s not in config.splits)
    # without a parent, the key of the datasets converted before parents existed
    settings = {k: v for k, v in config.to_dict().items() if k not in ("workers", "parent")}
    parts = [CONVERTER_VERSION, SCHEMA_VERSION, source.kind, source.fingerprint, settings]
    key = sources.fingerprint(parts + ([parent.uri, parent.info.plan_key] if parent else []))[:32]
    _check_task(config, source)
    plan = Plan(key, source, {}, parent=parent)
    index = 0
    for split in order + [s for s in config.splits if s not in by_split]:
        items = by_split.get(split, [])
        limit = delta.split_limit(config.limit_per_split, parent, split)
        if limit is not None:
            items = items[:limit]
        total = items_bytes(items, config)
        n = shard_count(total, len(items), config.target_shard_mb, config.power_of_two_shards)
        shards = []
        for i in range(n):
            lo, hi = len(items) * i // n, len(items) * (i + 1) // n
            shards.append(ShardPlan(index, split, shard_name(split, i, n, config.compression), items[lo:hi]))
            index += 1
        plan.splits[split] = shards
        plan.shards.extend(shards)
    return plan
