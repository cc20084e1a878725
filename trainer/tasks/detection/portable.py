"""The detector's portable forms (``trainer.tasks.portable``): the raw heads are converted; the
letterbox, the decoding and the per-class NMS stay the task's own (``export.py``), run after
whichever runtime ran the body, so every format is scored and timed with them included.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from trainer.tasks.detection.evaluation import box_iou
from trainer.tasks.detection.options import DetectorOptions
from trainer.tasks.portable import Portable, Samples

# The detections two sets are matched on: those a person would see (evaluation.EXAMPLE_SCORE),
# against any box of the other set down to a lower score.
REFERENCE_SCORE = 0.5
MATCH_SCORE = 0.3


class DetectionPortable(Portable):
    """The body is the detector's heads (``bbox_regression``, ``cls_logits``) over letterboxed images."""

    headline: ClassVar[str] = "ap50"
    agreement_name: ClassVar[str] = "matched-box IoU"

    def __init__(self, options: DetectorOptions):
        self.options = options
        self._bound: dict[str, Any] = {}

    def load(self, keras_file: str) -> Any:
        """A local ``model.keras`` (keras-hub's classes registered first)."""
        import keras
        import keras_hub  # noqa: F401  (registers RetinaNet's classes for deserialization)

        from trainer.tasks.detection import edges  # noqa: F401  (registers the dfl head's class)

        return keras.saving.load_model(keras_file, compile=False)

    def body(self, model: Any) -> Callable[[Any], Mapping[str, Any]]:
        """``images -> {bbox_regression, cls_logits}``; binds this facet to the model's anchors."""
        import tensorflow as tf

        from trainer.tasks.detection.model import anchors_of

        self._bound["anchors"] = tf.constant(anchors_of(model.anchor_generator, self.options.image_size))
        pixels = model.preprocessor

        def run(images: Any) -> Mapping[str, Any]:
            raw = model(images if pixels is None else pixels(images), training=False)
            return {"bbox_regression": raw["bbox_regression"], "cls_logits": raw["cls_logits"]}

        return run

    def input_shape(self, model: Any) -> tuple[int, int, int]:
        """The fitted square the detector letterboxes to."""
        return self.options.image_size, self.options.image_size, 3

    def samples(self, dataset_dir: str, split: str, limit: int, shape: tuple[int, int, int]) -> Samples:
        """Letterboxed as ``serving_default`` does; truth: the records, the scales and original sizes."""
        import tensorflow as tf

        from trainer import tfrecords
        from trainer.tasks.detection.export import letterboxed
        from trainer.tasks.detection.input import read_detection_split

        info = tfrecords.load_dataset_info(dataset_dir)
        records = read_detection_split(info, split, limit)
        decoded = [letterboxed(tf.constant(r["encoded"]), shape[0]) for r in records]
        images = np.stack([d[0].numpy() for d in decoded]).astype(np.float32)
        meta = np.asarray([[float(d[1]), float(d[2]), float(d[3])] for d in decoded], dtype=np.float32)
        self._bound["names"] = tf.constant(["", *info.classes])
        truth = {"records": records, "meta": meta, "classes": list(info.classes)}
        return Samples(images, [r["encoded"] for r in records], truth)

    def decode(self, raw: Mapping[str, np.ndarray], truth: Any, start: int) -> Any:
        """Decoding and per-class NMS (``export.detections``), boxes in the original images."""
        import tensorflow as tf

        from trainer.tasks.detection.export import detections

        meta = truth["meta"][start : start + len(raw["cls_logits"])]
        if "decode" not in self._bound:  # traced once: eager NMS costs more than the model body
            anchors, names = self._bound["anchors"], self._bound["names"]
            self._bound["decode"] = tf.function(
                reduce_retracing=True,
                func=lambda heads, scales, heights, widths: detections(
                    heads, anchors, self.options, names, scales, heights, widths
                ),
            )
        out = self._bound["decode"](
            {k: tf.constant(v) for k, v in raw.items()},
            tf.constant(meta[:, 0]),
            tf.constant(meta[:, 1]),
            tf.constant(meta[:, 2]),
        )
        return {k: v.numpy() for k, v in out.items()}

    def rows(self, decoded: Any) -> list[Any]:
        """Served-format predictions (``export.predict_in_process``'s)."""
        return _rows(decoded)

    def metrics(self, predictions: list[Any], truth: Any) -> dict[str, float]:
        """COCO AP and AP@0.5 (pycocotools, ``evaluation.coco_evaluate``)."""
        from trainer.tasks.detection.evaluation import coco_evaluate

        result = coco_evaluate(truth["records"], predictions, truth["classes"])
        return {"ap": result.metrics["ap"], "ap50": result.metrics["ap50"]}

    def agreement(self, reference: list[Any], other: list[Any]) -> float:
        """Mean IoU of each confident reference box with the best same-class box of ``other`` (0: none)."""
        ious = [_best_iou(box, label, other_one) for ref, other_one in zip(reference, other, strict=True)
                for box, label in _confident(ref, REFERENCE_SCORE)]  # fmt: skip
        return float(np.mean(ious)) if ious else 1.0

    raw_outputs: ClassVar[tuple[str, ...]] = ("bbox_regression", "cls_logits")

    def bind(self, class_names: Sequence[str], shape: tuple[int, int, int]) -> None:
        """The anchors from the options (as the model's generator makes them) and the class names."""
        import keras_hub
        import tensorflow as tf

        from trainer.tasks.detection.model import anchors_of

        opts = self.options
        generator = keras_hub.layers.AnchorGenerator(
            "yxyx", opts.min_level, opts.max_level, opts.num_scales, list(opts.aspect_ratios), opts.anchor_size
        )
        self._bound["anchors"] = tf.constant(anchors_of(generator, opts.image_size))
        self._bound["names"] = tf.constant(["", *class_names])

    def serving_inputs(self, encoded: Sequence[bytes], shape: tuple[int, int, int]) -> tuple[np.ndarray, Any]:
        """Letterboxed as ``serving_default`` does (in one traced call); each image's scale and original size."""
        import tensorflow as tf

        from trainer.tasks.detection.export import letterboxed

        if "letterbox" not in self._bound:  # traced once: eager decoding costs more than the model body
            scalar, size = tf.TensorSpec([], tf.float32), shape[0]
            specs = (tf.TensorSpec([size, size, 3], tf.float32), scalar, scalar, scalar)
            self._bound["letterbox"] = tf.function(
                lambda data: tf.map_fn(lambda one: letterboxed(one, size), data, fn_output_signature=specs),
                input_signature=[tf.TensorSpec([None], tf.string)],
            )
        images, scales, heights, widths = self._bound["letterbox"](tf.constant(list(encoded), dtype=tf.string))
        return images.numpy(), np.stack([scales.numpy(), heights.numpy(), widths.numpy()], axis=-1)

    def tensor_inputs(self, count: int, shape: tuple[int, int, int]) -> Any:
        """Letterboxed already, as ``serving_tensors`` takes them: scale 1, the square's size."""
        return np.tile(np.asarray([[1.0, shape[0], shape[1]]], dtype=np.float32), (count, 1))

    def serving_outputs(self, raw: Mapping[str, np.ndarray], context: Any) -> dict[str, np.ndarray]:
        """Decoding and per-class NMS (:meth:`decode`): the five outputs of ``serving_default``."""
        return self.decode(raw, {"meta": context}, 0)

    def served(self, saved_model_dir: str) -> tuple[Callable[[list[bytes]], list[Any]], Callable[[np.ndarray], Any]]:
        """``serving_default`` (bytes) for predictions, ``serving_tensors`` (decoding, NMS) for timing."""
        import tensorflow as tf

        from trainer.tasks.detection.export import predict_in_process

        loaded = tf.saved_model.load(saved_model_dir)
        by_bytes, by_tensors = loaded.signatures["serving_default"], loaded.signatures["serving_tensors"]

        def predict(encoded: list[bytes]) -> list[Any]:
            return predict_in_process(by_bytes, encoded, max(1, len(encoded)))

        def timed(images: np.ndarray) -> Any:
            return by_tensors(images=tf.constant(images))["num_detections"].numpy()

        timed.loaded = predict.loaded = loaded  # keeps the SavedModel alive
        return predict, timed


def _rows(arrays: Mapping[str, np.ndarray]) -> list[dict[str, Any]]:
    """One served-format prediction per image (as ``export.predict_in_process`` writes them)."""
    return [
        {
            "detection_boxes": arrays["detection_boxes"][i].tolist(),
            "detection_scores": arrays["detection_scores"][i].tolist(),
            "detection_classes": arrays["detection_classes"][i].tolist(),
            "detection_class_names": [n.decode() for n in arrays["detection_class_names"][i]],
            "num_detections": float(arrays["num_detections"][i]),
        }
        for i in range(len(arrays["num_detections"]))
    ]


def _confident(prediction: Mapping[str, Any], floor: float) -> list[tuple[list[float], float]]:
    count = int(prediction["num_detections"])
    return [
        (prediction["detection_boxes"][i], prediction["detection_classes"][i])
        for i in range(count)
        if prediction["detection_scores"][i] >= floor
    ]


def _best_iou(box: list[float], label: float, other: Mapping[str, Any]) -> float:
    found = [b for b, c in _confident(other, MATCH_SCORE) if c == label]
    return max((box_iou(box, b) for b in found), default=0.0)
