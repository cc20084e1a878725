"""Writing a plan's shards: chunks of items encoded in this process or in worker processes.

A shard is written under a temporary name and published by a rename (or one upload), then a small
marker under ``_convert/`` records its checksum (:mod:`components.convert.markers`); a re-run skips
shards whose marker matches the plan.
"""

from __future__ import annotations

import collections
import contextlib
import json
import math
import operator
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from components.convert import pool, worker
from components.convert.config import ConvertConfig
from components.convert.markers import MARKERS, up_to_date, valid_marker
from components.convert.plan import Plan, ShardPlan, items_bytes, make_plan
from components.convert.storage import Output
from components.image_input import sources
from components.image_input.sources import Item
from trainer.tfrecord_wire import crc32c_b64, crc32c_combine

CHUNK_BYTES = 4 << 20  # a worker's unit of work: small enough to keep memory bounded
# Jobs estimated to take less than this in one process run in it when ``workers`` is not set:
# starting two workers costs ~20 ms, more than a second core wins back (measured: 200 photos 16 ms in
# one process, 22 ms with two; 500 photos 54 ms and 42 ms).
IN_PROCESS_S = 0.03

_SIZE = operator.attrgetter("size")


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


def _chunks(shard: ShardPlan, config: ConvertConfig, cap: int) -> list[list[Item]]:
    items = shard.items
    if not items:
        return [[]]
    avg = max(1, items_bytes(items, config) // len(items))
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
    if up_to_date(plan, out) is not None:  # finalized already (a re-run of a fan-out)
        return _nothing_written(owned)
    sizes = out.sizes()
    todo = [s for s in owned if valid_marker(plan, out, s, sizes) is None]
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
