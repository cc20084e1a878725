"""Detection's batch prediction (the task's facet, :class:`DetectionPrediction`): letterboxing per
image, boxes in the original pixels, COCO results and AP.

``serving_tensors`` returns boxes normalised to the letterboxed square (it is told a scale of 1
and the square's size); the meta vector each image carries, ``[scale, height, width]``, maps them
back: letterboxed pixels / scale are the original's, so a normalised coordinate times the square's
side over the scale, the original's longer side, is a pixel, then clipped to the image as
``serving_default`` clips. Records are::

    {"detections": [{"box": [xmin, ymin, xmax, ymax], "class": name, "class_id": id, "score": s}, ...],
     "width": w, "height": h}

with label-map ids (class index + 1), sorted by score, at or over the threshold, at most ``top_k``.
TensorFlow is imported inside :func:`prediction_input`; the rest is NumPy and pycocotools.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np

from trainer.tasks.base import Prediction, PredictionInput, ServingSchema, TaskError, load_tensor_signature
from trainer.tasks.detection.export import OUTPUTS


def class_names_of(fn: Any, where: str) -> tuple[str, ...]:
    """The class names a detector's export keeps: the ``["", *class_names]`` table its signatures
    gather ``detection_class_names`` from, a string constant the functions capture.

    Raises:
        TaskError: no such table, or more than one.
    """
    import tensorflow as tf

    tables = [
        [name.decode("utf-8") for name in c.numpy()]
        for c in fn.captured_inputs
        if c.dtype == tf.string and c.shape.rank == 1 and c.shape[0] and c.numpy()[0] == b""
    ]
    if len(tables) != 1:
        raise TaskError(
            f"{where}: found {len(tables)} class-name tables in the detector's signature, expected the one "
            "trainer.tasks.detection.export writes; re-export the model with this code"
        )
    return tuple(tables[0][1:])


def prediction_input(saved_model_dir: str, schema: ServingSchema) -> PredictionInput:
    """``serving_tensors`` fed by ``serving_default``'s decoding and letterbox; meta ``[scale, height, width]``.

    Raises:
        TaskError: the folder is not a detector's export.
    """
    import tensorflow as tf

    from trainer.tasks.detection.input import letterbox

    loaded, fn, shape = load_tensor_signature(saved_model_dir, schema.tensor_signature, "images")
    if set(fn.structured_outputs) != set(OUTPUTS) or shape[0] != shape[1]:
        raise TaskError(
            f"{saved_model_dir}: signature {schema.tensor_signature!r} takes {shape} and returns "
            f"{sorted(fn.structured_outputs)}; a detector's takes square images and returns {sorted(OUTPUTS)}"
        )
    size = shape[0]

    def preprocess(data: Any) -> tuple[Any, Any]:
        # What serving_functions' decode_one does, so the boxes equal serving_default's.
        image = tf.io.decode_image(data, channels=3, expand_animations=False)
        dims = tf.cast(tf.shape(image)[:2], tf.float32)
        boxed, scale = letterbox(image, size)
        return boxed, tf.stack([scale, dims[0], dims[1]])

    return PredictionInput(
        signature=schema.tensor_signature,
        input_name="images",
        image_shape=shape,
        preprocess=preprocess,
        class_names=class_names_of(fn, saved_model_dir),
        function=fn,
        loaded=loaded,
    )


def prediction_records(
    outputs: Mapping[str, Any], meta: Any, class_names: Sequence[str], score_threshold: float, top_k: int
) -> list[dict[str, Any]]:
    """Each image's detections in its own pixels (``[xmin, ymin, xmax, ymax]``), its width and height."""
    meta = np.asarray(meta, dtype=np.float32)
    heights, widths = meta[:, 1], meta[:, 2]
    side = np.maximum(heights, widths)[:, None, None]  # size / scale: the original's longer side
    yxyx = np.asarray(outputs["detection_boxes"], dtype=np.float32) * side
    limits = np.stack([widths, heights, widths, heights], axis=-1)[:, None, :]
    boxes = np.clip(yxyx[..., [1, 0, 3, 2]], 0.0, limits)
    scores = np.asarray(outputs["detection_scores"], dtype=np.float32)
    ids = np.asarray(outputs["detection_classes"]).astype(np.int64)
    counts = np.asarray(outputs["num_detections"]).astype(np.int64)
    # Python lists made by NumPy once per image (tolist), not a float() per value: with the export's
    # floor of 0.05 an image has dozens of boxes, and a small detector scores an image in a millisecond.
    names = ["", *class_names]
    records = []
    for i, n in enumerate(counts.tolist()):
        kept = np.flatnonzero(scores[i, :n] >= score_threshold)[:top_k]
        detections = [
            {"box": box, "class": names[c], "class_id": c, "score": score}
            for box, c, score in zip(
                boxes[i, kept].tolist(), ids[i, kept].tolist(), scores[i, kept].tolist(), strict=True
            )
        ]
        records.append({"detections": detections, "width": round(float(widths[i])), "height": round(float(heights[i]))})
    return records


def predicted_classes(record: Mapping[str, Any]) -> list[str]:
    """Every detection's class."""
    return [d["class"] for d in record["detections"]]


def coco_results(
    record: Mapping[str, Any], image_id: int, category_ids: Optional[Mapping[str, int]] = None
) -> list[dict[str, Any]]:
    """The record's detections as COCO results: ``bbox`` ``[x, y, width, height]`` in pixels.

    Raises:
        TaskError: ``category_ids`` lacks one of the record's classes.
    """
    results = []
    for d in record["detections"]:
        xmin, ymin, xmax, ymax = d["box"]
        if category_ids is None:
            category = d["class_id"]
        elif d["class"] in category_ids:
            category = int(category_ids[d["class"]])
        else:
            raise TaskError(
                f"class {d['class']!r} has no category in the COCO file (it has {sorted(category_ids)}): "
                "score with a model trained on that file's categories"
            )
        results.append(
            {"image_id": int(image_id), "category_id": category, "bbox": [xmin, ymin, xmax - xmin, ymax - ymin],
             "score": d["score"]}
        )  # fmt: skip
    return results


def _as_evaluated(
    record: Mapping[str, Any], truth: Sequence[Mapping[str, Any]], index: dict[str, int]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A record and its true boxes in the evaluation's forms (normalised ``yxyx``, served-format outputs)."""
    h, w = float(record["height"]), float(record["width"])

    def normalised(box: Sequence[float]) -> list[float]:
        xmin, ymin, xmax, ymax = box
        return [ymin / h, xmin / w, ymax / h, xmax / w]

    unknown = sorted({t["class"] for t in truth} - set(index))
    if unknown:
        raise TaskError(f"labels {unknown[:5]} are not classes of the model, whose classes are {sorted(index)}")
    image = {
        "height": record["height"],
        "width": record["width"],
        "boxes": [normalised(t["box"]) for t in truth],
        "labels": [index[t["class"]] for t in truth],
        "crowd": [0] * len(truth),
    }
    found = record["detections"]
    served = {
        "detection_boxes": [normalised(d["box"]) for d in found],
        "detection_scores": [d["score"] for d in found],
        "detection_classes": [d["class_id"] for d in found],
        "num_detections": len(found),
    }
    return image, served


def prediction_metrics(
    records: Sequence[Mapping[str, Any]], truths: Sequence[Sequence[Mapping[str, Any]]], class_names: Sequence[str]
) -> dict[str, float]:
    """COCO ``ap``, ``ap50``, ``ap75``, ``ar100`` and ``num_examples`` (the evaluation's :func:`coco_evaluate`).

    ``truths`` holds each image's true boxes, ``{"box": [xmin, ymin, xmax, ymax] pixels, "class": name}``.
    The records are scored as they were kept: a high score threshold or a small ``top_k`` lowers AP.

    Raises:
        TaskError: no records, counts that differ, or a label that is not one of the model's classes.
    """
    from trainer.tasks.detection.evaluation import coco_evaluate

    if not records:
        raise TaskError("no scored images to compute metrics on: every image failed or none were labelled")
    if len(records) != len(truths):
        raise TaskError(f"{len(truths)} labels for {len(records)} scored images: give one list of boxes per image")
    index = {name: i for i, name in enumerate(class_names)}
    pairs = [_as_evaluated(r, t, index) for r, t in zip(records, truths, strict=True)]
    result = coco_evaluate([p[0] for p in pairs], [p[1] for p in pairs], list(class_names))
    return dict(result.metrics)


def truth_of_record(features: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """A converted record's boxes as labels: ``{"box": [xmin, ymin, xmax, ymax] pixels, "class"}``, crowd left out.

    Records keep boxes normalised to the image; its ``image/height`` and ``image/width`` scale them.
    """
    height = float(features["image/height"][0])
    width = float(features["image/width"][0])
    coords = [features.get(f"image/object/bbox/{k}") or [] for k in ("xmin", "ymin", "xmax", "ymax")]
    names = features.get("image/object/class/text") or []
    crowd = features.get("image/object/is_crowd") or [0] * len(names)
    return [
        {"box": [x0 * width, y0 * height, x1 * width, y1 * height], "class": name.decode("utf-8")}
        for x0, y0, x1, y1, name, is_crowd in zip(*coords, names, crowd, strict=True)
        if not is_crowd
    ]


class DetectionPrediction(Prediction):
    """A detector's batch prediction: boxes in each image's pixels, COCO results, AP on labelled images."""

    top_k = 100
    writes_coco = True

    def load(self, saved_model_dir: str) -> PredictionInput:
        """``serving_tensors`` fed by ``serving_default``'s letterbox; the class names the export keeps.

        The input size is the signature's, so the task's own options are not needed.
        """
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
        """``{"detections": [{"box", "class", "class_id", "score"}, ...], "width", "height"}``, boxes
        ``[xmin, ymin, xmax, ymax]`` in the original image's pixels.
        """
        return prediction_records(outputs, meta, class_names, score_threshold, top_k)

    def truth(self, features: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
        """The record's boxes (crowd boxes left out) in pixels with their class names."""
        return truth_of_record(features)

    def predicted_classes(self, record: Mapping[str, Any]) -> list[str]:
        """Every detection's class."""
        return predicted_classes(record)

    def coco_results(
        self, record: Mapping[str, Any], image_id: int, *, category_ids: Optional[Mapping[str, int]] = None
    ) -> list[dict[str, Any]]:
        """The detections as COCO results, ``bbox`` ``[x, y, width, height]`` in pixels."""
        return coco_results(record, image_id, category_ids)

    def metrics(
        self, records: Sequence[Mapping[str, Any]], truths: Sequence[Any], class_names: Sequence[str]
    ) -> dict[str, float]:
        """COCO AP, AP@0.5, AP@0.75 and AR@100; ``truths``: lists of ``{"box": [xmin, ymin, xmax, ymax], "class"}``."""
        return prediction_metrics(records, truths, class_names)
