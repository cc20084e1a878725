"""Scoring one shard of a batch prediction: its items read, scored by ``trainer.batch_predict``, its
predictions written whole, then its summary (``shard-NNNNN.json``). A shard already done for the
plan is not scored again; a shard's own failure is a ``failed`` summary, never an error.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Optional

from components.batch_predict.inputs import DATASET, items_from_text
from components.batch_predict.plan import BatchPlan, ShardSpec, read_manifest
from components.batch_predict.run import ITEMS, LISTED_FAILURES, MANIFEST, PredictError, shard_name
from components.image_input import sources
from components.image_input.sources import PredictItem
from components.serving.pinned import ModelRef
from trainer import records, storage
from trainer.budget import pricing
from trainer.budget.layout import process_started_at
from trainer.tasks import get_task
from trainer.tasks.base import Prediction, prediction_of


@dataclasses.dataclass(frozen=True)
class ShardResult(records.Record):
    """``shard-NNNNN.json``: what one shard did (the join's row).

    Attributes:
        plan_id: the plan it belongs to.
        index: the shard.
        status: ``ok`` or ``failed`` (then ``reason``).
        images: images in the shard.
        scored: images scored (a prediction each).
        failed_images: images that could not be read or decoded.
        failures: ``{"path", "reason"}`` of the first :data:`LISTED_FAILURES` of them.
        seconds: scoring wall time (reading, decoding and the model; start-up excluded).
        billed_s: the step's wall time from its process start (TensorFlow's import included).
        images_per_sec: scored images over ``seconds``.
        price_key, price_per_hour, cost: what the shard cost at the table's price.
        class_counts: predicted class -> count.
        truths: scored images that had a label.
        class_names: the model's classes (the join scores labels against them).
        reason: why a failed shard failed.
        finished_at: when, ISO 8601 in UTC.
    """

    _what = "batch prediction shard result"
    _mode = records.FORWARD_COMPATIBLE
    _omit_empty = ("reason",)

    plan_id: str
    index: int
    status: str
    images: int
    scored: int = 0
    failed_images: int = 0
    failures: tuple[dict[str, str], ...] = ()
    seconds: float = 0.0
    billed_s: float = 0.0
    images_per_sec: float = 0.0
    price_key: str = ""
    price_per_hour: float = 0.0
    cost: float = 0.0
    class_counts: dict[str, int] = dataclasses.field(default_factory=dict)
    truths: int = 0
    class_names: tuple[str, ...] = ()
    reason: str = ""
    finished_at: str = ""
    extra: dict[str, Any] = records.extra_field()


def read_shard_result(output_uri: str, index: int) -> Optional[ShardResult]:
    """A shard's summary, or None when it has none (not run, killed, or unreadable)."""
    try:
        data = storage.read_json(storage.join(output_uri, shard_name(index) + ".json"))
        return None if data is None else ShardResult.from_dict(data)
    except ValueError:
        return None  # a half-readable summary counts as none: the shard is redone


def _dataset_reader(items: Sequence[PredictItem], facet: Prediction) -> tuple[Callable[[str], bytes], dict[str, Any]]:
    """``read_bytes`` for a converted dataset's records (by ``<file>#<n>``) and their labels by the same key."""
    from trainer import tfrecord_wire
    from trainer.batch_predict import record_features

    wanted: dict[str, set[int]] = {}
    for it in items:
        wanted.setdefault(it.uri, set()).add(int(it.record or 0))
    images: dict[str, bytes] = {}
    labels: dict[str, Any] = {}
    for uri, indexes in wanted.items():
        data = storage.read_bytes(uri)
        if uri.endswith(".gz"):
            data = gzip.decompress(data)
        for n, raw in enumerate(tfrecord_wire.iter_records(data)):
            if n in indexes:
                features = record_features(raw)
                images[f"{uri}#{n}"] = features["image/encoded"][0]
                labels[f"{uri}#{n}"] = facet.truth(features)
    return images.__getitem__, labels


def _reader(
    the_plan: BatchPlan, items: Sequence[PredictItem], facet: Prediction
) -> tuple[Callable[[str], bytes], dict[str, Any]]:
    """What reads the items' bytes, and the labels read with them: files through storage; a
    converted dataset's records here; other records (an array source's) by the source kind the
    listing names.
    """
    if the_plan.kind == DATASET:
        return _dataset_reader(items, facet)
    if all(it.record is None for it in items):
        return storage.read_bytes, {}
    return sources.kind(the_plan.kind).prediction_reader(the_plan.data), {}


def score_shard(
    output_uri: str,
    index: int,
    *,
    accelerator_type: str = "",
    accelerator_count: int = 0,
    price_table: Optional[str] = None,
    read_threads: int = 8,
    on_progress: Optional[Callable[..., None]] = None,
    started_at: Optional[float] = None,
) -> ShardResult:
    """Scores one shard of the plan under ``output_uri``; never raises for the shard's own failures.

    A shard already done for this plan is returned as it is (nothing scored again). Otherwise its
    predictions are written whole to ``shard-NNNNN.jsonl``, then its summary. An image that cannot
    be read or decoded is counted and named with its reason, and the others are scored; a shard
    that fails as a whole (the model does not load, say) writes a ``failed`` summary with the reason.

    Args:
        output_uri: the run's output location (its ``manifest.json`` is the plan).
        index: the shard.
        accelerator_type: the accelerator this pod requested (the price key); "" for none.
        accelerator_count: how many.
        price_table: a YAML price table over the defaults.
        read_threads: threads reading image bytes.
        on_progress: ``on_progress(done, total, **fields)`` as batches are scored.
        started_at: when the step's process started (``time.time()``); None reads it from ``/proc``.

    Raises:
        PredictError: no plan under ``output_uri``, or no such shard (nothing to record a row for).
    """
    the_plan = read_manifest(output_uri)
    if the_plan is None:
        raise PredictError(f"no {MANIFEST} under {output_uri}: plan the batch prediction first")
    spec = the_plan.shard(index)
    done = read_shard_result(output_uri, index)
    if done is not None and done.plan_id == the_plan.plan_id and done.status == "ok":
        return done
    started = process_started_at() if started_at is None else started_at
    try:
        key, price = pricing.price_of(accelerator_type, accelerator_count, price_table)
    except ValueError:
        key, price = the_plan.price_key, the_plan.price_per_hour
    try:
        result = _score(the_plan, spec, read_threads, on_progress, started, key, price)
    except Exception as err:  # noqa: BLE001 (a fan-out task turns its failure into a row)
        billed = time.time() - started
        result = ShardResult(
            plan_id=the_plan.plan_id, index=index, status="failed", images=spec.images,
            billed_s=billed, price_key=key, price_per_hour=price, cost=billed * price / 3600.0,
            reason=f"{type(err).__name__}: {err}", finished_at=_now(),
        )  # fmt: skip
    storage.write_json(storage.join(output_uri, shard_name(index) + ".json"), result.to_dict())
    return result


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _score(
    the_plan: BatchPlan,
    spec: ShardSpec,
    read_threads: int,
    on_progress: Optional[Callable[..., None]],
    started: float,
    key: str,
    price: float,
) -> ShardResult:
    from trainer.batch_predict import load_predictor, score_images

    text = storage.read_text(storage.join(the_plan.output_uri, ITEMS))
    items = items_from_text(text)[spec.start : spec.stop]
    task = get_task(the_plan.model.task)
    facet = prediction_of(task)
    read_bytes, truths = _reader(the_plan, items, facet)
    uris = _uris(items)

    settings = the_plan.settings
    predictor = load_predictor(the_plan.model.saved_model, task)
    if the_plan.model.serving_format is not None:
        predictor.input = _in_format(the_plan.model, predictor.input)
    scored = score_images(
        predictor,
        task,
        uris,
        batch_size=int(settings["batch_size"]),
        score_threshold=float(settings["score_threshold"]),
        top_k=int(settings["top_k"]),
        read_bytes=read_bytes,
        read_threads=read_threads,
        on_batch=on_progress,
    )
    counts: Counter[str] = Counter()
    lines = []
    labelled = 0
    for i, record in scored.records:
        it = items[i]
        truth = truths.get(uris[i], it.label)
        row = {"path": it.path, "image_id": it.image_id, **record, "model_version": the_plan.model.label}
        if truth is not None:
            row["label"] = truth
            labelled += 1
        counts.update(facet.predicted_classes(record))
        lines.append(json.dumps(row, separators=(",", ":")))
    predictions = storage.join(the_plan.output_uri, shard_name(spec.index) + ".jsonl")
    storage.write_text(predictions, "".join(f"{x}\n" for x in lines))
    failures = [{"path": items[i].path, "reason": reason} for i, reason in scored.failures]
    billed = time.time() - started
    return ShardResult(
        plan_id=the_plan.plan_id,
        index=spec.index,
        status="ok",
        images=spec.images,
        scored=len(scored.records),
        failed_images=len(failures),
        failures=tuple(failures[:LISTED_FAILURES]),
        seconds=scored.seconds,
        billed_s=billed,
        images_per_sec=scored.images_per_sec,
        price_key=key,
        price_per_hour=price,
        cost=billed * price / 3600.0,
        class_counts=dict(counts),
        truths=labelled,
        class_names=tuple(predictor.input.class_names),
        finished_at=_now(),
    )


def _in_format(model: ModelRef, loaded: Any) -> Any:
    """What a shard scores with, its model body run by the pinned portable format's runtime."""
    from components.serving.portable import tensor_function

    fmt, shape = model.serving_format, tuple(loaded.image_shape)
    function = tensor_function(fmt, model.model_uri, model.saved_model, model.task, loaded.class_names, shape)
    return dataclasses.replace(loaded, function=function, loaded=function.runner)


def _uris(items: Sequence[PredictItem]) -> list[str]:
    """What ``read_bytes`` is asked for each item: its file, or ``<file>#<n>`` for a record."""
    return [it.uri if it.record is None else f"{it.uri}#{it.record}" for it in items]
