"""One frozen, validated configuration for every step of the pipeline.

Each step reads its own section (``ConvertConfig``, ``TrainConfig``, ...); ``Config`` groups them
so that one YAML file can describe a whole run. Every section is a frozen dataclass that
validates itself on construction, so a bad value fails at load time, naming the field, and a
component can rebuild the same object from its parameters at entry.

This module imports neither TensorFlow nor kfp: pipelines and components use it freely.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Optional

from trainer import slices
from trainer.budget import pricing
from trainer.budget.limits import CAP, BudgetError, Limits
from trainer.configbase import ConfigBase, ConfigError  # noqa: F401  (the sections raise it; callers catch it here)

DEFAULT_SPLITS = {"train": 0.8, "validation": 0.1, "test": 0.1}


@dataclasses.dataclass(frozen=True)
class ConvertConfig(ConfigBase):
    """How a source of images becomes sharded TFRecords.

    Attributes:
        source: a path or gs:// URI (image folder, CSV/JSONL manifest, .npz, IDX folder or COCO
            JSON), or a built-in dataset name: ``fashion-mnist`` or ``digits`` (classification), or
            ``shapes`` (detection: 3000 generated images of squares, circles and triangles, made once
            into ``~/.cache/lean-tpu-pipelines``; ``shapes:<count>`` for another count).
        source_format: one of the source kinds; ``None`` detects it from the source.
        splits: split name -> share, used when the source does not give splits; must add up to 1.
        limit_per_split: keep at most this many examples per split (a quick subset), or all.
        stratify: assign splits per class so every split keeps the class balance.
        split_by: what a split is drawn from: ``path`` (each item's key: its path or its index) or
            ``content`` (each image's sha256, so that copies of one image under two names always
            land in one split: the way out of leakage between splits); ``content`` reads every
            file once while planning, and applies to items whose source gives no split.
        target_shard_mb: shard size to aim for.
        power_of_two_shards: round each split's shard count up to a power of two.
        compression: ``GZIP`` or ``None``.
        resize: ``[height, width]`` to resize (and re-encode) images to, or ``None`` to keep bytes.
        resize_mode: how resize keeps the aspect ratio: ``crop`` or ``pad``.
        workers: worker processes; ``None`` uses every core.
        seed: salt of the split hash and of any sampling.
        classes: the declared class names (manifest labels are names or indices into them);
            ``None`` takes them from the source.
    """

    _section: ClassVar[str] = "convert."

    source: str = "fashion-mnist"
    source_format: Optional[str] = None
    splits: Mapping[str, float] = dataclasses.field(default_factory=lambda: dict(DEFAULT_SPLITS))
    limit_per_split: Optional[int] = None
    stratify: bool = False
    split_by: typing.Literal["path", "content"] = "path"
    target_shard_mb: float = 100.0
    power_of_two_shards: bool = False
    compression: Optional[typing.Literal["GZIP"]] = None
    resize: Optional[tuple[int, int]] = None
    resize_mode: typing.Literal["crop", "pad"] = "crop"
    workers: Optional[int] = None
    seed: int = 0
    classes: Optional[tuple[str, ...]] = None

    def validate(self) -> None:
        if self.classes is not None and (not self.classes or len(set(self.classes)) != len(self.classes)):
            self._fail("classes", f"must be distinct names, at least one, or null; got {list(self.classes)}")
        if not self.source:
            self._fail("source", "is empty; give a path, a gs:// URI or 'fashion-mnist'")
        if not self.splits:
            self._fail("splits", "is empty; give e.g. {train: 0.8, validation: 0.1, test: 0.1}")
        if any(v < 0 for v in self.splits.values()):
            self._fail("splits", f"shares must be >= 0, got {dict(self.splits)}")
        total = sum(self.splits.values())
        if abs(total - 1.0) > 1e-6:
            self._fail("splits", f"shares must add up to 1, they add up to {total:g}: {dict(self.splits)}")
        if self.limit_per_split is not None and self.limit_per_split < 1:
            self._fail("limit_per_split", f"must be >= 1 or null, got {self.limit_per_split}")
        if self.target_shard_mb <= 0:
            self._fail("target_shard_mb", f"must be > 0, got {self.target_shard_mb}")
        if self.resize is not None and min(self.resize) < 1:
            self._fail("resize", f"must be two positive sizes [height, width], got {list(self.resize)}")
        if self.workers is not None and self.workers < 1:
            self._fail("workers", f"must be >= 1 or null, got {self.workers}")


@dataclasses.dataclass(frozen=True)
class TrainConfig(ConfigBase):
    """How a model is trained.

    Attributes:
        model: a model builder name of the dataset's task (``mnist_cnn``, ``transfer_classifier`` in
            ``trainer.tasks.classification.model``; ``retinanet`` for detection), or ``auto``: the
            task chooses from the dataset's images (``Task.resolve_model``).
        epochs: passes over the training split (or ``steps_per_epoch`` steps each); ``None``: a
            schedule in optimizer steps fitted to the dataset's size and the global batch, for the
            tasks that fit one (detection: ``trainer/tasks/detection/fit.py``).
        steps_per_epoch: steps per epoch; ``None`` means one pass over the training split.
        batch_size_per_replica: examples per accelerator core per step (128 is the TPU target).
        learning_rate: base learning rate for a global batch of 128; scaled with the global batch.
        accelerator: ``auto`` detects; ``tpu``, ``gpu``, ``cpu`` are demands that fail if unmet.
        precision: ``mixed_bfloat16``, ``mixed_float16``, ``float32``, or ``auto``: bfloat16 on
            TPU; on GPU bfloat16 from compute capability 8, float16 from 7, else float32; on CPU
            bfloat16 where oneDNN can use native bf16 units (``avx512_bf16``/``amx_bf16``), else
            float32 (``trainer.distribute.choose_precision``).
        steps_per_execution: steps run per host round trip; ``None`` for the accelerator's default.
        jit_compile: XLA; ``None`` for the accelerator's default (off on CPU).
        validation_steps: batches of the validation split evaluated per epoch; ``None`` for all.
        augment: random flips and crops on the training split.
        shuffle_buffer: examples in the shuffle buffer.
        checkpoint_every_steps: save a checkpoint this often (plus at each epoch end).
        seed: random seed.
        model_options: extra arguments of the model builder, e.g. ``{backbone: mobilenet_v2,
            weights: gs://bucket/mobilenet_v2_notop.weights.h5}`` for ``transfer_classifier``.
        global_batch_size: examples per step over all replicas; ``None`` means
            ``batch_size_per_replica`` x replicas. Must divide evenly by the replicas (else refused).
        train_split: the dataset split trained on.
        validation_split: the split evaluated after each epoch; ``None`` for no validation.
        checkpoint_every_seconds: also save a checkpoint when this much time passed since the last.
        cache_max_mb: keep the decoded training images in host memory after the first pass when
            they fit in this many MB (later epochs skip reading and decoding); 0 never caches.
        workers: training processes (pods) under ``MultiWorkerMirroredStrategy``, each with the
            step's accelerator; 1 trains in the step's own process.
        launcher: how ``workers`` > 1 are started: ``jobset`` (a JobSet), ``job`` (an Indexed Job
            with a headless Service), ``local`` (processes on this machine, on loopback), or
            ``auto``: a JobSet inside a cluster that serves it, local processes elsewhere.
        time_budget: ``auto`` (none: the schedule of ``epochs``, or the task's fitted one) or the
            time the train step may take, start-up, calibration, validation and export included:
            ``90s``, ``10m``, ``2h``. The step measures its step time once compiled and lays the
            schedule out over the steps that fit (docs/training.md); leave ``epochs`` and
            ``steps_per_epoch`` unset (0 in the run form) with such a budget. ``<=10m`` is a cap:
            the run's own schedule (``epochs`` x ``steps_per_epoch`` where they are set, else the
            task's fitted one) where it fits, fewer steps where it does not.
        stop_at: ``auto`` (none) or a point in the training's time, such as ``60s`` or ``2m``, at
            which this process stops training (the last validation and the export kept inside it)
            without changing the schedule, which stays the one laid out for ``time_budget``: a
            search's rung. The time counts every process of the training (a resumed one's earlier
            time too); a later process with a later ``stop_at`` (or ``auto``), into a new model
            folder with the same ``checkpoint_dir``, goes on from the step it stopped at. A time
            needs a ``time_budget`` and is at most its time. Or a step of the schedule, ``120
            steps`` (with any schedule: epochs, the task's fitted one or a budget's). Not part of
            the config's fingerprint.
        cost_budget: ``auto`` (none) or the US dollars the train step may cost, such as ``2.50``,
            at the price of its accelerator (``accelerator_type`` x ``accelerator_count`` in the
            price table); with ``time_budget`` too, the tighter one holds.
        patience: early stopping on the task's validation metric, scored every evaluation:
            ``auto`` (a third of the run's evaluations, at least 3; off under 6 evaluations), a
            number of evaluations without improvement, or ``off``. The best evaluated weights are
            the ones exported.
        accelerator_type: the step's accelerator resource (``cloud-tpus.google.com/v2``,
            ``nvidia.com/gpu``, ...; empty for CPU only), which prices the step
            (``trainer.budget.pricing.price_key``).
        accelerator_count: how many of it (0 for CPU only).
        price_table: a YAML price table over the defaults (``trainer/budget/prices.yaml``) for
            ``cost_budget`` and the recorded cost; None uses the defaults.
    """

    _section: ClassVar[str] = "train."
    _budget_fields: ClassVar[tuple[str, ...]] = ("time_budget", "cost_budget", "patience", "stop_at")
    # Fields that say where one process of a training stops, not what is trained: consecutive rungs
    # of a search differ only in them and must find the same checkpoints (their fingerprint).
    _unfingerprinted: ClassVar[tuple[str, ...]] = ("stop_at",)

    model: str = "mnist_cnn"
    epochs: Optional[int] = 3
    steps_per_epoch: Optional[int] = None
    batch_size_per_replica: int = 128
    learning_rate: float = 1e-3
    accelerator: typing.Literal["auto", "tpu", "gpu", "cpu"] = "auto"
    precision: typing.Literal["auto", "mixed_bfloat16", "mixed_float16", "float32"] = "auto"
    steps_per_execution: Optional[int] = None
    jit_compile: Optional[bool] = None
    validation_steps: Optional[int] = None
    augment: bool = False
    shuffle_buffer: int = 10_000
    checkpoint_every_steps: int = 500
    seed: int = 0
    model_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    global_batch_size: Optional[int] = None
    train_split: str = "train"
    validation_split: Optional[str] = "validation"
    checkpoint_every_seconds: Optional[float] = None
    cache_max_mb: float = 1024.0
    workers: int = 1
    launcher: typing.Literal["auto", "jobset", "job", "local"] = "auto"
    time_budget: str = "auto"
    stop_at: str = "auto"
    cost_budget: str = "auto"
    patience: str = "auto"
    accelerator_type: str = ""
    accelerator_count: int = 0
    price_table: Optional[str] = None

    def __post_init__(self) -> None:
        # A YAML file may write ``cost_budget: 2.5`` or ``patience: 3``: read as the text they mean.
        for name in self._budget_fields:
            value = getattr(self, name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                object.__setattr__(self, name, f"{value:g}")
        super().__post_init__()

    @property
    def limits(self) -> Limits:
        """``time_budget``, ``cost_budget``, ``patience`` and ``stop_at``, read once when the config
        was made (priced at ``accelerator_type`` x ``accelerator_count``): what the training reads.
        """
        return self._limits

    def _price(self) -> tuple[str, float]:
        """The price key and $/hour of the step's accelerator (a cost budget's price)."""
        return pricing.price_of(self.accelerator_type, self.accelerator_count, self.price_table)

    def fingerprint(self) -> str:
        """A short stable hash of what is trained: the values less ``stop_at``.

        The checkpoint folder refuses another fingerprint, and the rungs of a search continue one
        training, each with a later ``stop_at``. A config without it hashes as it did before it.
        """
        values = {k: v for k, v in self.to_dict().items() if k not in self._unfingerprinted}
        return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:16]

    def validate(self) -> None:
        try:
            parsed = Limits.parse(self.time_budget, self.cost_budget, self.patience, self.stop_at, price=self._price)
        except BudgetError as err:
            raise ConfigError(str(err)) from None
        object.__setattr__(self, "_limits", parsed)  # derived from the fields, not one of them
        if parsed.budgeted and not parsed.budget.cap and (self.epochs is not None or self.steps_per_epoch is not None):
            given = " and ".join(
                f"{n} {getattr(self, n)}" for n in ("epochs", "steps_per_epoch") if getattr(self, n) is not None
            )
            if parsed.budget.seconds is not None:
                budget, cap = self.time_budget, f"time_budget {CAP}{self.time_budget.strip()}"
            else:
                budget, cap = f"cost_budget {self.cost_budget}", f"a time_budget such as {CAP}10m"
            self._fail(
                "time_budget",
                f"a budget ({budget}) lays the schedule out itself, but {given} is set too; set epochs and "
                "steps_per_epoch to null (0 in the run form) with a budget, make it a cap that keeps your own "
                f"schedule where it fits ({cap}), or drop the budget (auto)",
            )
        if self.accelerator_count < 0:
            self._fail("accelerator_count", f"must be >= 0 (0 for CPU only), got {self.accelerator_count}")
        if self.epochs is not None and self.epochs < 1:
            self._fail("epochs", f"must be >= 1 or null (fitted to the data), got {self.epochs}")
        for name in ("steps_per_epoch", "steps_per_execution", "validation_steps"):
            value = getattr(self, name)
            if value is not None and value < 1:
                self._fail(name, f"must be >= 1 or null, got {value}")
        if not 1 <= self.batch_size_per_replica <= 65536:
            self._fail("batch_size_per_replica", f"must be in 1..65536, got {self.batch_size_per_replica}")
        if not 0 < self.learning_rate < 10:
            self._fail("learning_rate", f"must be in (0, 10), got {self.learning_rate}")
        if self.shuffle_buffer < 1:
            self._fail("shuffle_buffer", f"must be >= 1, got {self.shuffle_buffer}")
        if self.checkpoint_every_steps < 1:
            self._fail("checkpoint_every_steps", f"must be >= 1, got {self.checkpoint_every_steps}")
        if self.global_batch_size is not None and not 1 <= self.global_batch_size <= 1 << 20:
            self._fail("global_batch_size", f"must be in 1..{1 << 20} or null, got {self.global_batch_size}")
        if not self.train_split:
            self._fail("train_split", "is empty; give the split to train on, e.g. 'train'")
        if self.validation_split == self.train_split:
            self._fail("validation_split", f"must differ from train_split ({self.train_split!r}) or be null")
        if self.checkpoint_every_seconds is not None and self.checkpoint_every_seconds <= 0:
            self._fail("checkpoint_every_seconds", f"must be > 0 or null, got {self.checkpoint_every_seconds}")
        if self.cache_max_mb < 0:
            self._fail("cache_max_mb", f"must be >= 0 (0 never caches), got {self.cache_max_mb}")
        if self.workers < 1:
            self._fail("workers", f"must be a whole number >= 1 (1 trains in this process), got {self.workers}")


@dataclasses.dataclass(frozen=True)
class EvaluateConfig(ConfigBase):
    """How a model is scored and blessed.

    Attributes:
        split: the dataset split to score.
        batch_size: examples per inference batch.
        top_k: also report top-k accuracy for this k.
        value_thresholds: metric -> minimum value, e.g. ``{accuracy: 0.8}`` (for ``loss``, lower is
            better, a maximum). None configured means no blessing (fail closed).
        change_thresholds: metric -> minimum change against the baseline (the model prod serves),
            e.g. ``{accuracy: -0.01}`` tolerates a drop of one point (for ``loss``, the minimum
            decrease). Metrics: the task's (``trainer.tasks``); classification has accuracy,
            top_k_accuracy, loss, macro_precision, macro_recall, macro_f1.
        slice_columns: the ``extra/`` columns to slice by (``[camera]``); None: every one the
            records have. A column that exists in no record fails the step, naming those that do.
        slice_min_size: slices with fewer examples (objects, for detection's class and area
            slices) are listed, not scored.
        slice_size_edges: the image-size buckets' edges, shorter side in pixels.
        slice_thresholds: slice -> {metric: bound}, where the slice is a column (every value of
            it: ``camera``, ``class``, ``size``, ``area``) or one value (``camera:night``); e.g.
            ``{camera: {accuracy: 0.8}}``. Metrics: the task's slice metrics (classification:
            accuracy, loss; detection: ap, ap50). Each failing slice is one of the gate's reasons.
        slice_change_thresholds: metric -> minimum change of every scored slice against the same
            slice of the model prod serves, e.g. ``{accuracy: -0.05}`` (no slice may lose more
            than five points). A prod model recorded without slices skips it with a note.
    """

    _section: ClassVar[str] = "evaluate."

    split: str = "test"
    batch_size: int = 256
    top_k: int = 3
    value_thresholds: Mapping[str, float] = dataclasses.field(default_factory=dict)
    change_thresholds: Mapping[str, float] = dataclasses.field(default_factory=dict)
    slice_columns: Optional[tuple[str, ...]] = None
    slice_min_size: int = slices.MIN_SLICE_SIZE
    slice_size_edges: tuple[int, ...] = slices.SIZE_EDGES
    slice_thresholds: Mapping[str, Mapping[str, float]] = dataclasses.field(default_factory=dict)
    slice_change_thresholds: Mapping[str, float] = dataclasses.field(default_factory=dict)

    def validate(self) -> None:
        if self.slice_min_size < 1:
            self._fail("slice_min_size", f"must be >= 1, got {self.slice_min_size}")
        edges = list(self.slice_size_edges)
        if not edges or edges != sorted(set(edges)) or edges[0] < 1:
            self._fail("slice_size_edges", f"must be increasing pixel sizes >= 1, e.g. [64, 256, 1024]; got {edges}")
        for key, rule in dict(self.slice_thresholds).items():
            if not isinstance(rule, Mapping) or not rule:
                self._fail(
                    "slice_thresholds",
                    f"{key!r} must map metrics to bounds, e.g. {{{key}: {{accuracy: 0.8}}}}; got {rule!r}",
                )
        if self.batch_size < 1:
            self._fail("batch_size", f"must be >= 1, got {self.batch_size}")
        if self.top_k < 1:
            self._fail("top_k", f"must be >= 1, got {self.top_k}")
        # The metric names live with the tasks (no TensorFlow). The config does not know which task
        # it will judge, so a name of any task passes here; the gate checks it against the model's.
        from trainer.tasks import task_types

        known = sorted({m.name for task in task_types().values() for m in task.metrics})
        for name in ("value_thresholds", "change_thresholds"):
            unknown = sorted(set(getattr(self, name)) - set(known))
            if unknown:
                self._fail(name, f"unknown metric {unknown[0]!r}; known metrics: {', '.join(known)}")
        per_slice = sorted({m for task in task_types().values() for m in task.slice_metrics})
        rules = [("slice_change_thresholds", self.slice_change_thresholds)]
        rules += [(f"slice_thresholds.{key}", rule) for key, rule in self.slice_thresholds.items()]
        for name, rule in rules:
            unknown = sorted(set(rule) - set(per_slice))
            if unknown:
                self._fail(name, f"unknown slice metric {unknown[0]!r}; slice metrics: {', '.join(per_slice)}")


@dataclasses.dataclass(frozen=True)
class BenchmarkConfig(ConfigBase):
    """How inference is timed (the case study's 3,200 images in batches of 64).

    Attributes:
        num_images: images timed, warm-up excluded.
        batch_size: images per request/batch.
        warmup_batches: batches run before timing starts (graph tracing, caches).
        rounds: timed rounds over all images; the median round is reported (a short round alone is
            at the mercy of a noisy machine). With ``target_spread``, the most rounds.
        target_spread: stop timing once the rounds so far (at least two) agree within this share:
            (slowest - fastest) / median round <= ``target_spread`` (``0.05``: within 5%); None
            always runs ``rounds`` rounds (a cluster run's default; ``make run`` sets 0.05).
        accelerator: the label of the accelerator this runs on, a key of the price table.
        price_table: path to a YAML price table ($/hour per accelerator, the format of
            ``trainer/budget/prices.yaml``) whose entries replace or add to the defaults;
            ``None`` uses the defaults.
        http: also time the served path (the local model server over REST).
    """

    _section: ClassVar[str] = "benchmark."

    num_images: int = 3200
    batch_size: int = 64
    warmup_batches: int = 3
    rounds: int = 3
    target_spread: Optional[float] = None
    accelerator: str = "cpu-8"
    price_table: Optional[str] = None
    http: bool = True

    def validate(self) -> None:
        if self.num_images < 1:
            self._fail("num_images", f"must be >= 1, got {self.num_images}")
        if self.batch_size < 1:
            self._fail("batch_size", f"must be >= 1, got {self.batch_size}")
        if self.warmup_batches < 0:
            self._fail("warmup_batches", f"must be >= 0, got {self.warmup_batches}")
        if self.rounds < 1:
            self._fail("rounds", f"must be >= 1, got {self.rounds}")
        if self.target_spread is not None and not 0 < self.target_spread < 1:
            self._fail("target_spread", f"must be a share in (0, 1) such as 0.05, or null, got {self.target_spread}")
        if not self.accelerator:
            self._fail("accelerator", "is empty; give the price table key of the hardware, e.g. cpu-8 or tpu-v3-8")


STAGES = ("demo", "staging", "prod")


@dataclasses.dataclass(frozen=True)
class LoadTestConfig(ConfigBase):
    """A stage's load test at promotion: its bounds and the objectives it must meet.

    The test sends one-image ``:predict`` requests from ``clients`` clients (one keep-alive
    connection each) until ``max_requests`` were sent or ``max_seconds`` passed. A missed
    objective fails the promotion, which rolls back like a failed smoke check.

    Attributes:
        clients: concurrent clients.
        max_requests: the most requests sent, all clients together.
        max_seconds: the most seconds the test runs.
        max_p50_ms: the highest median latency allowed (None: not checked).
        max_p95_ms: the highest 95th-percentile latency allowed (None: not checked).
        max_p99_ms: the highest 99th-percentile latency allowed (None: not checked).
        min_requests_per_s: the lowest rate of answered requests allowed (None: not checked).
        max_errors: the most failed requests (non-200 answers, connection errors) allowed.
    """

    _section: ClassVar[str] = "promote.load_test."

    clients: int = 4
    max_requests: int = 200
    max_seconds: float = 2.0
    max_p50_ms: Optional[float] = None
    max_p95_ms: Optional[float] = None
    max_p99_ms: Optional[float] = None
    min_requests_per_s: Optional[float] = None
    max_errors: int = 0

    def validate(self) -> None:
        if self.clients < 1:
            self._fail("clients", f"must be >= 1, got {self.clients}")
        if self.max_requests < 1:
            self._fail("max_requests", f"must be >= 1, got {self.max_requests}")
        if self.max_seconds <= 0:
            self._fail("max_seconds", f"must be > 0, got {self.max_seconds}")
        if self.max_errors < 0:
            self._fail("max_errors", f"must be >= 0, got {self.max_errors}")
        for name in ("max_p50_ms", "max_p95_ms", "max_p99_ms", "min_requests_per_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                self._fail(name, f"must be > 0 (or none: not checked), got {value}")

    def objectives(self) -> dict[str, float]:
        """The objectives that are set, by name (kept with the result in the stage history)."""
        names = ("max_p50_ms", "max_p95_ms", "max_p99_ms", "min_requests_per_s", "max_errors")
        return {n: float(getattr(self, n)) for n in names if getattr(self, n) is not None}

    def violations(self, figures: Mapping[str, float]) -> list[str]:
        """What the measured ``figures`` (a :class:`~components.serving.load.LoadResult`'s) miss."""
        missed = []
        for pct in ("p50", "p95", "p99"):
            limit = getattr(self, f"max_{pct}_ms")
            value = figures.get(f"{pct}_ms")
            if limit is not None and (value is None or value > limit):
                shown = "none answered" if value is None else f"{value:.1f} ms"
                missed.append(f"{pct} {shown} > objective {limit:g} ms")
        rate = figures.get("requests_per_s", 0.0)
        if self.min_requests_per_s is not None and rate < self.min_requests_per_s:
            missed.append(f"{rate:.1f} req/s < objective {self.min_requests_per_s:g} req/s")
        if figures.get("errors", 0) > self.max_errors:
            missed.append(f"{int(figures['errors'])} errors > allowed {self.max_errors}")
        return missed


# Prod's profile on a cluster: what a release must sustain. Staging runs it scaled down (fewer
# clients and requests, the same latency objectives, a proportionally lower rate); demo runs a
# minimal one that only proves the server answers under a little concurrency.
_PROD_LOAD_TEST = LoadTestConfig(
    clients=16, max_requests=4000, max_seconds=30.0, max_p50_ms=50.0, max_p95_ms=150.0, max_p99_ms=300.0,
    min_requests_per_s=100.0,
)  # fmt: skip
LOAD_TESTS: Mapping[tuple[str, str], LoadTestConfig] = types.MappingProxyType(
    {
        ("cluster", "prod"): _PROD_LOAD_TEST,
        ("cluster", "staging"): _PROD_LOAD_TEST.replace(clients=4, max_requests=1000, min_requests_per_s=25.0),
        ("cluster", "demo"): LoadTestConfig(clients=2, max_requests=50, max_seconds=5.0, max_p99_ms=1000.0),
        # Local (a loopback server on a laptop or a shared CI machine): the same shapes, objectives
        # loose enough that a noisy machine never trips them; they still catch a broken server.
        ("loopback", "prod"): LoadTestConfig(
            clients=4,
            max_requests=200,
            max_seconds=4.0,
            max_p95_ms=5000.0,
            max_p99_ms=10000.0,
            min_requests_per_s=1.0,
        ),  # fmt: skip
        ("loopback", "staging"): LoadTestConfig(
            clients=2, max_requests=100, max_seconds=2.0, max_p99_ms=10000.0, min_requests_per_s=1.0
        ),
        ("loopback", "demo"): LoadTestConfig(clients=1, max_requests=20, max_seconds=2.0, max_p99_ms=10000.0),
    }
)
"""The default load test of each (load profile, stage): a serving target's ``load_profile`` is
``cluster`` (servers in a cluster) or ``loopback`` (a server on the step's machine);
``PromoteConfig.load_test`` overrides it."""


_TARGET_NAME = re.compile(r"[a-z][a-z0-9_-]*")


def _check_target(config: ConfigBase, target: str) -> None:
    """Fails ``config``'s ``target`` unless it is shaped like a serving target's name.

    Which targets exist is the registry's to say (``components.serving.targets``, which the steps
    ask when they start: an unknown name is refused there, with the known ones listed); this
    library knows nothing of the steps.
    """
    if not isinstance(target, str) or not _TARGET_NAME.fullmatch(target):
        config._fail("target", f"expected a serving target's name such as 'local' or 'kubernetes', got {target!r}")


@dataclasses.dataclass(frozen=True)
class PromoteConfig(ConfigBase):
    """How a model reaches a serving stage (docs/promotion.md).

    Attributes:
        stage: ``demo``, ``staging`` or ``prod``.
        target: the serving target by its name in ``components.serving.targets``: ``local`` (a
            loopback model server, stage folders under ``stages_root``), ``kubernetes`` (the
            stage's manifests applied to the cluster) or ``kserve`` (one KServe InferenceService
            per model, docs/kserve.md).
        stages_root: where the stages keep their model versions and history (a folder or gs://).
        model_name: the name the model is served under (``/v1/models/<name>``).
        smoke_examples: known test images the prediction check sends.
        min_smoke_accuracy: share of those the model must get right.
        rollout_timeout_s: how long to wait for a rollout before rolling back.
        task: the model's task (``trainer.tasks``), which the serving checks ask; None: what the
            model folder's ``training.json`` says (promote) or the stage's known examples say
            (rollback, promote-version), ``classification`` where neither says.
        load_test: the stage's load test at promotion, run after the smoke checks, and its
            objectives; None: the default of the target's load profile and the stage
            (``LOAD_TESTS``: demo minimal, staging prod's profile scaled down, prod prod's; loose
            ones for target local).
        canary_steps: the traffic shares (percent, increasing, the last 100) a new version takes
            one after the other on a target that splits traffic, checked at each; None: the
            target's default (kserve in Knative mode: 10, 50, 100; local: no canary, the new
            version replaces the old at once). The first version of a model never has a canary.
        serving_options: the serving target's own settings, by name, which it reads into its
            typed options (an unknown key or a wrong value fails the step, naming the keys it
            takes); e.g. ``{mode: standard}`` for kserve (docs/kserve.md), ``{port: 8600}`` for local.
        allow_contract_change: let a model whose class names, class order, input signature or
            output keys differ from what the stage serves under the same model name replace it
            (the change is recorded in the stage history); false refuses such a promotion with
            one line naming the difference (docs/promotion.md).
    """

    _section: ClassVar[str] = "promote."
    _renamed: ClassVar[Mapping[str, str]] = {"kserve_mode": "serving_options.mode"}

    stage: str = "demo"
    target: str = "local"
    stages_root: str = "stages"
    model_name: str = "classifier"
    smoke_examples: int = 16
    min_smoke_accuracy: float = 0.5
    rollout_timeout_s: float = 300.0
    task: Optional[str] = None
    load_test: Optional[LoadTestConfig] = None
    canary_steps: Optional[tuple[int, ...]] = None
    serving_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    allow_contract_change: bool = False

    def validate(self) -> None:
        from trainer.tasks import task_names  # no TensorFlow: the task table only

        if self.task is not None and self.task not in task_names():
            self._fail("task", f"expected one of {task_names()} (or none: read from the model), got {self.task!r}")
        if self.stage not in STAGES:
            self._fail("stage", f"expected one of {list(STAGES)}, got {self.stage!r}")
        _check_target(self, self.target)
        if not self.model_name.replace("-", "").replace("_", "").isalnum():
            self._fail("model_name", f"use letters, digits, '-' and '_', got {self.model_name!r}")
        if self.smoke_examples < 1:
            self._fail("smoke_examples", f"must be >= 1, got {self.smoke_examples}")
        if not 0 <= self.min_smoke_accuracy <= 1:
            self._fail("min_smoke_accuracy", f"must be in [0, 1], got {self.min_smoke_accuracy}")
        if self.rollout_timeout_s <= 0:
            self._fail("rollout_timeout_s", f"must be > 0, got {self.rollout_timeout_s}")
        steps = self.canary_steps
        if steps is not None and (
            not steps or steps[-1] != 100 or list(steps) != sorted(set(steps)) or not all(0 < s <= 100 for s in steps)
        ):
            self._fail("canary_steps", f"expected increasing percentages in 1..100 ending with 100, got {steps}")

    def effective_load_test(self, load_profile: str) -> LoadTestConfig:
        """The load test this stage runs: ``load_test``, else the default of the stage and of the
        target's ``load_profile`` (``cluster`` or ``loopback``, a serving target's attribute).
        """
        if self.load_test is not None:
            return self.load_test
        return LOAD_TESTS[(load_profile, self.stage)]


@dataclasses.dataclass(frozen=True)
class MonitorConfig(ConfigBase):
    """How the monitor pipeline watches the serving stages (docs/observability.md).

    Attributes:
        prometheus_url: the Prometheus (or compatible query API) that scrapes the stages, e.g.
            ``http://prometheus-operated.monitoring:9090``.
        stages_root: the stage registry (a folder or gs://): what each stage serves, and the known
            images kept at promotion.
        stages: the stages to watch; one that serves nothing is reported and skipped.
        window: the PromQL range the objectives are measured over (``1h``, ``30m``).
        target: where the stages serve, by its name in ``components.serving.targets``: ``local``
            (a loopback server is started from the stage registry for the checks),
            ``kubernetes`` (the stage's Service in the cluster) or ``kserve`` (each model's
            InferenceService).
        model_name: the served model name.
        min_smoke_accuracy: the share of the known images the prediction check must get right.
        timeout_s: how long one Prometheus query or the health check may take.
        serving_options: the serving target's own settings, as for the promotion
            (``PromoteConfig.serving_options``): where the target looks for the stages' servers.
    """

    _section: ClassVar[str] = "monitor."

    prometheus_url: str = "http://127.0.0.1:9090"
    stages_root: str = "stages"
    stages: tuple[str, ...] = STAGES
    window: str = "1h"
    target: str = "local"
    model_name: str = "classifier"
    min_smoke_accuracy: float = 0.5
    timeout_s: float = 30.0
    serving_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def validate(self) -> None:
        if not self.prometheus_url.startswith(("http://", "https://")):
            self._fail("prometheus_url", f"must be an http(s) URL, got {self.prometheus_url!r}")
        unknown = [s for s in self.stages if s not in STAGES]
        if unknown or not self.stages:
            self._fail("stages", f"expected some of {list(STAGES)}, got {list(self.stages)}")
        _check_target(self, self.target)
        if not re.fullmatch(r"[1-9][0-9]*[smhd]", self.window):
            self._fail("window", f"must be a PromQL duration such as 30m or 1h, got {self.window!r}")
        if not 0 <= self.min_smoke_accuracy <= 1:
            self._fail("min_smoke_accuracy", f"must be in [0, 1], got {self.min_smoke_accuracy}")
        if self.timeout_s <= 0:
            self._fail("timeout_s", f"must be > 0, got {self.timeout_s}")


@dataclasses.dataclass(frozen=True)
class Config(ConfigBase):
    """A whole run: one section per step.

    Attributes:
        convert: how the source becomes TFRecords.
        train: how the model is trained.
        evaluate: how it is scored and blessed.
        benchmark: how its inference is timed.
        promote: how it reaches a serving stage.
        monitor: how the serving stages are watched.
    """

    convert: ConvertConfig = dataclasses.field(default_factory=ConvertConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    evaluate: EvaluateConfig = dataclasses.field(default_factory=EvaluateConfig)
    benchmark: BenchmarkConfig = dataclasses.field(default_factory=BenchmarkConfig)
    promote: PromoteConfig = dataclasses.field(default_factory=PromoteConfig)
    monitor: MonitorConfig = dataclasses.field(default_factory=MonitorConfig)
