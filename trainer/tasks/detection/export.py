"""Detection's export: TF-OD-API-style ``serving_default`` and ``serving_tensors``, and in-process prediction.

``serving_default`` takes encoded images and returns, like the TensorFlow Object Detection API's
exported models, ``detection_boxes`` (normalised ``[ymin, xmin, ymax, xmax]`` of the *original*
image), ``detection_scores``, ``detection_classes`` (float32 label-map ids: class index + 1, 0
for padding), ``detection_class_names`` and ``num_detections``: up to 100 detections sorted by
score, down to a score of 0.05 (clients filter by score). NMS is per class (COCO practice), with
``tf.image.combined_non_max_suppression``, which takes any batch size (keras-hub's own NMS is
class-agnostic and needs a static batch in a SavedModel).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Optional

from trainer.tasks.detection.input import letterbox
from trainer.tasks.detection.model import anchors_of
from trainer.tasks.detection.options import DetectorOptions

OUTPUTS = ("detection_boxes", "detection_scores", "detection_classes", "detection_class_names", "num_detections")


def detections(raw: Any, anchors: Any, opts: DetectorOptions, names: Any, scales, heights, widths) -> dict[str, Any]:
    """The serving outputs of the model's raw heads: decode, per-class NMS, rescale to the originals.

    Also what the export step runs after another runtime's model body: the same decoding and NMS.
    """
    import tensorflow as tf

    scores = tf.sigmoid(tf.cast(raw["cls_logits"], tf.float32))
    boxes = decode_boxes(raw["bbox_regression"], anchors, opts)
    nms = tf.image.combined_non_max_suppression(
        boxes[:, :, None, :],
        scores,
        max_output_size_per_class=opts.max_detections,
        max_total_size=opts.max_detections,
        iou_threshold=opts.nms_iou,
        score_threshold=opts.score_threshold,
        clip_boxes=False,
    )
    # Letterboxed pixels -> the original image's normalised coordinates.
    factor = tf.stack([heights, widths, heights, widths], axis=-1) * scales[:, None]
    out_boxes = tf.clip_by_value(nms.nmsed_boxes / factor[:, None, :], 0.0, 1.0)
    valid = tf.sequence_mask(nms.valid_detections, opts.max_detections)
    ids = tf.where(valid, nms.nmsed_classes + 1.0, 0.0)
    return {
        "detection_boxes": tf.where(valid[..., None], out_boxes, 0.0),
        "detection_scores": tf.where(valid, nms.nmsed_scores, 0.0),
        "detection_classes": ids,
        "detection_class_names": tf.gather(names, tf.cast(ids, tf.int32)),
        "num_detections": tf.cast(nms.valid_detections, tf.float32),
    }


def decode_boxes(raw_boxes: Any, anchors: Any, opts: DetectorOptions) -> Any:
    """The box head's output -> absolute yxyx boxes in the letterboxed image, for either head.

    Four values per location are RetinaNet's offsets from its anchors; ``4 x box_bins`` are the
    dfl head's edge distributions (``edges.py``), read from the locations' centres and strides.
    """
    import keras
    import tensorflow as tf

    raw_boxes = tf.cast(raw_boxes, tf.float32)
    if raw_boxes.shape[-1] != 4:
        from trainer.tasks.detection.edges import decode_edges

        return decode_edges(raw_boxes, anchors, opts.anchor_size, raw_boxes.shape[-1] // 4)
    size = opts.image_size
    return keras.utils.bounding_boxes.decode_deltas_to_boxes(
        anchors=anchors,
        boxes_delta=raw_boxes,
        encoded_format="center_xywh",
        anchor_format="yxyx",
        box_format="yxyx",
        image_shape=(size, size, 3),
    )


def _detect_fn(model: Any, opts: DetectorOptions, class_names: list[str]):
    """``(letterboxed images, scales, heights, widths) -> the serving outputs``: decode, NMS, rescale."""
    import tensorflow as tf

    anchors = tf.constant(anchors_of(model.anchor_generator, opts.image_size))
    names = tf.constant(["", *class_names])

    # A preset's pixel scaling (the task's preprocessor, which fit applies in the input pipeline).
    pixels = model.preprocessor

    # One function under both signatures: the model's graph is traced once, not once per signature.
    size, scalars = opts.image_size, tf.TensorSpec([None], tf.float32)

    @tf.function(input_signature=[tf.TensorSpec([None, size, size, 3], tf.float32), scalars, scalars, scalars])
    def detect(images, scales, heights, widths):
        raw = model(images if pixels is None else pixels(images), training=False)
        return detections(raw, anchors, opts, names, scales, heights, widths)

    return detect


def letterboxed(data: Any, size: int) -> tuple[Any, Any, Any, Any]:
    """``encoded image -> (letterboxed float image, scale, height, width)``, as ``serving_default`` decodes."""
    import tensorflow as tf

    image = tf.io.decode_image(data, channels=3, expand_animations=False)
    dims = tf.cast(tf.shape(image)[:2], tf.float32)
    boxed, scale = letterbox(image, size)
    return boxed, scale, dims[0], dims[1]


def serving_functions(model: Any, class_names: list[str], opts: DetectorOptions) -> tuple[Any, Any]:
    """``(serve_bytes, serve_tensors)``: the export's two ``tf.function`` signatures over the model.

    Also what the training's validation scores the model in memory with: what is served is what
    is scored.
    """
    import tensorflow as tf

    size = opts.image_size
    detect = _detect_fn(model, opts, class_names)

    def decode_one(data):
        return letterboxed(data, size)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
    def serve_bytes(image_bytes):
        scalar = tf.TensorSpec([], tf.float32)
        images, scales, heights, widths = tf.map_fn(
            decode_one,
            image_bytes,
            fn_output_signature=(tf.TensorSpec([size, size, 3], tf.float32), scalar, scalar, scalar),
        )
        return detect(images, scales, heights, widths)

    @tf.function(input_signature=[tf.TensorSpec([None, size, size, 3], tf.float32, name="images")])
    def serve_tensors(images):
        ones = tf.ones(tf.shape(images)[:1], tf.float32)
        return detect(images, ones, ones * size, ones * size)

    return serve_bytes, serve_tensors


def export_detector(model: Any, export_dir: str, class_names: list[str], opts: DetectorOptions) -> str:
    """Writes the detector as a SavedModel with ``serving_default`` (bytes) and ``serving_tensors``."""
    import tensorflow as tf

    serve_bytes, serve_tensors = serving_functions(model, class_names, opts)
    module = tf.Module()
    module.model = model
    module.serve_bytes = serve_bytes
    module.serve_tensors = serve_tensors
    tf.saved_model.save(
        module,
        export_dir,
        signatures={
            "serving_default": serve_bytes.get_concrete_function(),
            "serving_tensors": serve_tensors.get_concrete_function(),
        },
    )
    return export_dir


def predict_in_process(
    fn: Any,
    images: Sequence[bytes],
    batch_size: int,
    on_progress: Optional[Callable[..., None]] = None,
    on_answers: Optional[Callable[..., None]] = None,
) -> list[dict[str, Any]]:
    """Runs ``serving_default`` over encoded images; one prediction dict per image (as served: the
    REST answer's ``predictions`` after JSON, lists of floats and class names as text).

    ``on_progress(done, total)`` is told the images scored after each batch; ``on_answers(images,
    predictions)`` is handed each batch's images and their predictions.
    """
    import tensorflow as tf

    rows: list[dict[str, Any]] = []
    for start in range(0, len(images), batch_size):
        chunk = images[start : start + batch_size]
        out = fn(image_bytes=tf.constant(list(chunk), dtype=tf.string))
        arrays = {k: v.numpy() for k, v in out.items()}
        for i in range(len(arrays["num_detections"])):
            rows.append(
                {
                    "detection_boxes": arrays["detection_boxes"][i].tolist(),
                    "detection_scores": arrays["detection_scores"][i].tolist(),
                    "detection_classes": arrays["detection_classes"][i].tolist(),
                    "detection_class_names": [n.decode() for n in arrays["detection_class_names"][i]],
                    "num_detections": float(arrays["num_detections"][i]),
                }
            )
        if on_answers is not None:
            on_answers(chunk, rows[start:])
        if on_progress is not None:
            on_progress(len(rows), len(images))
    return rows
