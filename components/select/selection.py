"""The whole selection: the model pinned, the pool listed and scored, the labelled images left out,
the rest ranked and kept apart, the picks written (``run.py`` lists the files).
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Sequence
from typing import Optional

from components.select import picking, write
from components.select.config import SelectConfig
from components.select.pool import Pool, Scores, eligible, known_digests, list_pool, names, score_pool
from components.select.result import Pick, SelectionResult
from components.select.run import IMAGES, SelectError
from components.serving.pinned import ModelRef, PinError, pin_model
from trainer.tasks import get_task
from trainer.tasks.base import Task, prediction_of
from trainer.tasks.selection import RANDOM, Selection, Uncertainty, selection_of


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def prepare(config: SelectConfig, pipeline_root: str = "") -> tuple[ModelRef, Task, Selection, str]:
    """The model pinned, its task, the task's selection facet and the strategy resolved: everything a
    user can get wrong about them fails here, before an image is read.

    Raises:
        SelectError: no such model; TaskError: a task that cannot pick, a strategy or option it refuses.
    """
    try:
        model = pin_model(config.model_dir, config.stage, config.model_name, config.stages_root, pipeline_root)
    except PinError as err:
        raise SelectError(str(err)) from None
    task = get_task(model.task)
    prediction_of(task)
    facet = selection_of(task, config.selection_options)
    return model, task, facet, facet.check(config.strategy)


def select(
    config: SelectConfig,
    *,
    pipeline_root: str = "",
    on_progress: Optional[Callable[..., None]] = None,
    now: Callable[[], str] = _now,
) -> SelectionResult:
    """Picks ``config.count`` images of the pool worth labelling and writes them (``run.py``'s files).

    Args:
        config: the selection.
        pipeline_root: the pipeline's root (the default stage store is under it).
        on_progress: ``on_progress(done, total)`` as the pool is scored.
        now: the time stamp (tests pass a fixed one).

    Returns:
        What ``selection.json`` holds.

    Raises:
        SelectError, SourceError, TaskError, DatasetError: one line naming the problem and the fix.
    """
    started = time.perf_counter()
    model, task, facet, strategy = prepare(config, pipeline_root)
    scored_by = facet.strategies[0] if strategy == RANDOM else strategy
    pool = list_pool(config.data)
    known = known_digests(config.dataset) if config.dataset else frozenset()
    write.check_writable(config.output_uri)
    flip = facet.flips(scored_by)
    scores = score_pool(
        pool, model.saved_model, task, flip=flip, batch_size=config.batch_size,
        read_threads=config.read_threads, on_progress=on_progress,
    )  # fmt: skip
    candidates, labelled = eligible(scores, known, flip)
    flipped = [scores.flipped[i] for i in candidates] if flip else None
    records = [scores.records[i] for i in candidates]
    doubts = facet.uncertainty(records, flipped, strategy=scored_by, class_names=scores.class_names)
    picked, hashes = _pick(config, pool, candidates, doubts, random_order=strategy == RANDOM)
    chosen = [candidates[p] for p in picked.picks]
    picks, images = _picks(
        pool, scores, chosen, [doubts[p] for p in picked.picks], [hashes.get(p) for p in picked.picks], facet,
        config.seed if strategy == RANDOM else None,
    )  # fmt: skip
    result = SelectionResult(
        strategy=strategy, scored_by=scored_by, seed=config.seed, diversity=config.diversity,
        near_bits=config.near_bits, count=config.count, data=config.data, dataset=config.dataset, model=model,
        class_names=scores.class_names, pool=len(pool.items), scored=len(scores.records),
        unreadable=len(scores.failures), labelled=len(labelled), near_copies=len(picked.near_copies),
        picks=tuple(picks), files=write.FILES, seconds=0.0, selected_at=now(),
    )  # fmt: skip
    return write.write_selection(config.output_uri, result, images, seconds=time.perf_counter() - started)


def _pick(
    config: SelectConfig, pool: Pool, candidates: Sequence[int], doubts: Sequence[Uncertainty], *, random_order: bool
) -> tuple[picking.Picked, dict[int, int]]:
    """The candidates ranked and kept apart (positions into ``candidates``), and the hashes computed on the way."""
    order = picking.rank([d.score for d in doubts], random_order=random_order, seed=config.seed)
    hashes: dict[int, int] = {}

    def hash_of(position: int) -> int:
        if position not in hashes:
            hashes[position] = picking.perceptual_hash(pool.bytes_of(candidates[position]))
        return hashes[position]

    picked = picking.spread(order, hash_of, config.count, diversity=config.diversity, near_bits=config.near_bits)
    return picked, hashes


def _picks(
    pool: Pool,
    scores: Scores,
    indices: Sequence[int],
    doubts: Sequence[Uncertainty],
    hashes: Sequence[Optional[int]],
    facet: Selection,
    random_seed: Optional[int],
) -> tuple[list[Pick], list[bytes]]:
    """The picks as records (rank order) and their images' bytes."""
    images = [pool.bytes_of(i) for i in indices]
    looks = [_look(data) for data in images]
    files = names([pool.items[i].path for i in indices], [fmt for fmt, _, _ in looks])
    picks = []
    for rank, (index, doubt, h, (_, width, height), name) in enumerate(
        zip(indices, doubts, hashes, looks, files, strict=True), start=1
    ):
        proposal = facet.proposal(scores.records[index])
        reason = doubt.reason if random_seed is None else f"random pick (seed {random_seed}); {doubt.reason}"
        boxes = tuple(
            {"box": [b.xmin, b.ymin, b.xmax, b.ymax], "class": b.label, "score": b.score} for b in proposal.boxes
        )
        picks.append(
            Pick(
                rank=rank, path=pool.items[index].path, image=f"{IMAGES}/{name}", score=round(doubt.score, 6),
                reason=reason, sha256=scores.digests[index], width=width, height=height,
                phash="" if h is None else f"{h:016x}", label=proposal.label, label_score=proposal.label_score,
                boxes=boxes,
            )
        )  # fmt: skip
    return picks, images


def _look(data: bytes) -> tuple[str, int, int]:
    """``(format, width, height)`` of encoded image bytes (its header only)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            return (image.format or "").lower(), int(image.width), int(image.height)
    except Exception as err:  # noqa: BLE001 (the model decoded it: a header PIL cannot read is named)
        raise SelectError(f"a picked image cannot be opened to write it out: {type(err).__name__}: {err}") from err


def describe(result: SelectionResult) -> list[str]:
    """The selection in a few lines (the step's log, the command line)."""
    passed = f", {result.near_copies:,} near-copies passed over" if result.near_copies else ""
    labelled = f", {result.labelled:,} already in the dataset" if result.dataset else ""
    unreadable = f", {result.unreadable:,} unreadable" if result.unreadable else ""
    short = "" if len(result.picks) == result.count else f" (of {result.count:,} asked: the pool has no more)"
    return [
        f"select: {result.pool:,} images in {result.data}, {result.scored:,} scored with {result.model.label} "
        f"({result.model.task}){unreadable}{labelled}{passed}",
        f"picked {len(result.picks):,}{short} by {result.strategy}, diversity {result.diversity}, seed {result.seed} "
        f"in {result.seconds:,.1f} s",
    ]
