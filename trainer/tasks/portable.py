"""What a task says of its model's portable forms (the export step): a facet of the task.

The export step converts a blessed model's *body* (float tensors in, raw outputs out) to other
runtimes (LiteRT, ONNX) and scores each through its own runtime. What differs by task is here:
how the body is called, how a split's images become the body's input (as ``serving_default``
decodes them), how the raw outputs become predictions (a classifier's probabilities; a detector's
decoding and per-class NMS, with the task's own functions), the task's metrics of those
predictions, and the agreement of two sets of predictions. A task without it
(:meth:`Task.portable` returns None) gets an empty export that says so.

No TensorFlow here: the task's module imports it when called.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np


@dataclasses.dataclass(frozen=True)
class Samples:
    """A split's images as the body takes them, and what scoring them needs.

    Attributes:
        images: float32 ``[N, H, W, C]``, decoded as ``serving_default`` decodes them.
        encoded: the encoded images (what the served model's ``serving_default`` takes).
        truth: the task's own truth (labels, or records with boxes) and what its predictions
            need besides the raw outputs (a letterbox's scales and the original sizes).
    """

    images: np.ndarray
    encoded: list[bytes]
    truth: Any


class Portable(abc.ABC):
    """A task's side of the export: the body, its inputs, its predictions, its metrics.

    Attributes:
        headline: the metric a tolerance is in points of (``accuracy``, ``ap50``).
        agreement_name: what :meth:`agreement` measures, in words for the table.
    """

    headline: ClassVar[str]
    agreement_name: ClassVar[str]

    @abc.abstractmethod
    def load(self, keras_file: str) -> Any:
        """The trained Keras model of a local ``model.keras`` file."""

    @abc.abstractmethod
    def body(self, model: Any) -> Callable[[Any], Mapping[str, Any]]:
        """``images -> {name: raw output}``: what is converted (no decoding, no NMS)."""

    @abc.abstractmethod
    def input_shape(self, model: Any) -> tuple[int, int, int]:
        """The body's fixed ``(height, width, channels)``."""

    @abc.abstractmethod
    def samples(self, dataset_dir: str, split: str, limit: int, shape: tuple[int, int, int]) -> Samples:
        """The first ``limit`` images of a split, decoded for a body of ``shape``, with their truth."""

    @abc.abstractmethod
    def decode(self, raw: Mapping[str, np.ndarray], truth: Any, start: int) -> Any:
        """A batch's raw outputs as the served model returns them (images ``start`` on of the samples):
        what is timed after each runtime.
        """

    @abc.abstractmethod
    def rows(self, decoded: Any) -> list[Any]:
        """One prediction per image of :meth:`decode`'s outputs."""

    def predictions(self, raw: Mapping[str, np.ndarray], truth: Any, start: int) -> list[Any]:
        """The predictions of a batch's raw outputs (images ``start`` on of the samples)."""
        return self.rows(self.decode(raw, truth, start))

    @abc.abstractmethod
    def metrics(self, predictions: list[Any], truth: Any) -> dict[str, float]:
        """The task's metrics of predictions over all the samples."""

    @abc.abstractmethod
    def agreement(self, reference: list[Any], other: list[Any]) -> float:
        """How much ``other`` agrees with ``reference``, in [0, 1] (top-1 agreement, matched-box IoU)."""

    # -- serving a portable format (the local model server, batch prediction) -----------------

    raw_outputs: ClassVar[tuple[str, ...]] = ()
    """The body's raw outputs, sorted: the names a runtime's outputs are given, in that order."""

    def bind(self, class_names: Sequence[str], shape: tuple[int, int, int]) -> None:
        """Prepares :meth:`serving_outputs` without the Keras model (a detector's anchors and class names)."""
        return None  # a classifier needs nothing

    def serving_inputs(self, encoded: Sequence[bytes], shape: tuple[int, int, int]) -> tuple[np.ndarray, Any]:
        """Encoded images as the body takes them (as ``serving_default`` decodes them), and what
        :meth:`serving_outputs` needs of them besides the raw outputs.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot serve a portable format")

    def tensor_inputs(self, count: int, shape: tuple[int, int, int]) -> Any:
        """What :meth:`serving_outputs` needs for ``count`` images given as tensors (``serving_tensors``)."""
        raise NotImplementedError(f"{type(self).__name__} cannot serve a portable format")

    def serving_outputs(self, raw: Mapping[str, np.ndarray], context: Any) -> dict[str, np.ndarray]:
        """The served SavedModel's outputs (same keys, dtypes and shapes) from a batch's raw outputs."""
        raise NotImplementedError(f"{type(self).__name__} cannot serve a portable format")

    @abc.abstractmethod
    def served(self, saved_model_dir: str) -> tuple[Callable[[list[bytes]], list[Any]], Callable[[np.ndarray], Any]]:
        """``(encoded -> predictions, images -> outputs)``: the served SavedModel's two signatures."""
