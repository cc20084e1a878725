"""Batch prediction: plan the shards, score one shard, join what the shards wrote.

Everything lives under the run's ``output_uri`` (docs/batch_prediction.md)::

    manifest.json        the plan: the input's fingerprint, the pinned model, the settings, the shards
    items.jsonl          the images, in plan order (each shard reads its range)
    shard-NNNNN.jsonl    one prediction per scored image, written whole when the shard ends
    shard-NNNNN.json     the shard's summary (counts, failures and their reasons, time, cost), last
    summary.json, coco_results.json, coco_images.json, report.md, report.html   the join's

A shard whose summary says ``ok`` for this plan is done: a re-run skips it, so a killed shard is
the only one redone and a re-run on the same input and model redoes nothing. The plan refuses an
output location that holds another input's or model's predictions instead of mixing them.

Planning and the join import no TensorFlow; scoring a shard does (``trainer.batch_predict``).
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Optional

from components.batch_predict.config import PredictConfig
from components.batch_predict.inputs import InputError, Item, items_from_text, items_text, list_input, shard_ranges
from trainer import model_folder, records, storage
from trainer.budget import pricing
from trainer.budget.layout import process_started_at
from trainer.tasks import Task, TaskError, get_task, task_types

MANIFEST = "manifest.json"
ITEMS = "items.jsonl"
SUMMARY = "summary.json"
COCO_RESULTS = "coco_results.json"
COCO_IMAGES = "coco_images.json"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
READY_MARKER = "saved_model.pb"
# How many failed images a summary names one by one (all of them are counted).
LISTED_FAILURES = 1000


class PredictError(ValueError):
    """A batch prediction cannot start; the message names the problem and the fix."""


def shard_name(index: int) -> str:
    """``shard-NNNNN``: the base name of a shard's files."""
    return f"shard-{index:05d}"


# --------------------------------------------------------------------------------------------
# The model: a stage's version, pinned, or a folder
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ModelRef(records.Record):
    """The model a batch prediction scores with, pinned when the shards are planned.

    Attributes:
        saved_model: the SavedModel folder (a stage's version folder, or a model folder's export).
        sha256: its content hash (paths and bytes): what "the same model" means.
        task: the model's task.
        version: a stage's version number, else None.
        stage: the stage it was resolved at, else None.
        model_name: the served model name at that stage, else None.
        model_uri: the model folder it came from, where known.
    """

    _what = "batch prediction model"
    _omit_empty = ("version", "stage", "model_name", "model_uri")

    saved_model: str
    sha256: str
    task: str
    version: Optional[int] = None
    stage: Optional[str] = None
    model_name: Optional[str] = None
    model_uri: str = ""

    @property
    def label(self) -> str:
        """``staging/detector v3`` or ``sha256:1a2b3c4d5e6f``: the version each prediction names."""
        if self.stage:
            return f"{self.stage}/{self.model_name} v{self.version}"
        return f"sha256:{self.sha256[:12]}"


def _task_of_saved_model(saved_model: str) -> str:
    """The task whose serving outputs a bare SavedModel's ``serving_default`` has (no training.json)."""
    import tensorflow as tf  # only for a bare export, whose task nothing records

    outputs = set(tf.saved_model.load(saved_model).signatures["serving_default"].structured_outputs)
    for name, kind in task_types().items():
        if kind.serving.outputs and set(kind.serving.outputs) <= outputs:
            return name
    return get_task(None).name


def model_from_folder(model_dir: str) -> ModelRef:
    """A model folder (``saved_model/`` inside) or a SavedModel folder, identified by its sha256.

    Raises:
        PredictError: the folder holds no SavedModel.
    """
    inner = model_folder.saved_model_dir(model_dir)
    if storage.exists(storage.join(inner, READY_MARKER)):
        saved_model = inner
    elif storage.exists(storage.join(model_dir, READY_MARKER)):
        saved_model = model_dir
    else:
        raise PredictError(
            f"{model_dir} is not an exported model: no saved_model/{READY_MARKER} (a model folder the train step "
            f"wrote) and no {READY_MARKER} (a SavedModel folder) inside"
        )
    summary = storage.read_json(model_folder.summary_path(model_dir)) if saved_model == inner else None
    task = (summary or {}).get("task") or _task_of_saved_model(saved_model)
    model_uri = model_dir if saved_model == inner else ""
    return ModelRef(saved_model, storage.tree_sha256(saved_model), task, model_uri=model_uri)


def model_from_stage(stages_root: str, stage: str, model_name: Optional[str]) -> ModelRef:
    """The version ``stage`` serves of ``model_name`` now, pinned by number and content hash.

    Raises:
        PredictError: the stage serves no such model (the message lists what it serves).
    """
    from components.serving.stages import StageRegistry

    registry = StageRegistry(stages_root)
    name = model_name or _default_model_name(registry, stage)
    entry = registry.read_current(stage, name)
    if entry is None or entry.version is None:
        served = sorted(registry.served_models(stage))
        raise PredictError(
            f"{stage} serves no model named {name!r} under {stages_root}; it serves {served or 'nothing'}. "
            "Promote one there first, give model_name, or score a model folder (model_dir)"
        )
    saved_model = registry.version_path(stage, name, entry.version)
    if not storage.exists(storage.join(saved_model, READY_MARKER)):
        raise PredictError(f"{stage} records version {entry.version} of {name!r}, but {saved_model} holds no model")
    sha = entry.sha256 or storage.tree_sha256(saved_model)
    task = entry.task or get_task(None).name
    return ModelRef(saved_model, sha, task, entry.version, stage, name, entry.model_uri)


def _default_model_name(registry: Any, stage: str) -> str:
    """The one model a stage serves; with several, the error asks which."""
    served = sorted(registry.served_models(stage))
    if len(served) == 1:
        return served[0]
    raise PredictError(f"{stage} serves {served or 'nothing'}: name the model to score (model_name)")


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
    """The model the config names: a stage's current version, or a folder."""
    if config.model_dir is not None:
        return model_from_folder(config.model_dir)
    from components.serving.stages import resolve_stages_root

    root = resolve_stages_root(config.stages_root, pipeline_root)
    return model_from_stage(root, config.stage or "", config.model_name)


def resolve_settings(config: PredictConfig, task: Task, labelled: bool) -> dict[str, Any]:
    """The scoring settings with the task's defaults filled in.

    Raises:
        TaskError: the task cannot do what is asked (COCO results of a classifier, say).
    """
    coco = {"auto": task.records_boxes, "on": True, "off": False}[config.coco]
    task.check_batch_prediction(coco=coco, labels=labelled)
    return {
        "batch_size": config.batch_size,
        "score_threshold": config.score_threshold,
        "top_k": config.top_k or task.prediction_top_k,
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
        PredictError, InputError, TaskError, PriceTableError: one line naming the problem and the fix.
    """
    model = resolve_model(config, pipeline_root)
    listing = list_input(config.data, config.split)
    settings = resolve_settings(config, get_task(model.task), listing.labelled)
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


# --------------------------------------------------------------------------------------------
# One shard
# --------------------------------------------------------------------------------------------


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


def _dataset_reader(items: Sequence[Item], task: Task) -> tuple[Callable[[str], bytes], dict[str, Any]]:
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
                labels[f"{uri}#{n}"] = task.prediction_truth(features)
    return images.__getitem__, labels


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
    read_bytes, truths = storage.read_bytes, {}
    if the_plan.kind == "dataset":
        read_bytes, truths = _dataset_reader(items, task)
    uris = _uris(items)

    settings = the_plan.settings
    predictor = load_predictor(the_plan.model.saved_model, task)
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
        counts.update(task.predicted_classes(record))
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


def _uris(items: Sequence[Item]) -> list[str]:
    """What ``read_bytes`` is asked for each item: its file, or ``<file>#<n>`` for a record."""
    return [it.uri if it.record is None else f"{it.uri}#{it.record}" for it in items]


# --------------------------------------------------------------------------------------------
# The join
# --------------------------------------------------------------------------------------------


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
    return task.prediction_metrics(labelled, [r["label"] for r in labelled], class_names)


def _category_ids(data: str) -> Optional[dict[str, int]]:
    """A COCO input's category name -> id (its results must use them), or None when it has none."""
    categories = (storage.read_json(data) or {}).get("categories") or []
    return {str(c["name"]): int(c["id"]) for c in categories if isinstance(c, dict)} or None


def _write_coco(output_uri: str, task: Task, rows: Sequence[dict[str, Any]], the_plan: BatchPlan) -> None:
    """``coco_results.json`` (pycocotools' ``loadRes`` format) and, for ids assigned here, the images."""
    ids = _category_ids(the_plan.data) if the_plan.kind == "coco" else None
    results = [e for row in rows for e in task.coco_results(row, int(row["image_id"]), category_ids=ids)]
    storage.write_json(storage.join(output_uri, COCO_RESULTS), results, indent=None)
    if the_plan.kind != "coco":  # the input's own COCO file lists its images; ids assigned here are listed
        images = [
            {"id": row["image_id"], "file_name": row["path"], "width": row.get("width"), "height": row.get("height")}
            for row in rows
        ]
        storage.write_json(storage.join(output_uri, COCO_IMAGES), {"images": images}, indent=None)


__all__ = [
    "BatchPlan",
    "BatchSummary",
    "InputError",
    "Joined",
    "ModelRef",
    "PredictError",
    "ShardResult",
    "TaskError",
    "describe_plan",
    "join",
    "plan",
    "read_manifest",
    "score_shard",
]
