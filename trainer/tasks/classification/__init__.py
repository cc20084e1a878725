"""Image classification: the notebook's CNN and the transfer classifiers.

Records give ``image/encoded`` and ``image/class/label``; the model maps float32 images in [0, 1]
to class probabilities; ``serving_default`` returns ``probabilities`` and ``classes``; the
evaluation scores accuracy, top-k, loss and per-class precision/recall/F1. The parts:
``options.py`` (the builder's arguments), ``input.py``, ``model.py``, ``export.py``,
``evaluation.py`` and ``prediction.py`` (batch prediction's records).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from trainer.configbase import ConfigBase
from trainer.tasks import register
from trainer.tasks.base import Metric, RunDefaults, ServingSchema, Task, TaskError
from trainer.tasks.classification import input as task_input
from trainer.tasks.classification.evaluation import (
    METRICS,
    SLICE_METRICS,
    TRAINING_METRICS,
    ClassificationEvaluation,
)
from trainer.tasks.classification.fit import SMALL_SIDE
from trainer.tasks.classification.options import ClassifierEvaluationOptions, ClassifierOptions
from trainer.tasks.classification.prediction import ClassificationPrediction
from trainer.tasks.classification.selection import ClassificationSelection
from trainer.tfrecords import DatasetInfo

if TYPE_CHECKING:
    from trainer.config import EvaluateConfig

AUTO = "auto"  # train.model: the task chooses from the dataset's images


def _fmt(value: Any) -> str:
    return "n/a" if value is None else format(value, ".4f")


@register
class Classification(Task):
    """One label per image, softmax output, sparse categorical cross-entropy."""

    name: ClassVar[str] = "classification"
    options_type: ClassVar[type[ClassifierOptions]] = ClassifierOptions
    metrics: ClassVar[tuple[Metric, ...]] = METRICS
    headline_metric: ClassVar[str] = "accuracy"
    quality_metrics: ClassVar[tuple[str, ...]] = ("accuracy",)
    slice_metrics: ClassVar[tuple[str, ...]] = SLICE_METRICS
    builtin_slice_columns: ClassVar[tuple[str, ...]] = ("class", "size")
    training_metrics: ClassVar[tuple[Metric, ...]] = TRAINING_METRICS
    step_options_types: ClassVar[Mapping[str, type[ConfigBase]]] = {"evaluation_options": ClassifierEvaluationOptions}
    serving: ClassVar[ServingSchema] = ServingSchema(outputs=("probabilities", "classes"))
    default_value_thresholds: ClassVar[Mapping[str, float]] = {"accuracy": 0.8}
    run_defaults: ClassVar[RunDefaults] = RunDefaults(
        data="fashion-mnist",
        limit=20000,
        epochs=3,
        served_model_name="classifier",
        model="auto",
        headline=("accuracy",),
        form={"epochs": 5, "change_thresholds": {"accuracy": -0.01}},
    )
    options: ClassifierOptions

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self._mixed: dict[str, tuple[tuple[int, int, int], str]] = {}  # dataset -> fitted shape, why

    # ----------------------------------------------------------------- no TensorFlow needed

    def check_prediction(self, prediction: Mapping[str, Any], num_outputs: int | None = None) -> None:
        """Probabilities that sum to 1 over ``num_outputs`` classes and ``classes`` their argmax."""
        if set(prediction) != set(self.serving.outputs):
            raise TaskError(f"prediction keys {sorted(prediction)}, expected {sorted(self.serving.outputs)}")
        probs = prediction["probabilities"]
        if not isinstance(probs, list) or not probs or not all(isinstance(p, (int, float)) for p in probs):
            raise TaskError(f"probabilities must be a list of numbers, got {str(probs)[:120]}")
        n = num_outputs or len(probs)
        if len(probs) != n:
            raise TaskError(f"{len(probs)} probabilities, expected {n}")
        if not math.isclose(sum(probs), 1.0, abs_tol=1e-3) or min(probs) < 0:
            raise TaskError(f"probabilities do not sum to 1: {sum(probs)}")
        cls = prediction["classes"]
        if not isinstance(cls, int) or not 0 <= cls < n:
            raise TaskError(f"bad class {cls!r}")
        if probs.index(max(probs)) != cls:
            raise TaskError("classes is not the argmax of probabilities")

    def matches(self, prediction: Mapping[str, Any], expected: Any) -> bool:
        """The served top class is the label."""
        return prediction.get("classes") == int(expected)

    def output_signature(self, num_classes: int) -> dict[str, str]:
        """Probabilities per class and the top class."""
        return {"probabilities": f"float32 [None, {num_classes}]", "classes": "int64 [None]"}

    def expected_from_json(self, data: Any) -> Any:
        """Labels are ints."""
        return int(data)

    def summary_metrics(self, history: Sequence[Mapping[str, Any]]) -> dict[str, Optional[float]]:
        """The last epoch's validation and training accuracy."""
        last = history[-1] if history else {}
        return {"val_accuracy": last.get("val_accuracy"), "train_accuracy": last.get("accuracy")}

    def check_dataset(self, info: DatasetInfo) -> None:
        """A classifier needs 2+ classes (images of mixed sizes are resized to a fitted shape)."""
        from trainer.tfrecords import DatasetError

        if len(info.classes) < 2:
            raise DatasetError(
                f"{info.where}: a classifier needs at least 2 classes, the dataset has "
                f"{list(info.classes)}; convert a source with two or more classes"
            )

    def describe(self, summary: Mapping[str, Any]) -> Sequence[str]:
        """Loss and accuracy, train and validation."""
        metrics = summary.get("metrics") or {}
        return [
            "| | loss | accuracy |",
            "|---|---|---|",
            f"| train | {_fmt(summary.get('train_loss'))} | {_fmt(metrics.get('train_accuracy'))} |",
            f"| validation | {_fmt(summary.get('val_loss'))} | {_fmt(metrics.get('val_accuracy'))} |",
        ]

    # ----------------------------------------------------------------- TensorFlow inside

    def feature_keys(self) -> tuple[str, ...]:
        """The image and its label."""
        return task_input.FEATURE_KEYS

    def input_shape(self, info: DatasetInfo) -> tuple[int, int, int]:
        """The dataset's own image shape; for images of mixed sizes, a square shape fitted to them (``fit.py``)."""
        from trainer import data

        if info.image is not None:
            return data.image_shape_of(info)
        return self._mixed_fit(info)[0]

    def _mixed_fit(self, info: DatasetInfo) -> tuple[tuple[int, int, int], str]:
        """The fitted shape of a dataset of mixed sizes and why, read from its records once."""
        from trainer.tasks.classification.fit import mixed_input_shape, read_size_sample

        if info.where not in self._mixed:
            self._mixed[info.where] = mixed_input_shape(read_size_sample(info), self.options.image_size)
        return self._mixed[info.where]

    def decode(self, features: Mapping[str, Any], shape: tuple[int, int, int]) -> tuple[Any, Any]:
        """The images decoded and int32 labels; an image of another size is resized to ``shape``."""
        return task_input.decode(features, shape)

    def augment(self, images: Any, targets: Any, shape: tuple[int, int, int], seed: int | None) -> tuple[Any, Any]:
        """Horizontal flips and translations by up to 1/8 of the side."""
        return task_input.augment(images, targets, shape, seed)

    def optimizer(self, learning_rate: float, total_steps: int) -> Any:
        """Adam at a constant rate (the notebook's)."""
        import keras

        return keras.optimizers.Adam(learning_rate=learning_rate)

    def resolve_model(self, model_name: str, info: DatasetInfo) -> tuple[str, Optional[str]]:
        """``auto``: the notebook's CNN for small images, a transfer classifier for photos (and why).

        Small images (at most ``SMALL_SIDE`` px a side, such as MNIST's and Fashion-MNIST's 28 x 28
        grayscale) suit the notebook's CNN at their own size; larger photos suit a transfer
        classifier, which sees them at :func:`~trainer.tasks.classification.model.fitted_side`.
        Options that only the transfer classifier takes choose it too. A named model is kept.
        """
        if model_name != AUTO:
            return model_name, None
        height, width, channels = self.input_shape(info)
        mixed = f"{self._mixed_fit(info)[1]}; " if info.image is None else ""
        given = sorted(self.options.builder_kwargs())
        if max(height, width) <= SMALL_SIDE and not given:
            return "mnist_cnn", (
                f"{mixed}{height}x{width}x{channels} images, at most {SMALL_SIDE} px a side: "
                "the notebook's CNN at their size"
            )
        from trainer.tasks.classification.model import fitted_side

        side = self.options.image_size or fitted_side(height, width)
        why = f"options {', '.join(given)} given" if given else f"{height}x{width}x{channels} images"
        backbone = self.options.backbone or "mobilenet_v2"
        return "transfer_classifier", f"{mixed}{why}: a transfer classifier ({backbone}) seeing them at {side} x {side}"

    def build_model(self, model_name: str, info: DatasetInfo) -> Any:
        """The named classifier for the dataset's shape and classes, checked against both."""
        from trainer.tasks.classification.model import ModelError, build_classifier

        try:
            return build_classifier(
                model_name, self.input_shape(info), list(info.classes), self.options.builder_kwargs()
            )
        except ModelError as err:
            raise TaskError(f"train.model: {err}") from err

    def validation_metric(self, accelerator: str) -> tuple[str, bool]:
        """The validation accuracy (the compiled metric Keras scores each epoch)."""
        return "val_accuracy", True

    def compile(self, model: Any, optimizer: Any, *, steps_per_execution: int, jit_compile: Any) -> None:
        """Sparse categorical cross-entropy and accuracy."""
        from trainer.tasks.classification.model import compile_classifier

        compile_classifier(model, optimizer, steps_per_execution=steps_per_execution, jit_compile=jit_compile)

    def export(self, model: Any, export_dir: str, info: DatasetInfo) -> str:
        """Bytes-in and tensors-in signatures returning ``probabilities`` and ``classes``."""
        from trainer.tasks.classification.export import export_saved_model

        return export_saved_model(model, export_dir, list(info.classes), self.input_shape(info))

    def evaluate(
        self,
        saved_model_dir: str,
        dataset_dir: str,
        config: EvaluateConfig,
        limit: int | None = None,
        on_progress: Optional[Callable[..., None]] = None,
        on_answers: Optional[Callable[..., None]] = None,
    ) -> ClassificationEvaluation:
        """Accuracy, top-k, loss, per-class metrics and the confusion matrix (``on_answers``: each
        batch's images and answers as served, ``evaluation.predict_bytes``).
        """
        from trainer.tasks.classification.evaluation import evaluate_saved_model

        own = self.step_options("evaluation_options", config.evaluation_options)
        return evaluate_saved_model(
            saved_model_dir,
            dataset_dir,
            config.split,
            config.batch_size,
            own.top_k,
            limit,
            on_progress,
            slice_columns=config.slice_columns,
            slice_min_size=config.slice_min_size,
            slice_size_edges=config.slice_size_edges,
            on_answers=on_answers,
        )

    def serving_function(self, saved_model_dir: str, info: DatasetInfo) -> tuple[Any, Any]:
        """``serving_default``, checked to return probabilities over the dataset's classes."""
        from trainer.tasks.classification.evaluation import load_serving_signature

        return load_serving_signature(saved_model_dir, len(info.classes))

    def known_examples(self, dataset_dir: str, split: str, count: int) -> list[tuple[bytes, Any]]:
        """The split's first ``count`` labelled images."""
        from trainer.evaluate import read_encoded_split

        images, labels, _ = read_encoded_split(dataset_dir, split, limit=count)
        return [(img, int(lab)) for img, lab in zip(images, labels, strict=False) if int(lab) >= 0]

    # ----------------------------------------------------------------- batch prediction

    def prediction(self) -> ClassificationPrediction:
        """The classifier's batch prediction (``prediction.py``)."""
        return ClassificationPrediction(self)

    def selection(self, options: Optional[ConfigBase] = None) -> ClassificationSelection:
        """The classifier's uncertainty strategies (``selection.py``)."""
        return ClassificationSelection(self, options)

    def portable(self) -> Any:
        """The classifier's portable forms (``portable.py``)."""
        from trainer.tasks.classification.portable import ClassificationPortable

        return ClassificationPortable()
