"""Conversion of a source into sharded TFRecords: plan, write shards in parallel, finalize.

:func:`convert` does the whole job on one machine. The fan-out pipeline runs the same three parts on
many pods: :func:`plan_ranges` once, :func:`write_shards` per range of shards, :func:`finalize` once
every range succeeded. Every part rebuilds the same plan from the config (scanning is
deterministic), and checks the plan key, so the parts agree without passing the item list around.

Restart safety: a shard is written under a temporary name and published by a rename (or one
upload), then a small marker under ``_convert/`` records its checksum; a re-run skips shards whose
marker matches the plan. ``dataset.json`` is written last, and removed first when the plan changed.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import math
import operator
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from components.convert import pool, sources, worker
from components.convert.sources import ConvertError, Item, Source
from components.convert.storage import Output
from trainer.config import ConvertConfig
from trainer.tasks import task_types
from trainer.tfrecord_wire import crc32c_b64, crc32c_combine
from trainer.tfrecords import (
    MANIFEST_NAME,
    REJECTED_NAME,
    SCHEMA_VERSION,
    BoxStats,
    DatasetError,
    DatasetInfo,
    ImageShape,
    ShardInfo,
    SourceInfo,
    SplitInfo,
    shard_name,
)

CONVERTER_VERSION = 3  # bump when the bytes written for the same input change
MARKERS = "_convert"
CHUNK_BYTES = 4 << 20  # a worker's unit of work: small enough to keep memory bounded
# Jobs estimated to take less than this in one process run in it when ``workers`` is not set:
# starting two workers costs ~20 ms, more than a second core wins back (measured: 200 photos 16 ms in
# one process, 22 ms with two; 500 photos 54 ms and 42 ms).
IN_PROCESS_S = 0.03
SHARD_RE = re.compile(r"^[\w.-]+-\d{5}-of-\d{5}\.tfrecord(\.gz)?$")


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

    Returns:
        split name -> items, ordered by hash (classes mixed across shards).
    """
    given = {it.split for it in items if it.split is not None}
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


def _items_bytes(items: list[Item], config: ConvertConfig) -> int:
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


def open_config_source(config: ConvertConfig) -> Source:
    """Scans the configured source (systemic problems raise ConvertError before any write)."""
    classes = list(config.classes) if getattr(config, "classes", None) else None
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


def content_hashes(source: Source) -> dict[int, str]:
    """The sha256 of each image file whose split is not given, by item position (split by content).

    Raises:
        ConvertError: the source's images are arrays, not files (split them by path).
    """
    import concurrent.futures

    from trainer import storage

    todo = [(n, it.ref) for n, it in enumerate(source.items) if it.split is None]
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
    """Lays out splits and shards deterministically from the config and the scanned source."""
    source = source or open_config_source(config)
    hashed = content_hashes(source) if config.split_by == "content" else None
    by_split = assign_splits(source.items, dict(config.splits), config.seed, config.stratify, hashed)
    order = [s for s in config.splits if s in by_split] + sorted(s for s in by_split if s not in config.splits)
    settings = {k: v for k, v in config.to_dict().items() if k != "workers"}
    key = sources.fingerprint([CONVERTER_VERSION, SCHEMA_VERSION, source.kind, source.fingerprint, settings])[:32]
    _check_task(config, source)
    plan = Plan(key, source, {})
    index = 0
    for split in order + [s for s in config.splits if s not in by_split]:
        items = by_split.get(split, [])
        if config.limit_per_split is not None:
            items = items[: config.limit_per_split]
        total = _items_bytes(items, config)
        n = shard_count(total, len(items), config.target_shard_mb, config.power_of_two_shards)
        shards = []
        for i in range(n):
            lo, hi = len(items) * i // n, len(items) * (i + 1) // n
            shards.append(ShardPlan(index, split, shard_name(split, i, n, config.compression), items[lo:hi]))
            index += 1
        plan.splits[split] = shards
        plan.shards.extend(shards)
    return plan


def plan_ranges(config: ConvertConfig, output: str, parts: int) -> dict[str, Any]:
    """Plans a fan-out: shard ranges for up to ``parts`` workers, and invalidates a stale dataset.

    Returns:
        ``{"plan_key", "num_shards", "ranges": [[start, stop], ...], "up_to_date"}``; on an
        up-to-date dataset the workers and finalize return at once.
    """
    plan = make_plan(config)
    out = Output(output)
    if _up_to_date(plan, out):
        n = len(plan.shards)
        return {"plan_key": plan.key, "num_shards": n, "ranges": [[0, n]], "up_to_date": True}
    sources.loader(plan.source.spec())  # a corrupt array file fails here, before any change
    _invalidate(plan, out)
    n = len(plan.shards)
    parts = max(1, min(parts, n))  # at least one range: a ParallelFor over nothing helps no one
    ranges = [[n * i // parts, n * (i + 1) // parts] for i in range(parts)]
    return {"plan_key": plan.key, "num_shards": n, "ranges": ranges, "up_to_date": False}


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


class Progress:
    """A progress line (done/total, images/s, ETA) every ``every_s`` seconds; a bar on a terminal."""

    def __init__(
        self,
        total: int,
        every_s: float,
        log: Callable[[str], None],
        on_progress: Callable[[int, int], None] | None = None,
    ):
        self.total, self.every_s, self.log, self.on_progress = total, every_s, log, on_progress
        self.done = 0
        self.start = self.last = time.monotonic()
        self.tty = log is print and sys.stdout.isatty()

    def line(self) -> str:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        rate = self.done / elapsed
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        pct = 100.0 * self.done / max(self.total, 1)
        bar = ""
        if self.tty:
            filled = int(pct / 5)
            bar = "[" + "#" * filled + "." * (20 - filled) + "] "
        eta_s = f"{eta:.0f}s" if math.isfinite(eta) else "?"
        return f"convert: {bar}{self.done}/{self.total} images ({pct:.0f}%), {rate:.0f} img/s, ETA {eta_s}"

    def add(self, n: int) -> None:
        self.done += n
        if self.on_progress is not None:
            self.on_progress(self.done, self.total)
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            if self.tty:
                sys.stdout.write("\r" + self.line())
                sys.stdout.flush()
            else:
                self.log(self.line())

    def finish(self) -> None:
        if self.tty:
            sys.stdout.write("\r" + self.line() + "\n")
        else:
            self.log(self.line())


def _marker_name(shard: ShardPlan) -> str:
    return f"{MARKERS}/{shard.file}.json"


def _valid_marker(plan: Plan, out: Output, shard: ShardPlan, sizes: dict[str, int]) -> dict | None:
    marker = out.read_json(_marker_name(shard))
    if marker and marker.get("plan_key") == plan.key and sizes.get(shard.file) == marker.get("bytes"):
        return marker
    return None


def _chunks(shard: ShardPlan, config: ConvertConfig, cap: int) -> list[list[Item]]:
    items = shard.items
    if not items:
        return [[]]
    avg = max(1, _items_bytes(items, config) // len(items))
    size = max(1, min(cap, CHUNK_BYTES // avg))
    return [items[i : i + size] for i in range(0, len(items), size)]


def _serial_seconds(shards: list[ShardPlan], config: ConvertConfig) -> float:
    """A rough estimate of the job's time in one process (measured on a 2-core VM, 2026)."""
    per_item = 3e-3 if config.resize is not None else 60e-6  # decode+resize / header check or PNG
    return sum(len(s.items) * per_item + sum(map(_SIZE, s.items)) / 1e9 for s in shards)


def _nothing_written(owned: list[ShardPlan]) -> dict[str, Any]:
    return {"written": 0, "skipped": len(owned), "images": 0, "rejected": 0, "seconds": 0.0}


def _worker_count(todo: list[ShardPlan], config: ConvertConfig) -> int:
    """``config.workers``, else every core, except for jobs too small to be worth starting workers."""
    if config.workers is None and _serial_seconds(todo, config) < IN_PROCESS_S:
        return 1
    return config.workers or os.cpu_count() or 1


def write_shards(
    config: ConvertConfig,
    output: str,
    start: int = 0,
    stop: int | None = None,
    *,
    plan: Plan | None = None,
    progress_every_s: float = 10.0,
    log: Callable[[str], None] = print,
    on_progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Writes the shards with global indices ``[start, stop)`` of the plan, skipping finished ones.

    Args:
        config: the convert config (the same for every part of a fan-out).
        output: the dataset folder, local or gs://.
        start: first shard index.
        stop: one past the last shard index; None for all.
        plan: a plan already made from ``config`` (saves a scan).
        progress_every_s: seconds between progress lines.
        log: where progress lines go.
        on_progress: called with (images done, images in total) as chunks are written.

    Returns:
        ``{"written": n, "skipped": n, "images": n, "rejected": n, "seconds": s}``.
    """
    t0 = time.monotonic()
    plan = plan or make_plan(config)
    out = Output(output)
    owned = plan.shards[start:stop]
    if _up_to_date(plan, out) is not None:  # finalized already (a re-run of a fan-out)
        return _nothing_written(owned)
    sizes = out.sizes()
    todo = [s for s in owned if _valid_marker(plan, out, s, sizes) is None]
    if not todo:
        return _nothing_written(owned)
    opts = worker.Options(
        spec=plan.source.spec(),
        classes=plan.source.classes,
        compression=config.compression,
        resize=tuple(config.resize) if config.resize else None,
        resize_mode=config.resize_mode,
    )
    sources.loader(opts.spec)  # arrays are loaded (and checked) before anything is written
    out.makedirs()
    out.remove_temporaries([s.file for s in todo])
    total_items = sum(len(s.items) for s in todo)
    workers = _worker_count(todo, config)
    # Many chunks: when the last ones run, the other workers have little left to wait for.
    cap = max(16, math.ceil(total_items / (16 * workers)))
    tasks = [(shard, chunk) for shard in todo for chunk in _chunks(shard, config, cap)]
    progress = Progress(total_items, progress_every_s, log, on_progress)
    log(
        f"convert: writing {len(todo)} shards ({total_items} images) of {len(owned)} with {workers} workers"
        + (f"; {len(owned) - len(todo)} already done" if len(owned) > len(todo) else "")
    )
    collector = _Collector(plan, out, tasks, progress)
    _run_tasks(collector, opts, workers)
    progress.finish()
    return {
        "written": len(todo),
        "skipped": len(owned) - len(todo),
        "images": collector.images,
        "rejected": collector.rejected,
        "seconds": time.monotonic() - t0,
    }


def _run_tasks(collector: _Collector, opts: worker.Options, workers: int) -> None:
    """Encodes every task, in this process or in worker processes, into the collector's shards."""
    tasks, temps = collector.tasks, collector.temps
    try:
        if workers == 1 or len(tasks) == 1:
            collector.collect((worker.encode_chunk(chunk, opts) for _, chunk in tasks), in_place=False)
            return
        firsts: dict[str, int] = {}
        for i, (shard, _) in enumerate(tasks):
            firsts.setdefault(shard.file, i)
        results = pool.run(
            [chunk for _, chunk in tasks],
            [temps[shard.file] for shard, _ in tasks],
            [firsts[shard.file] for shard, _ in tasks],
            opts,
            min(workers, len(tasks)),
        )
        with contextlib.closing(results):  # on any error the workers are stopped before the cleanup below
            collector.collect(results, in_place=True)
    finally:
        for tmp in temps.values():  # unpublished leftovers of a failure
            if os.path.exists(tmp):
                os.remove(tmp)
        collector.out.close()


@dataclass
class _ShardTotals:
    """What the chunks of one shard add up to, for its marker."""

    crc: int = 0
    bytes: int = 0
    count: int = 0
    classes: collections.Counter = field(default_factory=collections.Counter)
    rejected: list = field(default_factory=list)
    converted: collections.Counter = field(default_factory=collections.Counter)
    shapes: set = field(default_factory=set)
    boxes: collections.Counter = field(default_factory=collections.Counter)
    dropped: list = field(default_factory=list)

    def add(self, res: worker.ChunkResult) -> None:
        self.crc = crc32c_combine(self.crc, res.crc, res.size)
        self.bytes += res.size
        self.count += res.count
        self.classes.update(res.class_counts)
        self.rejected.extend(res.rejected)
        self.converted.update(res.converted)
        self.shapes.update(res.shapes)
        self.boxes.update(res.boxes)
        self.dropped.extend(res.dropped)

    def marker(self, plan: Plan, shard: ShardPlan) -> dict[str, Any]:
        """The shard's ``_convert/`` marker: what finalize needs without reading the shard again."""
        shapes = self.shapes
        return {
            "plan_key": plan.key,
            "file": shard.file,
            "split": shard.split,
            "count": self.count,
            "bytes": self.bytes,
            "crc32c": crc32c_b64(self.crc),
            "class_counts": {str(k): v for k, v in self.classes.items()},
            "rejected": self.rejected,
            "converted": dict(self.converted),
            "shapes": "mixed" if "mixed" in shapes or len(shapes) > 1 else [list(s) for s in shapes],
            "boxes": dict(self.boxes),  # detection sources; empty for the others
            "dropped": self.dropped,
        }


class _Collector:
    """Collects the chunks' results in order; publishes each shard when its last chunk is in."""

    def __init__(self, plan: Plan, out: Output, tasks: list[tuple[ShardPlan, list[Item]]], progress: Progress):
        self.plan, self.out, self.tasks, self.progress = plan, out, tasks, progress
        self.temps = {shard.file: out.temp_path(shard.file) for shard, _ in tasks}
        self.remaining = collections.Counter(id(shard) for shard, _ in tasks)
        self.to_publish: list[tuple[str, str, dict]] = []
        self.images = self.rejected = 0

    def _flush(self, force: bool) -> None:
        if self.to_publish and (force or len(self.to_publish) >= 8 or not self.out.gcs):
            self.out.publish([(t, n) for t, n, _ in self.to_publish])
            for _, _, marker in self.to_publish:
                self.out.write_text(f"{MARKERS}/{marker['file']}.json", json.dumps(marker))
            self.to_publish.clear()

    def collect(self, results: Any, in_place: bool) -> None:
        """Adds every result to its shard. With ``in_place`` the workers wrote the bytes; else they are written here."""
        current: ShardPlan | None = None
        f = None
        totals = _ShardTotals()
        try:
            for (shard, _), res in zip(self.tasks, results, strict=False):
                if shard is not current:
                    current, totals = shard, _ShardTotals()
                    if not in_place:
                        f = open(self.temps[shard.file], "wb")
                if not in_place:
                    res.write_to(f)
                totals.add(res)
                self.images += res.count
                self.rejected += len(res.rejected)
                self.progress.add(res.count + len(res.rejected))
                self.remaining[id(shard)] -= 1
                if self.remaining[id(shard)] == 0:
                    if f is not None:
                        f.close()
                        f = None
                    self.to_publish.append((self.temps[shard.file], shard.file, totals.marker(self.plan, shard)))
                    self._flush(False)
        finally:
            if f is not None:
                f.close()
        self._flush(True)


# --------------------------------------------------------------------------------------------
# Finalizing
# --------------------------------------------------------------------------------------------


def _reason_kind(reason: str) -> str:
    return reason.split(":", 1)[0]


def _markers(plan: Plan, out: Output, output: str, sizes: dict[str, int]) -> dict[str, dict]:
    """Every shard's valid marker.

    Raises:
        ConvertError: a shard of the plan is missing (a worker did not finish).
    """
    markers = {shard.file: _valid_marker(plan, out, shard, sizes) for shard in plan.shards}
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
            orphan_annotations=len(orphans),
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


def _dataset_info(plan: Plan, config: ConvertConfig, totals: _Totals) -> DatasetInfo:
    source = plan.source
    with_boxes = task_types()[source.task].records_boxes
    return DatasetInfo(
        schema_version=SCHEMA_VERSION,
        task=source.task,
        source=SourceInfo(source.uri, source.kind, source.fingerprint),
        classes=tuple(source.classes),
        image=totals.image(),
        compression=config.compression,
        splits=totals.splits,
        rejected=len(totals.rejected),
        rejected_reasons=dict(collections.Counter(_reason_kind(r["reason"]) for r in totals.rejected)),
        converted=dict(totals.converted),
        ignored=dict(source.ignored),
        empty_classes=tuple(source.empty_classes),
        plan_key=plan.key,
        config=config.to_dict(),
        boxes=totals.box_stats(source.rejected) if with_boxes else None,
        columns=extra_columns(source.items),
    )


def finalize(config: ConvertConfig, output: str, *, plan: Plan | None = None) -> dict[str, Any]:
    """Checks every shard of the plan is written, then writes ``rejected.jsonl`` and ``dataset.json``.

    Returns:
        The content of ``dataset.json`` (:meth:`DatasetInfo.to_json`).

    Raises:
        ConvertError: a shard of the plan is missing (a worker did not finish).
    """
    return _finalize(config, output, plan or make_plan(config)).to_json()


def _finalize(config: ConvertConfig, output: str, plan: Plan) -> DatasetInfo:
    """:func:`finalize`, returning the written (or already up-to-date) info."""
    out = Output(output)
    existing = _up_to_date(plan, out)
    if existing is not None:
        return existing
    sizes = out.sizes()
    markers = _markers(plan, out, output, sizes)
    totals = _Totals()
    for split, shards in plan.splits.items():
        totals.add_split(split, [markers[shard.file] for shard in shards], plan.source.classes)
    info = _dataset_info(plan, config, totals)
    rejected = totals.rejected
    if info.boxes is not None:
        # One file for every rejection: images first, then dropped boxes and orphan annotations,
        # which carry an ``annotation_id`` (their image, if any, was kept).
        rejected = rejected + totals.dropped + plan.source.rejected
    planned = {s.file for s in plan.shards}
    for name in sizes:  # shards of an earlier, different plan must not look like part of this one
        if SHARD_RE.match(name) and name not in planned:
            out.delete(name)
    # dataset.json is the folder's marker: written last, a folder without it is not a dataset.
    rejected_text = "".join(json.dumps(r) + "\n" for r in rejected)
    out.publish_marked({REJECTED_NAME: rejected_text}, MANIFEST_NAME, info.to_text())
    out.delete_tree(MARKERS)
    return info


def _up_to_date(plan: Plan, out: Output) -> DatasetInfo | None:
    """The existing ``dataset.json`` when it is of this plan and every shard has its size; else None.

    A file that is not a valid :class:`DatasetInfo` (written by another version) is not up to date.
    """
    manifest = out.read_json(MANIFEST_NAME)
    if not manifest or manifest.get("plan_key") != plan.key:
        return None
    # Written before the task was recorded: the file stays as it is (no reconversion for a key that
    # only names what the plan already fixes: every such dataset of a detection source was planned by
    # an older COCO reader and is not up to date), and what is returned says it.
    manifest.setdefault("task", plan.source.task)
    try:
        info = DatasetInfo.from_json(manifest, out.join(MANIFEST_NAME))
    except DatasetError:
        return None
    sizes = out.sizes()
    for split in info.splits.values():
        for s in split.shards:
            if sizes.get(s.file) != s.bytes:
                return None
    return info


def _invalidate(plan: Plan, out: Output) -> None:
    """An existing dataset.json of another plan goes before any shard is overwritten."""
    manifest = out.read_json(MANIFEST_NAME)
    if manifest is not None and manifest.get("plan_key") != plan.key:
        out.delete(MANIFEST_NAME)


def _empty_note(info: DatasetInfo) -> str:
    """``"; 2 empty class folders (cat, dog)"`` when a folder source had class folders without images."""
    empty = info.empty_classes
    return f"; {len(empty)} empty class folders ({', '.join(empty)})" if empty else ""


def convert(
    config: ConvertConfig,
    output: str,
    *,
    progress_every_s: float = 10.0,
    log: Callable[[str], None] = print,
    on_progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Converts ``config.source`` into a dataset folder at ``output`` (local path or gs:// URI).

    Scans the source (systemic problems fail here, before anything is written), assigns splits,
    writes the shards with ``config.workers`` processes, and writes ``dataset.json`` last. A re-run
    on unchanged input and config returns the existing manifest at once; a re-run after a kill
    reuses the shards that were finished.

    Args:
        config: the convert section of the config.
        output: the dataset folder.
        progress_every_s: seconds between progress lines.
        log: where progress lines go.
        on_progress: called with (images done, images in total) as the shards are written.

    Returns:
        The content of ``dataset.json``.

    Raises:
        ConvertError: the source is unusable (missing, empty, unknown format, bad manifest or labels).
    """
    t0 = time.monotonic()
    plan = make_plan(config)
    out = Output(output)
    existing = _up_to_date(plan, out)
    if existing is not None:
        total = sum(s.count for s in existing.splits.values())
        log(f"convert: {output} is up to date ({total} images{_empty_note(existing)})")
        return existing.to_json()
    sources.loader(plan.source.spec())  # arrays read in the background: a corrupt file fails before any change
    _invalidate(plan, out)
    stats = write_shards(config, output, plan=plan, progress_every_s=progress_every_s, log=log, on_progress=on_progress)
    info = _finalize(config, output, plan)
    seconds = time.monotonic() - t0
    total = sum(s.count for s in info.splits.values())
    log(
        f"convert: {total} images in {seconds:.1f}s ({total / max(seconds, 1e-9):.0f} img/s), "
        f"{info.rejected} rejected, {sum(info.converted.values())} converted, "
        f"{stats['skipped']} shards reused -> {output}" + _empty_note(info)
    )
    return info.to_json()
