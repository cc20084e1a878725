"""A small sample of scored test images, for a person to look at (the run report's image grid).

The evaluation's figures say how often the model is wrong; the sample shows on what. It is a few
dozen of the split's own encoded images (a few hundred bytes each for Fashion-MNIST) with their
true and predicted labels, mistakes first, as one JSON file.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from trainer import model_folder

# How many images the sample reads and scores, and how many it keeps.
SCANNED = 256
KEPT = 32
# At most this many of the kept images are mistakes: the grid shows what goes right as well.
MISTAKES = 16


def _mime(data: bytes) -> str:
    if data.startswith(b"\x89PNG"):
        return "image/png"
    if data.startswith(b"\xff\xd8"):
        return "image/jpeg"
    if data.startswith(b"GIF8"):
        return "image/gif"
    if data.startswith(b"BM"):
        return "image/bmp"
    return "application/octet-stream"


def pick(labels: Sequence[int], predictions: Sequence[int], kept: int = KEPT, mistakes: int = MISTAKES) -> list[int]:
    """Indices of the examples to keep: up to ``mistakes`` wrong ones, then right ones, in order.

    Args:
        labels: true class per scanned example.
        predictions: predicted class per scanned example.
        kept: how many to keep in all.
        mistakes: the most wrong ones among them.

    Returns:
        Indices into the scanned examples, mistakes first.
    """
    wrong = [i for i, (t, p) in enumerate(zip(labels, predictions, strict=True)) if t != p][:mistakes]
    right = [i for i, (t, p) in enumerate(zip(labels, predictions, strict=True)) if t == p]
    return (wrong + right)[:kept]


def sample_record(
    images: Sequence[bytes], labels: Sequence[int], probabilities: np.ndarray, class_names: Sequence[str], split: str
) -> dict[str, Any]:
    """The sample's JSON: ``split``, ``class_names`` and ``images`` (data, mime, true, predicted, score).

    Args:
        images: the scanned examples' encoded images.
        labels: their true classes.
        probabilities: [n, classes] predicted probabilities.
        class_names: the class names, index = label.
        split: the split they come from.
    """
    probabilities = np.asarray(probabilities)
    predictions = probabilities.argmax(axis=1).tolist()
    items = []
    for i in pick(list(labels), predictions):
        items.append(
            {
                "data": base64.b64encode(images[i]).decode("ascii"),
                "mime": _mime(images[i]),
                "true": class_names[int(labels[i])],
                "predicted": class_names[predictions[i]],
                "score": round(float(probabilities[i, predictions[i]]), 4),
            }
        )
    return {"split": split, "class_names": list(class_names), "scanned": len(images), "images": items}


def classification_sample(task: Any, model_dir: str, dataset_dir: str, split: str) -> dict[str, Any]:
    """The first examples of a split scored through ``serving_default``: their probabilities per class."""
    from trainer.evaluate import read_encoded_split
    from trainer.tasks.classification.evaluation import predict_bytes

    images, labels, info = read_encoded_split(dataset_dir, split, SCANNED)
    _loaded, fn = task.serving_function(model_folder.saved_model_dir(model_dir), info)
    probabilities = predict_bytes(fn, images, 128)
    return sample_record(images, labels.tolist(), probabilities, list(info.classes), split)


def write_sample(model_dir: str, dataset_dir: str, path: str, split: str = "test") -> dict[str, Any]:
    """Scores the first examples of a split with the model's ``serving_default`` and writes the sample.

    Only tasks whose renderers make a sample (classification: probabilities per class) have one;
    for the others the file says so with an empty ``images`` list.

    Args:
        model_dir: the Model artifact's folder (``saved_model/`` inside).
        dataset_dir: the Dataset artifact's folder.
        path: the JSON file to write.
        split: the split to sample.

    Returns:
        The record written.
    """
    from components.evaluate.renderers import renderers_of
    from trainer.tasks import task_of_model

    task = task_of_model(model_dir)
    sample = renderers_of(task.name).sample
    if sample is None:
        record: dict[str, Any] = {"split": split, "task": task.name, "class_names": [], "scanned": 0, "images": []}
    else:
        record = {"task": task.name, **sample(task, model_dir, dataset_dir, split)}
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(record, f)
    return record
