"""The configs the library itself takes: how a model is trained (``TrainConfig``), how it is
scored and blessed (``EvaluateConfig``, which the tasks' evaluations take), and how a source
becomes TFRecords (``ConvertConfig``).

Every other step's config lives beside its step (``components/<step>/config.py``) or the shared
package that takes it (``components/serving/config.py``); a whole-run YAML file is read section by
section from what the steps declare (``components/run_config.py``). Every section is a frozen
dataclass that validates itself on construction, so a bad value fails at load time, naming the
field, and a component can rebuild the same object from its parameters at entry.

This module imports neither TensorFlow nor kfp: pipelines and components use it freely.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import typing
from collections.abc import Mapping
from typing import Any, ClassVar, Optional

from trainer import slices
from trainer.budget import pricing
from trainer.budget.limits import CAP, BudgetError, Limits
from trainer.configbase import ConfigBase, ConfigError  # noqa: F401  (the sections raise it; callers catch it here)


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
        warm_start: the weights the model starts from: a model folder of an earlier training of
            the same model, options and classes (its ``model.keras``), or a ``.keras`` /
            ``.weights.h5`` file, local or gs://; None: the builder's own initial weights. A
            restarted step still resumes from its checkpoints. Not part of the config's
            fingerprint when None (configs made before it hash as they did).
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
    warm_start: Optional[str] = None

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
        if values.get("warm_start") is None:
            values.pop("warm_start", None)
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
        evaluation_options: the model's task's own settings of its evaluation, which it reads
            into its typed options (a key no task takes, or a wrong value, fails, naming the keys
            it takes); classification: ``{top_k: 3}``, the k of ``top_k_accuracy``.
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
    _renamed: ClassVar[Mapping[str, str]] = {"top_k": "evaluation_options.top_k"}

    split: str = "test"
    batch_size: int = 256
    evaluation_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
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
        # The metric names and the tasks' own settings live with the tasks (no TensorFlow). The config
        # does not know which task it will judge, so what any task takes passes here; the step checks
        # it against the model's.
        from trainer.tasks import TaskError, check_step_options, task_types

        try:
            check_step_options("evaluation_options", self.evaluation_options)
        except TaskError as err:
            raise ConfigError(f"{self._section}{err}") from None
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
