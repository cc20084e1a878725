"""Classification's batch prediction (the task's facet, :class:`ClassificationPrediction`): the
export's decoding per image, top-k records, accuracy.

Records are ``{"classes": [{"class": name, "index": i, "score": p}, ...]}``: the top ``top_k``
classes by probability, highest first, those scoring less than the threshold left out (so a record
may be empty). The arithmetic on records is plain Python and NumPy; TensorFlow is imported inside
:func:`prediction_input`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np

from trainer.tasks.base import (
    Prediction,
    PredictionInput,
    ServingSchema,
    TaskError,
    check_saved_model,
    load_tensor_signature,
)


def prediction_input(saved_model_dir: str, schema: ServingSchema) -> PredictionInput:
    """The tensor signature, ``serving_default``'s decoder (:func:`~.export._image_decoder`) and
    the class names of ``assets/labels.txt``.

    Raises:
        TaskError: the folder is not a classifier's export (no labels file, or as many
            probabilities as there are labels).
    """
    import tensorflow as tf

    from trainer.tasks.classification.export import _image_decoder, read_class_names

    check_saved_model(saved_model_dir)
    try:  # before the model is loaded: another task's export fails here, at once
        class_names = tuple(read_class_names(saved_model_dir))
    except FileNotFoundError as err:
        raise TaskError(f"{err}; is it a classifier's export? Score another task's model with its own task") from None
    loaded, fn, shape = load_tensor_signature(saved_model_dir, schema.tensor_signature, "images")
    width = fn.structured_outputs.get("probabilities")
    if width is None or width.shape[-1] != len(class_names):
        raise TaskError(
            f"{saved_model_dir}: signature {schema.tensor_signature!r} returns {sorted(fn.structured_outputs)} "
            f"where a classifier returns 'probabilities' over its {len(class_names)} labels"
        )
    decode_one = _image_decoder(*shape)
    no_meta = tf.zeros([0], tf.float32)

    def preprocess(data: Any) -> tuple[Any, Any]:
        return decode_one(data), no_meta

    return PredictionInput(
        signature=schema.tensor_signature,
        input_name="images",
        image_shape=shape,
        preprocess=preprocess,
        class_names=class_names,
        function=fn,
        loaded=loaded,
    )


def prediction_records(
    outputs: Mapping[str, Any], class_names: Sequence[str], score_threshold: float, top_k: int
) -> list[dict[str, Any]]:
    """The top ``top_k`` classes of each image scoring at least ``score_threshold``, highest first."""
    probabilities = np.asarray(outputs["probabilities"], dtype=np.float32)
    k = min(top_k, probabilities.shape[1])
    # A stable sort on the negated scores: equal scores keep the lower index first, as argmax does.
    order = np.argsort(-probabilities, axis=1, kind="stable")[:, :k]
    records = []
    for row, top in zip(probabilities, order, strict=True):
        records.append(
            {
                "classes": [
                    {"class": class_names[i], "index": int(i), "score": float(row[i])}
                    for i in top
                    if row[i] >= score_threshold
                ]
            }
        )
    return records


def predicted_classes(record: Mapping[str, Any]) -> list[str]:
    """The top class, or none when every class scored under the threshold."""
    classes = record["classes"]
    return [classes[0]["class"]] if classes else []


def prediction_metrics(
    records: Sequence[Mapping[str, Any]], truths: Sequence[str], class_names: Sequence[str]
) -> dict[str, float]:
    """``accuracy`` (top class right), ``top_k_accuracy`` (the right class among the record's),
    ``num_examples``, and ``recall/<class>`` for each class among the labels.

    An image whose every class scored under the threshold counts as wrong.

    Raises:
        TaskError: no records, counts that differ, or a label that is not one of the model's classes.
    """
    if not records:
        raise TaskError("no scored images to compute metrics on: every image failed or none were labelled")
    if len(records) != len(truths):
        raise TaskError(f"{len(truths)} labels for {len(records)} scored images: give one label per image")
    unknown = sorted({str(t) for t in truths} - set(class_names))
    if unknown:
        raise TaskError(f"labels {unknown[:5]} are not classes of the model, whose classes are {list(class_names)}")
    top = [predicted_classes(r) for r in records]
    right = np.array([t[:1] == [truth] for t, truth in zip(top, truths, strict=True)])
    among = np.array([truth in {c["class"] for c in r["classes"]} for r, truth in zip(records, truths, strict=True)])
    labels = np.array(truths, dtype=object)
    metrics = {
        "accuracy": float(right.mean()),
        "top_k_accuracy": float(among.mean()),
        "num_examples": float(len(records)),
    }
    for name in class_names:
        of_class = labels == name
        if of_class.any():
            metrics[f"recall/{name}"] = float(right[of_class].mean())
    return metrics


class ClassificationPrediction(Prediction):
    """A classifier's batch prediction: the top classes of each image, accuracy on labelled ones."""

    def load(self, saved_model_dir: str) -> PredictionInput:
        """``serving_tensors`` fed by ``serving_default``'s decoder; the classes of ``assets/labels.txt``."""
        return prediction_input(saved_model_dir, self.task.serving)

    def records(
        self,
        outputs: Mapping[str, Any],
        meta: Any,
        *,
        class_names: Sequence[str],
        score_threshold: float,
        top_k: int,
    ) -> list[dict[str, Any]]:
        """``{"classes": [{"class", "index", "score"}, ...]}``: the top ``top_k`` at or over the threshold."""
        return prediction_records(outputs, class_names, score_threshold, top_k)

    def truth(self, features: Mapping[str, Sequence[Any]]) -> Optional[str]:
        """The record's class name; None for a record without a class."""
        text = features.get("image/class/text") or [b""]
        return text[0].decode("utf-8") or None

    def predicted_classes(self, record: Mapping[str, Any]) -> list[str]:
        """The top class (none when every class scored under the threshold)."""
        return predicted_classes(record)

    def metrics(
        self, records: Sequence[Mapping[str, Any]], truths: Sequence[Any], class_names: Sequence[str]
    ) -> dict[str, float]:
        """Accuracy, top-k accuracy and recall per class; ``truths`` are class names."""
        return prediction_metrics(records, truths, class_names)
