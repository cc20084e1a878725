"""Batch prediction's plan: the model pinned, the input listed, the shards cut and priced, written
as ``manifest.json`` (with ``items.jsonl``) before any shard asks for an accelerator. No TensorFlow
(but for a bare SavedModel, whose task nothing records).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from typing import Any, Optional

from components.batch_predict.config import PredictConfig
from components.batch_predict.inputs import items_text, list_input, shard_ranges
from components.batch_predict.run import ITEMS, MANIFEST, PredictError
from components.serving.pinned import ModelRef, PinError, pin_model, with_format
from trainer import records, storage
from trainer.budget import pricing
from trainer.export.serving import ServingFormatError
from trainer.tasks import Task, get_task
from trainer.tasks.base import prediction_of

# --------------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ShardSpec(records.Record):
    """One shard: items ``[start, stop)`` of ``items.jsonl``."""

    _what = "batch prediction shard"

    index: int
    start: int
    stop: int

    @property
    def images(self) -> int:
        """The images it scores."""
        return self.stop - self.start


@dataclasses.dataclass(frozen=True)
class BatchPlan(records.Record):
    """``manifest.json``: what is scored, with what, how, in which shards, and what it should cost.

    Attributes:
        plan_id: a hash of the input's fingerprint, the model's sha256, the settings and the
            shards: a shard summary of another plan is not this plan's result.
        output_uri: where everything is written.
        data: the input as given; ``kind`` what it is (``folder``, ``list``, ``coco``, ``dataset``).
        split: the split of a converted dataset.
        fingerprint: the input's (``inputs.Listing.fingerprint``).
        images: how many images the input lists.
        labelled: whether the input gives labels.
        model: the pinned model.
        settings: ``batch_size``, ``score_threshold``, ``top_k``, ``coco`` (resolved).
        shards: the shards.
        price_key, price_per_hour: what an image costs to score, from the price table.
        images_per_sec, rate_source: the rate of the estimate and where it came from; None: none known.
        estimate_s, estimate_cost: scoring time and cost of every shard (start-up excluded); None
            without a rate.
        planned_at: when, ISO 8601 in UTC.
    """

    _what = "batch prediction plan"
    _mode = records.FORWARD_COMPATIBLE
    _omit_empty = ("images_per_sec", "estimate_s", "estimate_cost")

    plan_id: str
    output_uri: str
    data: str
    kind: str
    split: str
    fingerprint: str
    images: int
    labelled: bool
    model: ModelRef
    settings: dict[str, Any]
    shards: tuple[ShardSpec, ...]
    price_key: str
    price_per_hour: float
    rate_source: str
    planned_at: str
    images_per_sec: Optional[float] = None
    estimate_s: Optional[float] = None
    estimate_cost: Optional[float] = None
    extra: dict[str, Any] = records.extra_field()

    def shard(self, index: int) -> ShardSpec:
        """The shard of that index.

        Raises:
            PredictError: no such shard in this plan.
        """
        if not 0 <= index < len(self.shards):
            raise PredictError(f"no shard {index} in the plan of {self.output_uri}: it has {len(self.shards)}")
        return self.shards[index]


def resolve_model(config: PredictConfig, pipeline_root: str = "") -> ModelRef:
    """The model the config names: a stage's current version, or a folder (``components/serving/pinned.py``).

    Raises:
        PredictError: no such model (the message names what is there).
    """
    try:
        model = pin_model(config.model_dir, config.stage, config.model_name, config.stages_root, pipeline_root)
        return with_format(model, config.serving_format)
    except (PinError, ServingFormatError) as err:
        raise PredictError(str(err)) from None


def resolve_settings(config: PredictConfig, task: Task) -> dict[str, Any]:
    """The scoring settings with the task's defaults filled in.

    Raises:
        TaskError: the task does no batch prediction (its facet is missing), or cannot do what is
            asked (COCO results of a classifier, say).
    """
    facet = prediction_of(task)
    coco = bool(getattr(task.step_options("prediction_options", config.prediction_options), "coco", False))
    facet.check(coco=coco)
    return {
        "batch_size": config.batch_size,
        "score_threshold": config.score_threshold,
        "top_k": config.top_k or facet.top_k,
        "coco": coco,
    }


def check_writable(output_uri: str) -> None:
    """Writes and deletes a probe file under ``output_uri``.

    Raises:
        PredictError: it cannot be written (the message says why).
    """
    probe = storage.join(output_uri, f".write-probe-{time.time_ns()}")
    try:
        storage.write_bytes(probe, b"")
        storage.delete(probe)
    except Exception as err:  # noqa: BLE001 (any storage error means the same to the user)
        raise PredictError(
            f"cannot write under {output_uri} ({type(err).__name__}: {err}); give an output_uri this step can write"
        ) from None


def _rate(config: PredictConfig, model: ModelRef, earlier: Optional[dict[str, Any]]) -> tuple[Optional[float], str]:
    """The estimate's images/s and where it came from (see ``PredictConfig.images_per_sec``)."""
    if config.images_per_sec is not None:
        return config.images_per_sec, "images_per_sec setting"
    if earlier and earlier.get("images_per_sec"):
        return float(earlier["images_per_sec"]), "an earlier run of this output"
    return None, "none known: pass images_per_sec (the inference benchmark's images/s) for an estimate"


def _plan_id(fingerprint: str, model: ModelRef, settings: dict[str, Any], shards: Sequence[ShardSpec]) -> str:
    text = json.dumps([fingerprint, model.sha256, settings, [s.to_dict() for s in shards]], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def plan(
    config: PredictConfig,
    *,
    accelerator_type: str = "",
    accelerator_count: int = 0,
    pipeline_root: str = "",
    now: Callable[[], str] = lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
) -> BatchPlan:
    """Lists the input, pins the model, cuts the shards, prices them and writes the manifest.

    Everything a user can get wrong is checked here, before any shard asks for an accelerator. An
    output location that holds this very plan already (same input, model, settings) is reused as
    it is, so its finished shards count; one that holds another plan is refused.

    Args:
        config: the batch prediction.
        accelerator_type: the accelerator each shard's pod requests (the price key); "" for none.
        accelerator_count: how many.
        pipeline_root: the pipeline root (the default stage store is under it).
        now: the time stamp (tests pass a fixed one).

    Returns:
        The plan (also in ``<output_uri>/manifest.json``).

    Raises:
        PredictError, SourceError (InputError), TaskError, PriceTableError: one line naming the problem and the fix.
    """
    model = resolve_model(config, pipeline_root)
    listing = list_input(config.data, config.split)
    settings = resolve_settings(config, get_task(model.task))
    check_writable(config.output_uri)
    ranges = shard_ranges(len(listing.items), config.images_per_shard)
    shards = tuple(ShardSpec(i, a, b) for i, (a, b) in enumerate(ranges))
    plan_id = _plan_id(listing.fingerprint, model, settings, shards)
    earlier = read_manifest(config.output_uri)
    if earlier is not None and earlier.plan_id == plan_id:
        return earlier
    if earlier is not None:
        raise PredictError(_other_plan(config.output_uri, earlier, listing.fingerprint, model))
    key, price = pricing.price_of(accelerator_type, accelerator_count, config.price_table)
    rate, source = _rate(config, model, None)
    estimate_s = len(listing.items) / rate if rate else None
    result = BatchPlan(
        plan_id=plan_id,
        output_uri=config.output_uri,
        data=config.data,
        kind=listing.kind,
        split=config.split,
        fingerprint=listing.fingerprint,
        images=len(listing.items),
        labelled=listing.labelled,
        model=model,
        settings=settings,
        shards=shards,
        price_key=key,
        price_per_hour=price,
        rate_source=source,
        planned_at=now(),
        images_per_sec=rate,
        estimate_s=estimate_s,
        estimate_cost=None if estimate_s is None else estimate_s * price / 3600.0,
    )
    # The items first, the manifest last: a manifest always has its items.
    storage.write_text(storage.join(config.output_uri, ITEMS), items_text(listing.items))
    storage.write_json(storage.join(config.output_uri, MANIFEST), result.to_dict())
    return result


def _other_plan(output_uri: str, earlier: BatchPlan, fingerprint: str, model: ModelRef) -> str:
    what = []
    if earlier.fingerprint != fingerprint:
        what.append(f"another input ({earlier.data}, {earlier.images} images)")
    if earlier.model.sha256 != model.sha256:
        what.append(f"another model ({earlier.model.label})")
    changed = " and ".join(what) or "other settings or shards"
    return (
        f"{output_uri} holds predictions of {changed}, planned {earlier.planned_at}; give a new output_uri, "
        "or delete that one to score again there"
    )


def read_manifest(output_uri: str) -> Optional[BatchPlan]:
    """The plan written under ``output_uri``, or None."""
    data = storage.read_json(storage.join(output_uri, MANIFEST))
    return None if data is None else BatchPlan.from_dict(data)


def describe_plan(p: BatchPlan) -> list[str]:
    """The plan for people: the shards and the cost estimate, printed before anything runs."""
    sizes = sorted({s.images for s in p.shards})
    each = f"{sizes[0]:,}" if len(sizes) == 1 else f"{sizes[0]:,}-{sizes[-1]:,}"
    lines = [
        f"batch prediction: {p.images:,} images ({p.kind} {p.data}) with {p.model.label} ({p.model.task})",
        f"shards: {len(p.shards)} of {each} images, under {p.output_uri}",
    ]
    if p.estimate_s is None:
        lines.append(f"estimate: {p.price_key} at ${p.price_per_hour:.2f}/h; rate {p.rate_source}")
    else:
        lines.append(
            f"estimate: {p.images:,} images at {p.images_per_sec:,.0f} images/s ({p.rate_source}) = "
            f"{p.estimate_s:,.0f} s of {p.price_key} at ${p.price_per_hour:.2f}/h = ${p.estimate_cost:,.4f}, "
            "each shard's start-up on top"
        )
    return lines
