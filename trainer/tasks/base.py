"""The task interface: what every step asks of a task instead of assuming classification.

A task answers five questions, each in one place:

1. **Input**: which record features it reads and how a parsed batch becomes model inputs and
   targets (:meth:`Task.feature_keys`, :meth:`Task.to_inputs`).
2. **Model**: how the model is built and checked against the dataset, and its loss and training
   metrics (:meth:`Task.build_model`, :meth:`Task.compile`).
3. **Export**: the SavedModel signatures (:meth:`Task.export`).
4. **Evaluation**: its scalar metrics, the direction in which each is better (:attr:`Task.metrics`,
   what the gate reads), and how an exported model is scored (:meth:`Task.evaluate`).
5. **Serving checks**: the response schema of ``serving_default`` and what a known example must
   answer (:attr:`Task.serving`, :meth:`Task.check_prediction`, :meth:`Task.matches`).

The attributes and the serving-check methods need no TensorFlow, so the gate and the serving
checks import a task cheaply; the model-side methods import TensorFlow inside their bodies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar


class TaskError(ValueError):
    """A task cannot do what was asked (unknown task, a prediction of the wrong shape, ...)."""


@dataclasses.dataclass(frozen=True)
class Metric:
    """A scalar evaluation metric of a task.

    Attributes:
        name: the key in the evaluation's ``Metrics`` (and in thresholds).
        higher_is_better: the direction the gate compares in.
        description: one line for reports and error messages.
    """

    name: str
    higher_is_better: bool
    description: str = ""


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


class Task:
    """Base of the tasks; a subclass fills in every attribute and method below."""

    name: ClassVar[str] = ""
    metrics: ClassVar[tuple[Metric, ...]] = ()
    headline_metric: ClassVar[str] = ""
    """The metric that sums a model up in a line (a run's summary, the smoke check's score)."""
    serving: ClassVar[ServingSchema] = ServingSchema()
    default_value_thresholds: ClassVar[Mapping[str, float]] = {}

    # ----------------------------------------------------------------- no TensorFlow needed

    def directions(self) -> dict[str, bool]:
        """Metric name -> higher is better: the gate's table."""
        return {m.name: m.higher_is_better for m in self.metrics}

    def check_prediction(self, prediction: Mapping[str, Any], num_outputs: int | None = None) -> None:
        """Checks one served prediction (a row of a ``:predict`` response) against the schema.

        Raises:
            TaskError: a key is missing or a value is malformed; the message says which.
        """
        raise NotImplementedError

    def matches(self, prediction: Mapping[str, Any], expected: Any) -> bool:
        """Whether a served prediction is the known right answer for an example."""
        raise NotImplementedError

    def output_signature(self, num_classes: int) -> dict[str, str]:
        """``serving_default``'s outputs, name -> dtype and shape, for the Model artifact's metadata."""
        raise NotImplementedError

    def expected_to_json(self, expected: Any) -> Any:
        """A known example's expected answer as JSON data (kept in the stage registry)."""
        return expected

    def expected_from_json(self, data: Any) -> Any:
        """The inverse of :meth:`expected_to_json`."""
        return data

    # ----------------------------------------------------------------- TensorFlow inside

    def feature_keys(self) -> tuple[str, ...]:
        """The record features training reads (parsing fewer keys is cheaper)."""
        raise NotImplementedError

    def input_shape(self, manifest: Mapping[str, Any], options: Mapping[str, Any]) -> tuple[int, int, int]:
        """The model's ``(height, width, channels)`` for a dataset and the model's options."""
        raise NotImplementedError

    def decode(
        self, features: Mapping[str, Any], shape: tuple[int, int, int], options: Mapping[str, Any]
    ) -> tuple[Any, Any]:
        """A parsed batch of records -> (uint8 images ``[B, *shape]``, targets), inside tf.data."""
        raise NotImplementedError

    def augment(self, images: Any, targets: Any, shape: tuple[int, int, int], seed: int | None) -> tuple[Any, Any]:
        """Random augmentation of a float batch in [0, 1]; targets move with the images."""
        raise NotImplementedError

    def optimizer(self, learning_rate: float, total_steps: int, options: Mapping[str, Any]) -> Any:
        """The Keras optimizer for ``total_steps`` steps at ``learning_rate`` (already batch-scaled)."""
        raise NotImplementedError

    def check_dataset(self, manifest: Mapping[str, Any]) -> None:
        """Raises a ``DatasetError`` when a dataset cannot train this task (before TensorFlow starts)."""

    def build_model(self, config: Any, manifest: Mapping[str, Any]) -> Any:
        """The Keras model for ``config`` (a ``TrainConfig``) and the dataset, checked against it."""
        raise NotImplementedError

    def compile(self, model: Any, optimizer: Any, *, steps_per_execution: int, jit_compile: Any) -> None:
        """Compiles ``model`` with the task's loss and training metrics."""
        raise NotImplementedError

    def export(self, model: Any, export_dir: str, manifest: Mapping[str, Any], options: Mapping[str, Any]) -> str:
        """Writes the SavedModel with the task's signatures; returns ``export_dir``."""
        raise NotImplementedError

    def evaluate(self, saved_model_dir: str, dataset_dir: str, config: Any, limit: int | None = None) -> Any:
        """Scores an exported model on a split through ``serving_default`` (``config``: EvaluateConfig)."""
        raise NotImplementedError

    def serving_function(self, saved_model_dir: str, manifest: Mapping[str, Any]) -> tuple[Any, Any]:
        """Loads a SavedModel and checks that ``serving_default`` fits the dataset.

        Returns:
            (the loaded object, which must be kept alive, and the signature function).
        """
        raise NotImplementedError

    def known_examples(self, dataset_dir: str, split: str, count: int) -> list[tuple[bytes, Any]]:
        """``count`` (encoded image, expected answer) pairs from a split, for the serving checks."""
        raise NotImplementedError

    def describe(self, summary: Mapping[str, Any]) -> Sequence[str]:
        """Model-card lines on the final training metrics (Markdown)."""
        return []
