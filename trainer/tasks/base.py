"""The task interface: what every step asks of a task instead of assuming classification.

A task is configured: ``get_task(name, options)`` parses the model's options (``TrainConfig.
model_options``) once into the task's typed options (a ``ConfigBase``), and every method reads
them from the instance. A task answers, each in one place:

1. **Input**: which record features it reads and how a parsed batch becomes model inputs and
   targets (:meth:`Task.feature_keys`, :meth:`Task.decode`, :meth:`Task.augment`).
2. **Model**: how the model is built and checked against the dataset, and its loss, optimizer
   and training metrics (:meth:`Task.build_model`, :meth:`Task.compile`, :meth:`Task.optimizer`).
3. **Export**: the SavedModel signatures (:meth:`Task.export`).
4. **Evaluation**: its scalar metrics, the direction in which each is better (:attr:`Task.metrics`,
   what the gate reads), its headline and quality metrics (summaries, reports, sweep tables), the
   default gate thresholds and how an exported model is scored (:meth:`Task.evaluate`, whose
   result is an :class:`EvaluationResultBase`); its own settings of the evaluation and of batch
   prediction (a classifier's top-k, a detector's COCO results), which the steps' configs hold as
   one mapping each and the task reads strictly (:meth:`Task.step_options`).
5. **Serving checks**: the response schema of ``serving_default`` and what a known example must
   answer (:attr:`Task.serving`, :meth:`Task.check_prediction`, :meth:`Task.matches`).
6. **Run-form defaults**: epochs, the served model name and the built-in data of a quick run
   (:attr:`Task.run_defaults`).
7. **Batch prediction**, optional: a facet, the task's :class:`Prediction` (:meth:`Task.prediction`;
   None for a task without it, one from outside this tree say, which works everywhere else and
   which batch prediction refuses in one line naming what is missing, :func:`prediction_of`). It
   says how an exported model scores image files offline (``trainer.batch_predict``): the decoding
   ``serving_default`` does, as a function of one image that the scoring maps over its own
   batches, and the tensor signature it feeds (:meth:`Prediction.load`); a batch of that
   signature's outputs as one JSON record per image (:meth:`Prediction.records`); the classes a
   record predicts, for counts per class (:meth:`Prediction.predicted_classes`); COCO results of a
   record (:meth:`Prediction.coco_results`, where :attr:`Prediction.writes_coco`: detection); a
   converted record's label (:meth:`Prediction.truth`) and the task's metrics on a scored set
   whose labels are given (:meth:`Prediction.metrics`).
8. **Selection**, optional: a facet, the task's :class:`~trainer.tasks.selection.Selection`
   (:meth:`Task.selection`; None for a task without it): how unsure its model is of each scored
   image, by the strategies it offers, and what a labelling tool shows a reviewer of each (the
   select step, ``trainer/tasks/selection.py``).
9. **Portable forms**, optional: a facet, the task's :class:`~trainer.tasks.portable.Portable`
   (:meth:`Task.portable`): the model body the export step converts to LiteRT and ONNX, its
   inputs, the predictions and metrics of its raw outputs (``trainer/tasks/portable.py``).

The attributes and the serving-check methods need no TensorFlow, so the gate and the serving
checks import a task cheaply; the model-side methods import TensorFlow inside their bodies.
"""

from __future__ import annotations

import abc
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from trainer.configbase import ConfigBase, ConfigError
from trainer.errors import TaskError
from trainer.records import Record
from trainer.tfrecords import DatasetInfo

if TYPE_CHECKING:
    from trainer.config import EvaluateConfig
    from trainer.tasks.portable import Portable
    from trainer.tasks.selection import Selection


@dataclasses.dataclass(frozen=True)
class Metric:
    """A scalar evaluation metric of a task.

    Attributes:
        name: the key in the evaluation's ``Metrics`` (and in thresholds).
        higher_is_better: the direction the gate compares in.
        description: one line for reports and error messages.
        label: the name summaries and cards show after "test " (the metric's name when empty).
        table_label: the column title of a sweep's tables (the label when empty).
    """

    name: str
    higher_is_better: bool
    description: str = ""
    label: str = ""
    table_label: str = ""

    @property
    def title(self) -> str:
        """The label, or the name."""
        return self.label or self.name

    @property
    def column(self) -> str:
        """The sweep tables' column title."""
        return self.table_label or self.title


@dataclasses.dataclass(frozen=True)
class ServingSchema:
    """What the ``serving_default`` signature takes and returns (docs/CONTRACTS.md).

    Attributes:
        input_name: the one input of ``serving_default``.
        input_dtype: its dtype as TensorFlow Serving's metadata names it.
        outputs: the output keys of every prediction.
        tensor_signature: the second signature, which takes decoded float32 images.
    """

    input_name: str = "image_bytes"
    input_dtype: str = "DT_STRING"
    outputs: tuple[str, ...] = ()
    tensor_signature: str = "serving_tensors"


@dataclasses.dataclass(frozen=True)
class RunDefaults:
    """What a quick run of a task (``pipelines/tools/run_local.py``) starts from.

    Attributes:
        data: the built-in data (a ``ConvertConfig.source``).
        limit: examples per split (0: all).
        epochs: training epochs.
        served_model_name: the name the model is served under (``/v1/models/<name>``).
        model: the model builder trained.
        headline: the metrics a run's summary prints (the headline first).
        form: the defaults of the task's pipeline run form that are neither the config sections'
            defaults nor the fields above, by run-form parameter name.
        notes: what the run form says of a parameter for this task, after the config field's
            documentation, by run-form parameter name.
        time_budget: the train step's time budget of a local run (``make run``), chosen from the
            quality-for-time curve (docs/training.md); ``auto``: none, the run form's schedule.
        grid_data: the built-in data of a grid of short runs on a CPU (``make sweep``: a few
            hundred images, ``shapes:400``); empty: ``data``.
        grid_model_options: the model options of such a grid's cells, which train a few steps
            each (the detector's short warm-up); the grid's form defaults to none.
    """

    data: str
    limit: int
    epochs: int
    served_model_name: str
    model: str
    headline: tuple[str, ...] = ()
    form: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    notes: Mapping[str, str] = dataclasses.field(default_factory=dict)
    time_budget: str = "auto"
    grid_data: str = ""
    grid_model_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class DataFit:
    """What a task fitted to the training data before its model is built.

    Attributes:
        task: the task with every ``auto`` option resolved (the user's values unchanged).
        epochs: the epochs of the fitted schedule; None when the config set them.
        record: JSON data of what was chosen and why (``training.json``'s ``fit``); its ``lines``
            say it for people (the log, the model card, the run report), its ``summary`` in one
            line (the Model artifact's ``fit_summary``, the run's console).
    """

    task: Task
    epochs: Optional[int]
    record: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class PredictionInput:
    """What batch prediction needs of an exported model (:meth:`Prediction.load`).

    Attributes:
        signature: the SavedModel's tensor signature (``ServingSchema.tensor_signature``), which
            takes decoded float32 images.
        input_name: that signature's one input (``images``).
        image_shape: ``(height, width, channels)`` it takes, read from its input spec.
        preprocess: ``encoded image (tf.string scalar) -> (float32 image [height, width, channels]
            in [0, 1], float32 meta vector of a fixed length)``, traceable (``tf.function``,
            ``tf.map_fn``, ``tf.data.Dataset.map``): the decoding ``serving_default`` does in its
            graph, so the scores equal its scores; the meta vector
            holds what :meth:`Prediction.records` needs of the original image (its size, for
            one) and may be empty.
        class_names: the model's classes in class-index order, as the SavedModel records them.
        function: the tensor signature's concrete function, ``function(**{input_name: images})``.
        loaded: the loaded SavedModel, which must stay alive while ``function`` is called.
    """

    signature: str
    input_name: str
    image_shape: tuple[int, int, int]
    preprocess: Callable[[Any], tuple[Any, Any]]
    class_names: tuple[str, ...]
    function: Any
    loaded: Any


def check_saved_model(saved_model_dir: str) -> None:
    """Raises a TaskError unless the folder holds a SavedModel (its ``saved_model.pb``)."""
    import tensorflow as tf

    if not tf.io.gfile.exists(os.path.join(saved_model_dir, "saved_model.pb")):
        raise TaskError(
            f"no SavedModel at {saved_model_dir} (saved_model.pb missing): name the saved_model folder of "
            "a model folder the train step wrote"
        )


def load_tensor_signature(saved_model_dir: str, signature: str, input_name: str) -> tuple[Any, Any, tuple[int, ...]]:
    """Loads a SavedModel and the tensor signature batch prediction feeds.

    Args:
        saved_model_dir: the export's folder (``<model>/saved_model``).
        signature: the signature's name (``serving_tensors``).
        input_name: its one input, a float32 batch of images of a fixed size.

    Returns:
        (the loaded object, to be kept alive; the signature's function; the input's shape less
        its batch dimension).

    Raises:
        TaskError: no SavedModel there, no such signature, or one whose input is not a batch of
            images of a fixed size.
    """
    import tensorflow as tf

    check_saved_model(saved_model_dir)
    loaded = tf.saved_model.load(saved_model_dir)
    if signature not in loaded.signatures:
        raise TaskError(
            f"SavedModel {saved_model_dir} has no signature {signature!r} (it has {sorted(loaded.signatures)}): "
            "batch prediction scores through the export's tensor signature; re-export the model with this code"
        )
    fn = loaded.signatures[signature]
    spec = fn.structured_input_signature[1].get(input_name)
    shape = None if spec is None else spec.shape
    if spec is None or spec.dtype != tf.float32 or shape.rank != 4 or None in shape.as_list()[1:]:
        raise TaskError(
            f"signature {signature!r} of {saved_model_dir} takes {fn.structured_input_signature[1]}, expected "
            f"{input_name!r}: float32 [batch, height, width, channels] with a fixed image size"
        )
    return loaded, fn, tuple(int(d) for d in shape.as_list()[1:])


class EvaluationResultBase(Record, abc.ABC):
    """What every task's evaluation result offers the steps (its own fields come on top).

    A task's result is a frozen dataclass: a record (``trainer.records``), whose ``to_dict`` is
    its plain JSON-ready data.
    """

    metrics: dict[str, float]
    class_names: list[str]

    def output_files(self) -> dict[str, Any]:
        """File name -> JSON data the evaluate CLI writes next to the report: ``metrics.json`` (what a
        promotion records, the slices' ``slice/<slice>/<metric>`` keys included) and, when the
        task scored slices, ``slices.json`` (the whole table, worst first).
        """
        rows = self.slice_rows()
        files: dict[str, Any] = {"metrics.json": self.recorded_metrics()}
        if rows:
            files["slices.json"] = [r.to_dict() for r in rows]
        return files

    def recorded_metrics(self) -> dict[str, float]:
        """The scalar metrics and the scored slices' (``trainer.slices.recorded_metrics``): what the
        evaluation hands the promotion, so that the next gate can compare slice by slice.
        """
        from trainer import slices

        return {**self.metrics, **slices.recorded_metrics(self.slice_rows())}

    def confusion_matrix(self) -> Optional[tuple[list[str], list[list[int]]]]:
        """(class names, matrix) for the Kubeflow UI's confusion matrix; None: the task has none."""
        return None

    def slice_rows(self) -> list[Any]:
        """The slice table (``trainer.slices.SliceRow``, worst first); empty for a task that scores no slices."""
        return list(getattr(self, "slices", ()))


class Task(abc.ABC):
    """Base of the tasks: a subclass fills in the class attributes and the abstract methods.

    Args:
        options: the model's options (``TrainConfig.model_options``), a mapping or the task's
            own options object; None means the defaults.

    Raises:
        TaskError: an unknown option or a value of the wrong type; the message lists the valid names.
    """

    name: ClassVar[str] = ""
    options_type: ClassVar[type[ConfigBase]]
    metrics: ClassVar[tuple[Metric, ...]] = ()
    headline_metric: ClassVar[str] = ""
    """The metric that sums a model up in a line (a run's summary, the smoke check's score)."""
    quality_metrics: ClassVar[tuple[str, ...]] = ()
    """The metrics a sweep's tables show, the first ranks the cells."""
    training_metrics: ClassVar[tuple[Metric, ...]] = ()
    """The task's figures of a training's last epoch (``TrainingSummary.metrics``, from
    :meth:`summary_metrics`); the first one present sums a training up (the run's console)."""
    serving: ClassVar[ServingSchema] = ServingSchema()
    default_value_thresholds: ClassVar[Mapping[str, float]] = {}
    run_defaults: ClassVar[RunDefaults]
    records_boxes: ClassVar[bool] = False
    """The converter's rule: records carry boxes (``dataset.json`` gets box statistics, and a
    resize, which would move the images away from their boxes, is refused)."""
    slice_metrics: ClassVar[tuple[str, ...]] = ()
    """The metrics each slice of an evaluation is scored by (``trainer/slices.py``), the first
    orders the slice table; a task that scores no slices leaves it empty (and the gate refuses
    ``slice_thresholds`` for it, naming the task)."""
    builtin_slice_columns: ClassVar[tuple[str, ...]] = ()
    """The slice columns the task makes besides the records' extra columns (``class``, ``size``, ``area``)."""
    step_options_types: ClassVar[Mapping[str, type[ConfigBase]]] = {}
    """The task's own settings of a step after training, by the step config's mapping that holds
    them (``evaluation_options``: ``EvaluateConfig``; ``prediction_options``: ``PredictConfig``;
    ``selection_options``: ``SelectConfig``),
    read by :meth:`step_options`. A step's setting that one task reads lives here, not in the
    step's config (``tests/unit/architecture/test_task_knobs.py``); a task without an entry takes none."""

    def __init__(self, options: Mapping[str, Any] | ConfigBase | None = None) -> None:
        self.options = options if isinstance(options, self.options_type) else self.parse_options(options or {})

    @classmethod
    def parse_options(cls, options: Mapping[str, Any]) -> ConfigBase:
        """The typed options from a mapping (strict: unknown keys and wrong types are errors)."""
        try:
            return cls.options_type.from_dict(options, _prefix="model_options.")
        except ConfigError as err:
            raise TaskError(str(err)) from None

    @classmethod
    def step_options(cls, field: str, options: Mapping[str, Any] | None = None) -> Optional[ConfigBase]:
        """The task's typed settings of a step from the step config's mapping (strict); None: it takes none.

        Args:
            field: the step config's mapping (``evaluation_options``, ``prediction_options``).
            options: its value.

        Raises:
            TaskError: a key the task does not take (naming those it takes) or a value it refuses.
        """
        given = dict(options or {})
        options_type = cls.step_options_types.get(field)
        if options_type is None:
            if given:
                what = field.replace("_", " ")
                raise TaskError(f"{field}.{sorted(given)[0]}: task {cls.name!r} takes no {what}")
            return None
        try:
            return options_type.from_dict(given, _prefix=f"{field}.")
        except ConfigError as err:
            raise TaskError(str(err)) from None

    # ----------------------------------------------------------------- no TensorFlow needed

    def directions(self) -> dict[str, bool]:
        """Metric name -> higher is better: the gate's table."""
        return {m.name: m.higher_is_better for m in self.metrics}

    @classmethod
    def metric(cls, name: str) -> Metric:
        """The metric of that name.

        Raises:
            TaskError: the task has no such metric.
        """
        for m in cls.metrics:
            if m.name == name:
                return m
        raise TaskError(f"task {cls.name!r} has no metric {name!r}; its metrics: {[m.name for m in cls.metrics]}")

    @classmethod
    def headline(cls, metrics: Optional[Mapping[str, Any]]) -> tuple[str, Any]:
        """(label, value) of the headline metric in a record's metrics (value None when absent)."""
        value = (metrics or {}).get(cls.headline_metric)
        return f"test {cls.metric(cls.headline_metric).title}", value

    @classmethod
    def training_headline(cls, metrics: Optional[Mapping[str, Any]]) -> tuple[str, Any]:
        """(label, value) of the first of :attr:`training_metrics` in a training's figures; ("", None): none."""
        for m in cls.training_metrics:
            value = (metrics or {}).get(m.name)
            if value is not None:
                return m.title, value
        return "", None

    def summary_metrics(self, history: Sequence[Mapping[str, Any]]) -> dict[str, Optional[float]]:
        """The task's figures of a training (named as :attr:`training_metrics`) from its per-epoch logs."""
        return {}

    def validation_metric(self, accelerator: str) -> tuple[str, bool]:
        """(key of the epoch logs, higher is better): the quality early stopping watches and the
        progress lines show, scored on the validation split every evaluation.

        The base watches the validation loss; a task names its own quality where it scores one
        (:meth:`validation_callbacks` may add it to the logs).

        Args:
            accelerator: ``tpu``, ``gpu`` or ``cpu``: where the model is scored.
        """
        return "val_loss", False

    def validation_callbacks(self, info: DatasetInfo, dataset_dir: str, split: str, accelerator: str) -> list[Any]:
        """Keras callbacks that score the validation split each evaluation and add their figures to
        the epoch's logs (before early stopping reads them); none by default.

        Args:
            info: the dataset's manifest.
            dataset_dir: the dataset folder.
            split: the validation split.
            accelerator: ``tpu``, ``gpu`` or ``cpu``.
        """
        return []

    def accepts_image_size(self) -> bool:
        """Whether the task trains at a configured image size (a sweep cell's ``image_size``)."""
        return False

    def with_image_size(self, image_size: int) -> dict[str, Any]:
        """Model options that set the input size (for the tasks that accept one)."""
        raise TaskError(f"task {self.name!r} trains at the dataset's image size; convert the data at that size")

    @abc.abstractmethod
    def check_prediction(self, prediction: Mapping[str, Any], num_outputs: int | None = None) -> None:
        """Checks one served prediction (a row of a ``:predict`` response) against the schema.

        Raises:
            TaskError: a key is missing or a value is malformed; the message says which.
        """

    @abc.abstractmethod
    def matches(self, prediction: Mapping[str, Any], expected: Any) -> bool:
        """Whether a served prediction is the known right answer for an example."""

    @abc.abstractmethod
    def output_signature(self, num_classes: int) -> dict[str, str]:
        """``serving_default``'s outputs, name -> dtype and shape, for the Model artifact's metadata."""

    def expected_to_json(self, expected: Any) -> Any:
        """A known example's expected answer as JSON data (kept in the stage registry)."""
        return expected

    def expected_from_json(self, data: Any) -> Any:
        """The inverse of :meth:`expected_to_json`."""
        return data

    def check_dataset(self, info: DatasetInfo) -> None:
        """Raises a ``DatasetError`` when a dataset cannot train this task (before TensorFlow starts)."""
        return None

    def describe(self, summary: Mapping[str, Any]) -> Sequence[str]:
        """Model-card lines on the final training metrics (Markdown)."""
        return []

    # ----------------------------------------------------------------- TensorFlow inside

    @abc.abstractmethod
    def feature_keys(self) -> tuple[str, ...]:
        """The record features training reads (parsing fewer keys is cheaper)."""

    @abc.abstractmethod
    def input_shape(self, info: DatasetInfo) -> tuple[int, int, int]:
        """The model's ``(height, width, channels)`` for a dataset."""

    @abc.abstractmethod
    def decode(self, features: Mapping[str, Any], shape: tuple[int, int, int]) -> tuple[Any, Any]:
        """A parsed batch of records -> (uint8 images ``[B, *shape]``, targets), inside tf.data."""

    @abc.abstractmethod
    def augment(self, images: Any, targets: Any, shape: tuple[int, int, int], seed: int | None) -> tuple[Any, Any]:
        """Random augmentation of a float batch in [0, 1]; targets move with the images."""

    def fit_to_data(
        self,
        info: DatasetInfo,
        split: str,
        *,
        global_batch: int,
        steps_per_epoch: int,
        epochs: Optional[int],
        learning_rate: float,
    ) -> Optional[DataFit]:
        """Fits the options left on ``auto`` (and the epochs when None) to ``split``; None: nothing to fit.

        Args:
            info: the dataset's manifest.
            split: the training split.
            global_batch: examples per optimizer step.
            steps_per_epoch: steps of one epoch.
            epochs: the config's epochs; None asks the task for a schedule.
            learning_rate: the learning rate for the global batch.

        Raises:
            TaskError: the data cannot be fitted (the message says what would).
        """
        return None

    @abc.abstractmethod
    def optimizer(self, learning_rate: float, total_steps: int) -> Any:
        """The Keras optimizer for ``total_steps`` steps at ``learning_rate`` (already batch-scaled)."""

    @abc.abstractmethod
    def build_model(self, model_name: str, info: DatasetInfo) -> Any:
        """The Keras model ``model_name`` (``TrainConfig.model``) for the dataset, checked against it."""

    @abc.abstractmethod
    def compile(self, model: Any, optimizer: Any, *, steps_per_execution: int, jit_compile: Any) -> None:
        """Compiles ``model`` with the task's loss and training metrics."""

    @abc.abstractmethod
    def export(self, model: Any, export_dir: str, info: DatasetInfo) -> str:
        """Writes the SavedModel with the task's signatures; returns ``export_dir``."""

    def save_preset(self, model: Any, preset_dir: str) -> Optional[str]:
        """Saves the trained model as a preset a later run can start from; None: the task has none."""
        return None

    def resolve_model(self, model_name: str, info: DatasetInfo) -> tuple[str, Optional[str]]:
        """The model to build for ``model_name`` (``auto``: the task's choice) and why; None: as asked."""
        return model_name, None

    @abc.abstractmethod
    def evaluate(
        self, saved_model_dir: str, dataset_dir: str, config: EvaluateConfig, limit: int | None = None
    ) -> EvaluationResultBase:
        """Scores an exported model on a split through ``serving_default`` (``config``: EvaluateConfig).

        Two keywords are optional, and passed only to a task whose ``evaluate`` takes them:
        ``on_progress(done, total)`` after each batch, and ``on_answers(images, answers)``: each
        batch's encoded images and one answer each, as the server's REST answer has it after JSON
        (what the evaluate step makes the traffic reference of; without it, the step asks the
        served path again).
        """

    @abc.abstractmethod
    def serving_function(self, saved_model_dir: str, info: DatasetInfo) -> tuple[Any, Any]:
        """Loads a SavedModel and checks that ``serving_default`` fits the dataset.

        Returns:
            (the loaded object, which must be kept alive, and the signature function).
        """

    @abc.abstractmethod
    def known_examples(self, dataset_dir: str, split: str, count: int) -> list[tuple[bytes, Any]]:
        """``count`` (encoded image, expected answer) pairs from a split, for the serving checks."""

    # ----------------------------------------------------------------- batch prediction (optional)

    def prediction(self) -> Optional[Prediction]:
        """The task's batch prediction (its :class:`Prediction`); None: the task does none."""
        return None

    def selection(self, options: Optional[ConfigBase] = None) -> Optional[Selection]:
        """The task's uncertainty strategies (its :class:`~trainer.tasks.selection.Selection`), with its
        typed ``selection_options``; None: the task picks no images to label.
        """
        return None

    def portable(self) -> Optional[Portable]:
        """The task's side of the export step (its :class:`~trainer.tasks.portable.Portable`); None: the
        task's models are served as SavedModels only.
        """
        return None


def prediction_of(task: Task) -> Prediction:
    """The task's batch prediction facet, asked for before any image is read.

    Raises:
        TaskError: the task has none; the one line names what is missing.
    """
    facet = task.prediction()
    if facet is None:
        raise TaskError(
            f"task {task.name!r} does no batch prediction: its prediction() gives no Prediction; give the task "
            "a Prediction with load and records (trainer/tasks/base.py, 7. Batch prediction)"
        )
    return facet


def _no_coco(task: str) -> str:
    return f"task {task!r} writes no COCO results: only a detection task has boxes; leave coco off"


class Prediction(abc.ABC):
    """A task's batch prediction (part 7), what :meth:`Task.prediction` returns: a facet of the task.

    Args:
        task: the task it belongs to (its name in messages, its options where it needs them).

    Attributes:
        top_k: the most predictions a batch prediction keeps per image unless told (classes, boxes).
        writes_coco: its records hold boxes that :meth:`coco_results` writes as COCO results.
    """

    top_k: ClassVar[int] = 5
    writes_coco: ClassVar[bool] = False

    def __init__(self, task: Task) -> None:
        self.task = task

    def check(self, *, coco: bool = False) -> None:
        """Checks, before any image is read, that the facet can do what a batch prediction asks.

        Args:
            coco: COCO results are asked for (:meth:`coco_results`).

        Raises:
            TaskError: it cannot; the message says why.
        """
        if coco and not self.writes_coco:
            raise TaskError(_no_coco(self.task.name))

    @abc.abstractmethod
    def load(self, saved_model_dir: str) -> PredictionInput:
        """Loads an export for batch prediction: its tensor signature, the decoding that feeds it
        and its class names, all read from the SavedModel (no dataset needed).

        Args:
            saved_model_dir: the export's folder (``<model>/saved_model``).

        Raises:
            TaskError: the folder is not this task's export.
        """

    @abc.abstractmethod
    def records(
        self,
        outputs: Mapping[str, Any],
        meta: Any,
        *,
        class_names: Sequence[str],
        score_threshold: float,
        top_k: int,
    ) -> list[dict[str, Any]]:
        """One JSON-ready record per image of a scored batch.

        Args:
            outputs: the tensor signature's outputs for the batch, name -> NumPy array [batch, ...].
            meta: float32 NumPy array [batch, m], :attr:`PredictionInput.preprocess`'s meta vectors.
            class_names: :attr:`PredictionInput.class_names`.
            score_threshold: what scores less is left out.
            top_k: the most entries a record keeps, highest scores first.
        """

    def truth(self, features: Mapping[str, Sequence[Any]]) -> Any:
        """A converted record's label in the form :meth:`metrics` takes, or None.

        Args:
            features: the record's features, name -> its values (bytes, ints or floats), as
                ``trainer.batch_predict.record_features`` reads them.
        """
        return None

    def predicted_classes(self, record: Mapping[str, Any]) -> list[str]:
        """The class names a record predicts, for counts per predicted class; none by default."""
        return []

    def coco_results(
        self, record: Mapping[str, Any], image_id: int, *, category_ids: Optional[Mapping[str, int]] = None
    ) -> list[dict[str, Any]]:
        """A record's COCO results entries (``image_id``, ``category_id``, ``bbox`` [x, y, w, h] pixels, ``score``).

        Args:
            record: one of :meth:`records`' records.
            image_id: the image's id in the COCO file the results go with.
            category_ids: class name -> that file's category id; None: the label-map ids
                (class index + 1).

        Raises:
            TaskError: the task has no boxes (unless :attr:`writes_coco`).
        """
        raise TaskError(_no_coco(self.task.name))

    def metrics(
        self, records: Sequence[Mapping[str, Any]], truths: Sequence[Any], class_names: Sequence[str]
    ) -> dict[str, float]:
        """The task's metrics on a scored set whose labels are given; none by default (the labels
        are kept with the predictions, and nothing is scored).

        Args:
            records: :meth:`records`' records, one per labelled image.
            truths: each image's label, in the task's form, in the same order.
            class_names: :attr:`PredictionInput.class_names`.

        Raises:
            TaskError: the labels do not fit.
        """
        return {}
