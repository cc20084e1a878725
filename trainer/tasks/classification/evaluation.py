"""Classification's evaluation: loss, accuracy, top-k, per-class metrics and the confusion matrix.

The model is scored through its ``serving_default`` signature (encoded image bytes in, as the
server receives them), so what is measured is what will be served. The arithmetic on predictions
(:func:`classification_metrics`) is plain NumPy and needs no TensorFlow; TensorFlow is imported
only inside the functions that load a model or read records.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

import numpy as np

from trainer import slices as slicing
from trainer.evaluate import EvaluationError, read_encoded_split
from trainer.slices import SliceRow
from trainer.tasks.base import EvaluationResultBase, Metric

METRICS: tuple[Metric, ...] = (
    Metric("accuracy", True, "share of test images whose top class is right"),
    Metric("top_k_accuracy", True, "share whose right class is among the top k"),
    Metric("macro_precision", True, "precision averaged over classes"),
    Metric("macro_recall", True, "recall averaged over classes"),
    Metric("macro_f1", True, "F1 averaged over classes"),
    Metric("loss", False, "cross-entropy on the test split"),
)
# A training's figures (``TrainingSummary.metrics``): the last epoch's accuracies, validation first.
TRAINING_METRICS: tuple[Metric, ...] = (
    Metric("val_accuracy", True, "accuracy on the validation split, last epoch", label="validation accuracy"),
    Metric("train_accuracy", True, "accuracy on the training batches, last epoch", label="training accuracy"),
)
# The scalar metrics :func:`classification_metrics` produces: metric -> higher is better.
SCALAR_METRICS: dict[str, bool] = {m.name: m.higher_is_better for m in METRICS}
# The metrics each slice is scored by (trainer/slices.py); the first orders the slice table.
SLICE_METRICS: tuple[str, ...] = ("accuracy", "loss")


@dataclasses.dataclass(frozen=True)
class ClassificationEvaluation(EvaluationResultBase):
    """Everything an evaluation produces.

    Attributes:
        metrics: scalar metrics (the names of ``METRICS`` plus ``num_examples``).
        class_names: class names, index = label.
        confusion: confusion matrix, rows = true class, columns = predicted class.
        per_class: one dict per class: ``name``, ``precision``, ``recall``, ``f1``, ``support``.
        top_k: the k of ``top_k_accuracy``.
        slices: the slice table (``trainer.slices``), worst accuracy first.
    """

    metrics: dict[str, float]
    class_names: list[str]
    confusion: list[list[int]]
    per_class: list[dict[str, Any]]
    top_k: int
    slices: list[SliceRow] = dataclasses.field(default_factory=list)

    def output_files(self) -> dict[str, Any]:
        """``metrics.json`` and ``confusion.json`` (class names and matrix)."""
        return {**super().output_files(), "confusion.json": {"class_names": self.class_names, "matrix": self.confusion}}

    def confusion_matrix(self) -> Optional[tuple[list[str], list[list[int]]]]:
        """The class names and the matrix."""
        return list(self.class_names), self.confusion


def confusion_matrix(labels: np.ndarray, predictions: np.ndarray, num_classes: int) -> np.ndarray:
    """Counts (true, predicted) pairs.

    Args:
        labels: int array [n] of true classes.
        predictions: int array [n] of predicted classes.
        num_classes: size of the square matrix.

    Returns:
        int64 array [num_classes, num_classes], rows true, columns predicted.
    """
    matrix = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(matrix, (np.asarray(labels, np.int64), np.asarray(predictions, np.int64)), 1)
    return matrix


def per_class_metrics(matrix: np.ndarray, class_names: Sequence[str]) -> list[dict[str, Any]]:
    """Precision, recall, F1 and support per class from a confusion matrix.

    A class never predicted has precision 0 (not NaN), one never present recall 0, so that macro
    averages stay defined (scikit-learn's ``zero_division=0``).
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    true_pos = np.diag(matrix)
    predicted = matrix.sum(axis=0)
    support = matrix.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(predicted > 0, true_pos / predicted, 0.0)
        recall = np.where(support > 0, true_pos / support, 0.0)
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
    return [
        {
            "name": str(name),
            "precision": float(precision[i]),
            "recall": float(recall[i]),
            "f1": float(f1[i]),
            "support": int(support[i]),
        }
        for i, name in enumerate(class_names)
    ]


def most_confused_pairs(matrix: np.ndarray, class_names: Sequence[str], limit: int = 5) -> list[tuple[str, str, int]]:
    """The off-diagonal cells with the highest counts: (true name, predicted name, count)."""
    matrix = np.asarray(matrix)
    pairs = [
        (int(matrix[t, p]), t, p)
        for t in range(matrix.shape[0])
        for p in range(matrix.shape[1])
        if t != p and matrix[t, p] > 0
    ]
    pairs.sort(key=lambda item: (-item[0], item[1], item[2]))
    return [(class_names[t], class_names[p], count) for count, t, p in pairs[:limit]]


def classification_metrics(
    labels: np.ndarray, probabilities: np.ndarray, class_names: Sequence[str], top_k: int = 3
) -> ClassificationEvaluation:
    """All evaluation metrics from true labels and predicted probabilities (NumPy only).

    Args:
        labels: int array [n], true class indices.
        probabilities: float array [n, num_classes], rows summing to 1 (softmax output).
        class_names: names of the classes, index = label.
        top_k: k for ``top_k_accuracy`` (clipped to the number of classes).

    Returns:
        The metrics, the confusion matrix and the per-class table.

    Raises:
        EvaluationError: no examples, or shapes that do not match.
    """
    labels = np.asarray(labels, dtype=np.int64)
    probabilities = np.asarray(probabilities, dtype=np.float64)
    num_classes = len(class_names)
    if labels.size == 0:
        raise EvaluationError("no examples to evaluate: the split is empty")
    if probabilities.shape != (labels.size, num_classes):
        raise EvaluationError(
            f"probabilities have shape {probabilities.shape}, expected ({labels.size}, {num_classes}) "
            f"for {labels.size} labels and {num_classes} classes"
        )
    if labels.min() < 0 or labels.max() >= num_classes:
        raise EvaluationError(f"labels must be in 0..{num_classes - 1}, got {labels.min()}..{labels.max()}")
    predictions = probabilities.argmax(axis=1)
    k = min(top_k, num_classes)
    # argpartition is O(n*c) and the order inside the top k does not matter here.
    top = np.argpartition(-probabilities, k - 1, axis=1)[:, :k]
    eps = 1e-7  # Keras' epsilon: a zero probability gives a large but finite loss.
    picked = np.clip(probabilities[np.arange(labels.size), labels], eps, 1.0)
    matrix = confusion_matrix(labels, predictions, num_classes)
    per_class = per_class_metrics(matrix, class_names)
    metrics = {
        "accuracy": float((predictions == labels).mean()),
        "top_k_accuracy": float((top == labels[:, None]).any(axis=1).mean()),
        "macro_precision": float(np.mean([c["precision"] for c in per_class])),
        "macro_recall": float(np.mean([c["recall"] for c in per_class])),
        "macro_f1": float(np.mean([c["f1"] for c in per_class])),
        "loss": float(-np.log(picked).mean()),
        "num_examples": float(labels.size),
    }
    return ClassificationEvaluation(
        metrics=metrics,
        class_names=[str(c) for c in class_names],
        confusion=matrix.tolist(),
        per_class=per_class,
        top_k=k,
    )


def slice_table(
    labels: np.ndarray,
    probabilities: np.ndarray,
    class_names: Sequence[str],
    keys: Sequence[Sequence[str]],
    min_size: int = slicing.MIN_SLICE_SIZE,
) -> list[SliceRow]:
    """Accuracy and loss per slice: the records' slices (``keys``, record order) and each true class.

    Returns:
        The rows, worst accuracy first, the unscored (smaller than ``min_size``) last.
    """
    labels = np.asarray(labels, dtype=np.int64)
    by_class = [[slicing.slice_key("class", class_names[label])] for label in labels]
    members = slicing.group([*k, *c] for k, c in zip(keys, by_class, strict=True))

    def score(indices: Sequence[int]) -> dict[str, float]:
        picked = np.asarray(indices)
        chosen = probabilities[picked]
        truth = labels[picked]
        eps = 1e-7
        return {
            "accuracy": float((chosen.argmax(axis=1) == truth).mean()),
            "loss": float(-np.log(np.clip(chosen[np.arange(truth.size), truth], eps, 1.0)).mean()),
        }

    return slicing.worst_first(slicing.score_slices(members, score, min_size), (("accuracy", True), ("loss", False)))


def load_serving_signature(saved_model_dir: str, num_classes: int, signature: str = "serving_default"):
    """Loads a SavedModel and checks that its signature fits a dataset with ``num_classes`` classes.

    Args:
        saved_model_dir: the SavedModel folder (``<model>/saved_model``).
        num_classes: the number of classes of the dataset.
        signature: the signature to check and return.

    Returns:
        (the loaded object, which must be kept alive, and the signature function).

    Raises:
        EvaluationError: no SavedModel there, a missing signature, or one that does not fit.
    """
    import tensorflow as tf

    if not tf.io.gfile.exists(os.path.join(saved_model_dir, "saved_model.pb")):
        raise EvaluationError(
            f"no SavedModel at {saved_model_dir} (saved_model.pb missing); the model artifact must "
            "hold the export made by trainer.tasks.classification.export.export_saved_model under saved_model/"
        )
    loaded = tf.saved_model.load(saved_model_dir)
    if signature not in loaded.signatures:
        raise EvaluationError(
            f"SavedModel {saved_model_dir} has no signature {signature!r}; it has "
            f"{sorted(loaded.signatures)}. Export it with trainer.tasks.classification.export.export_saved_model."
        )
    fn = loaded.signatures[signature]
    expected_input = "image_bytes" if signature == "serving_default" else "images"
    inputs = fn.structured_input_signature[1]
    if expected_input not in inputs:
        raise EvaluationError(
            f"signature {signature!r} of {saved_model_dir} takes {sorted(inputs)}, expected "
            f"{expected_input!r} (docs/CONTRACTS.md, SavedModel signatures)"
        )
    outputs = fn.structured_outputs
    if "probabilities" not in outputs:
        raise EvaluationError(
            f"signature {signature!r} of {saved_model_dir} returns {sorted(outputs)}, expected "
            "'probabilities' and 'classes'"
        )
    width = outputs["probabilities"].shape[-1]
    if width is not None and int(width) != num_classes:
        raise EvaluationError(
            f"the model predicts {int(width)} classes but the dataset has {num_classes}: it was not "
            "trained on this dataset. Evaluate it on the dataset it was trained on."
        )
    return loaded, fn


def served_answers(outputs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One answer per image of a batch of ``serving_default`` outputs, as the server's REST answer
    has it after JSON: ``{"probabilities": [float, ...], "classes": int}`` (``classes`` where the
    signature returns it).
    """
    rows = [{"probabilities": p.tolist()} for p in np.asarray(outputs["probabilities"], dtype=np.float32)]
    if "classes" in outputs:
        for row, index in zip(rows, np.asarray(outputs["classes"]).reshape(-1), strict=True):
            row["classes"] = int(index)
    return rows


def predict_bytes(
    fn,
    images: Sequence[bytes],
    batch_size: int,
    on_progress: Optional[Callable[..., None]] = None,
    on_answers: Optional[Callable[[Sequence[bytes], list[dict[str, Any]]], None]] = None,
) -> np.ndarray:
    """Runs a ``serving_default`` signature over encoded images in batches; returns probabilities.

    ``on_progress(done, total)`` is told the images scored after each batch; ``on_answers(images,
    answers)`` is handed each batch's images and their answers as served (:func:`served_answers`).
    """
    import tensorflow as tf

    out = []
    for start in range(0, len(images), batch_size):
        chunk = images[start : start + batch_size]
        outputs = {k: v.numpy() for k, v in fn(image_bytes=tf.constant(list(chunk), dtype=tf.string)).items()}
        out.append(outputs["probabilities"])
        if on_answers is not None:
            on_answers(chunk, served_answers(outputs))
        if on_progress is not None:
            on_progress(min(start + batch_size, len(images)), len(images))
    return np.concatenate(out, axis=0)


def evaluate_saved_model(
    saved_model_dir: str,
    dataset_dir: str,
    split: str = "test",
    batch_size: int = 256,
    top_k: int = 3,
    limit: Optional[int] = None,
    on_progress: Optional[Callable[..., None]] = None,
    slice_columns: Optional[Sequence[str]] = None,
    slice_min_size: int = slicing.MIN_SLICE_SIZE,
    slice_size_edges: Sequence[int] = slicing.SIZE_EDGES,
    on_answers: Optional[Callable[..., None]] = None,
) -> ClassificationEvaluation:
    """Scores the exported SavedModel on a dataset split through its serving signature.

    The split, the slice columns and the signature are checked before any image is scored.

    Args:
        saved_model_dir: the SavedModel folder (``<model>/saved_model``).
        dataset_dir: the dataset folder with ``dataset.json``.
        split: the split to score.
        batch_size: examples per inference call.
        top_k: k for ``top_k_accuracy``.
        limit: score at most this many examples (a quick look); ``None`` for all.
        on_progress: ``(done, total)`` images scored, after each batch; None for no progress.
        slice_columns: the extra columns to slice by; None: every one the records have.
        slice_min_size: slices with fewer examples are listed, not scored.
        slice_size_edges: the image-size buckets' edges (shorter side, pixels).
        on_answers: ``(images, answers)`` of each batch, in the split's order, the answers as
            served (:func:`served_answers`); None: not wanted.

    Returns:
        The metrics, the confusion matrix, the per-class table and the slice table.
    """
    from trainer import tfrecords

    info = tfrecords.load_dataset_info(dataset_dir)
    info.split_count(split)
    class_names = list(info.classes)
    split_slices = slicing.read_split_slices(dataset_dir, split, limit, slice_columns, slice_size_edges)
    _loaded, fn = load_serving_signature(saved_model_dir, len(class_names))
    images, labels, _ = read_encoded_split(dataset_dir, split, limit)
    probabilities = predict_bytes(fn, images, batch_size, on_progress, on_answers)
    result = classification_metrics(labels, probabilities, class_names, top_k)
    table = slice_table(labels, probabilities, class_names, split_slices.keys, slice_min_size)
    return dataclasses.replace(result, slices=table)
