"""Conversion of a source into sharded TFRecords: plan, write shards in parallel, finalize.

:func:`convert` does the whole job on one machine. The fan-out pipeline runs the same three parts on
many pods: :func:`plan_ranges` once, :func:`~components.convert.write.write_shards` per range of
shards, :func:`~components.convert.publish.finalize` once every range succeeded. Every part rebuilds
the same plan from the config (:mod:`components.convert.plan`: scanning is deterministic), and checks
the plan key, so the parts agree without passing the item list around.

Restart safety: a shard is written under a temporary name and published by a rename (or one
upload), then a small marker under ``_convert/`` records its checksum; a re-run skips shards whose
marker matches the plan. ``dataset.json`` is written last, and removed first when the plan changed
(:mod:`components.convert.markers`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from components.convert.config import ConvertConfig
from components.convert.markers import invalidate, up_to_date
from components.convert.plan import make_plan
from components.convert.publish import finalize_info
from components.convert.storage import Output
from components.convert.write import write_shards
from components.image_input import sources
from components.image_input.sources import ConvertError
from trainer import storage
from trainer.tfrecords import DatasetInfo


def plan_ranges(config: ConvertConfig, output: str, parts: int) -> dict[str, Any]:
    """Plans a fan-out: shard ranges for up to ``parts`` workers, and invalidates a stale dataset.

    Returns:
        ``{"plan_key", "num_shards", "ranges": [[start, stop], ...], "up_to_date"}``; on an
        up-to-date dataset the workers and finalize return at once.
    """
    _check_output(config, output)
    plan = make_plan(config)
    out = Output(output)
    if up_to_date(plan, out):
        n = len(plan.shards)
        return {"plan_key": plan.key, "num_shards": n, "ranges": [[0, n]], "up_to_date": True}
    sources.loader(plan.source.spec())  # a corrupt array file fails here, before any change
    invalidate(plan, out)
    n = len(plan.shards)
    parts = max(1, min(parts, n))  # at least one range: a ParallelFor over nothing helps no one
    ranges = [[n * i // parts, n * (i + 1) // parts] for i in range(parts)]
    return {"plan_key": plan.key, "num_shards": n, "ranges": ranges, "up_to_date": False}


def _empty_note(info: DatasetInfo) -> str:
    """``"; 2 empty class folders (cat, dog)"`` when a folder source had class folders without images."""
    empty = info.empty_classes
    return f"; {len(empty)} empty class folders ({', '.join(empty)})" if empty else ""


def own_records(info: DatasetInfo) -> int:
    """The records in the dataset's own shards (a delta's: not its parents')."""
    return sum(s.count for split in info.splits for s in info.own_shards(split))


def _delta_note(info: DatasetInfo, gone: int) -> str:
    """``"; a delta of <parent>: 180 records written, 1,617 reused (not read)"`` for a delta, else ""."""
    if info.parent is None:
        return ""
    kept = f"; {gone} items the source no longer lists stay in the parent" if gone else ""
    return (
        f"; a delta of {info.parent.uri}: {own_records(info):,} records written, {info.parent.records:,} reused "
        f"(not read){kept}"
    )


def _check_output(config: ConvertConfig, output: str) -> None:
    """Refuses a delta written into its own parent's folder."""
    from components.convert.delta import parent_uri

    parent, target = parent_uri(config), str(output)
    target = target if storage.is_gcs(target) else os.path.abspath(target)
    if parent is not None and parent.rstrip("/") == target.rstrip("/"):
        raise ConvertError(f"convert.parent {parent} is the output folder itself: write the delta to a new folder")


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
    _check_output(config, output)
    plan = make_plan(config)
    out = Output(output)
    existing = up_to_date(plan, out)
    if existing is not None:
        total = sum(s.count for s in existing.splits.values())
        log(f"convert: {output} is up to date ({total} images{_empty_note(existing)}{_delta_note(existing, 0)})")
        return existing.to_json()
    sources.loader(plan.source.spec())  # arrays read in the background: a corrupt file fails before any change
    invalidate(plan, out)
    stats = write_shards(config, output, plan=plan, progress_every_s=progress_every_s, log=log, on_progress=on_progress)
    info = finalize_info(config, output, plan)
    seconds = time.monotonic() - t0
    total = own_records(info)  # a delta's: the images it read and wrote (its closing note counts the union)
    log(
        f"convert: {total} images in {seconds:.1f}s ({total / max(seconds, 1e-9):.0f} img/s), "
        f"{info.rejected} rejected, {sum(info.converted.values())} converted, "
        f"{stats['skipped']} shards reused -> {output}"
        + _empty_note(info)
        + _delta_note(info, plan.parent.gone if plan.parent else 0)
    )
    return info.to_json()
