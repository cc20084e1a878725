"""Joining a batch prediction: what the shards wrote, added up (``summary.json``), the task's metrics
on the labelled images, the COCO results, and the shards that did not finish, named. It runs
whichever shards finished; no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Sequence
from typing import Any, Optional

from components.batch_predict.plan import BatchPlan, read_manifest
from components.batch_predict.run import COCO_IMAGES, COCO_RESULTS, MANIFEST, SUMMARY, PredictError, shard_name
from components.batch_predict.score import ShardResult, read_shard_result
from trainer import records, storage
from trainer.tasks import Task, get_task
from trainer.tasks.base import prediction_of


@dataclasses.dataclass(frozen=True)
class BatchSummary(records.Record):
    """``summary.json``: the whole batch prediction, from what the shards wrote.

    Attributes:
        plan_id, output_uri, model (its label), task: what was scored with what.
        complete: every shard finished ``ok``.
        shards, shards_ok: planned and finished shards.
        failed_shards: ``{"shard", "reason"}`` of each shard that failed or left no summary.
        images, scored, failed_images: images listed, scored and unreadable.
        seconds: the shards' scoring time, added up.
        images_per_sec: scored images over ``seconds`` (one shard's rate, on average).
        billed_s: the shards' billed time (start-up included), added up.
        cost: what the shards cost at the table's prices.
        images_per_dollar: scored images per dollar of ``cost``; None when free.
        class_counts: predicted class -> count, all shards.
        metrics: the task's metrics on the labelled images (empty without labels).
        estimate_cost: the plan's estimate, beside the actual cost.
    """

    _what = "batch prediction summary"
    _mode = records.FORWARD_COMPATIBLE
    _omit_empty = ("estimate_cost", "images_per_dollar")

    plan_id: str
    output_uri: str
    model: str
    task: str
    complete: bool
    shards: int
    shards_ok: int
    failed_shards: tuple[dict[str, Any], ...]
    images: int
    scored: int
    failed_images: int
    seconds: float
    images_per_sec: float
    billed_s: float
    cost: float
    class_counts: dict[str, int]
    metrics: dict[str, float]
    images_per_dollar: Optional[float] = None
    estimate_cost: Optional[float] = None
    extra: dict[str, Any] = records.extra_field()


def _read_predictions(output_uri: str, indexes: Sequence[int]) -> list[dict[str, Any]]:
    rows = []
    for i in indexes:
        text = storage.read_text(storage.join(output_uri, shard_name(i) + ".jsonl"))
        rows.extend(json.loads(line) for line in text.splitlines() if line.strip())
    return rows


@dataclasses.dataclass(frozen=True)
class Joined:
    """What the join read and made: the summary, the shards' results, the failed images."""

    summary: BatchSummary
    shards: list[ShardResult]
    failures: list[dict[str, Any]]


def join(output_uri: str) -> Joined:
    """Builds the summary (and the COCO results, the report) from what the shards wrote.

    It runs whichever shards finished: a shard that failed, or that left no summary (its pod
    was killed), is named in ``failed_shards`` with its reason, and the images of the others count.

    Returns:
        The summary (also ``summary.json``), the finished shards' results and the failed images
        (``{"shard", "path", "reason"}``).

    Raises:
        PredictError: no plan under ``output_uri`` (the planning step failed: its error says why).
    """
    the_plan = read_manifest(output_uri)
    if the_plan is None:
        raise PredictError(f"no {MANIFEST} under {output_uri}: the planning step did not finish (see its log)")
    task = get_task(the_plan.model.task)
    seen: list[ShardResult] = []
    failed_shards: list[dict[str, Any]] = []
    for spec in the_plan.shards:
        result = read_shard_result(output_uri, spec.index)
        if result is None or result.plan_id != the_plan.plan_id:
            failed_shards.append({"shard": shard_name(spec.index), "reason": "no result: its task did not finish"})
            continue
        seen.append(result)
        if result.status != "ok":
            failed_shards.append({"shard": shard_name(spec.index), "reason": result.reason})
    results = [r for r in seen if r.status == "ok"]
    ok = [r.index for r in results]
    needs_rows = bool(the_plan.settings.get("coco")) or the_plan.labelled
    rows = _read_predictions(output_uri, ok) if needs_rows else []
    class_names = next((r.class_names for r in results if r.class_names), ())
    metrics = _metrics(task, rows, class_names) if the_plan.labelled else {}
    if the_plan.settings.get("coco"):
        _write_coco(output_uri, task, rows, the_plan)
    counts: Counter[str] = Counter()
    for r in results:
        counts.update(r.class_counts)
    seconds = sum(r.seconds for r in results)
    scored = sum(r.scored for r in results)
    cost = sum(r.cost for r in results)
    summary = BatchSummary(
        plan_id=the_plan.plan_id,
        output_uri=output_uri,
        model=the_plan.model.label,
        task=task.name,
        complete=not failed_shards,
        shards=len(the_plan.shards),
        shards_ok=len(results),
        failed_shards=tuple(failed_shards),
        images=the_plan.images,
        scored=scored,
        failed_images=sum(r.failed_images for r in results),
        seconds=seconds,
        images_per_sec=scored / seconds if seconds > 0 else 0.0,
        billed_s=sum(r.billed_s for r in results),
        cost=cost,
        class_counts=dict(counts.most_common()),
        metrics=metrics,
        images_per_dollar=scored / cost if cost > 0 else None,
        estimate_cost=the_plan.estimate_cost,
    )
    storage.write_json(storage.join(output_uri, SUMMARY), summary.to_dict())
    failures = [{"shard": shard_name(r.index), **f} for r in results for f in r.failures]
    return Joined(summary, seen, failures)


def _metrics(task: Task, rows: Sequence[dict[str, Any]], class_names: Sequence[str]) -> dict[str, float]:
    labelled = [r for r in rows if "label" in r]
    if not labelled:
        return {}
    return prediction_of(task).metrics(labelled, [r["label"] for r in labelled], class_names)


def _category_ids(data: str) -> Optional[dict[str, int]]:
    """A COCO input's category name -> id (its results must use them), or None when it has none."""
    categories = (storage.read_json(data) or {}).get("categories") or []
    return {str(c["name"]): int(c["id"]) for c in categories if isinstance(c, dict)} or None


def _write_coco(output_uri: str, task: Task, rows: Sequence[dict[str, Any]], the_plan: BatchPlan) -> None:
    """``coco_results.json`` (pycocotools' ``loadRes`` format) and, for ids assigned here, the images."""
    ids = _category_ids(the_plan.data) if the_plan.kind == "coco" else None
    facet = prediction_of(task)
    results = [e for row in rows for e in facet.coco_results(row, int(row["image_id"]), category_ids=ids)]
    storage.write_json(storage.join(output_uri, COCO_RESULTS), results, indent=None)
    if the_plan.kind != "coco":  # the input's own COCO file lists its images; ids assigned here are listed
        images = [
            {"id": row["image_id"], "file_name": row["path"], "width": row.get("width"), "height": row.get("height")}
            for row in rows
        ]
        storage.write_json(storage.join(output_uri, COCO_IMAGES), {"images": images}, indent=None)
