"""Detection's input: letterboxed images and -1-padded absolute ``yxyx`` boxes and labels.

Every image is letterboxed to ``image_size`` x ``image_size`` (aspect ratio kept, resized, padded
at the bottom and right) and its boxes go with it, as absolute-pixel ``yxyx`` (keras-hub's
relative formats fail in its anchor generator and its NMS); boxes and labels are padded with -1
to ``max_boxes``: static shapes throughout, as a TPU needs. Crowd boxes are not trained on
(dropped from the targets; the COCO evaluation still sees them as ``iscrowd``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainer.tfrecords import DatasetInfo

_ENCODED = "image/encoded"
_HEIGHT, _WIDTH = "image/height", "image/width"
_BOX_KEYS = ("image/object/bbox/ymin", "image/object/bbox/xmin", "image/object/bbox/ymax", "image/object/bbox/xmax")
_LABELS = "image/object/class/label"
_CROWD = "image/object/is_crowd"
FEATURE_KEYS = (_ENCODED, _HEIGHT, _WIDTH, *_BOX_KEYS, _LABELS, _CROWD)


def decode(features: Mapping[str, Any], shape: tuple[int, int, int], max_boxes: int) -> tuple[Any, Any]:
    """Letterboxed uint8 images and ``{"boxes": [B, M, 4] absolute yxyx, "labels": [B, M]}``, -1 padded."""
    import tensorflow as tf

    size = shape[0]

    def one(data):
        image, _scale = letterbox(tf.io.decode_image(data, channels=3, expand_animations=False), size)
        return tf.cast(tf.round(image * 255.0), tf.uint8)

    images = tf.map_fn(
        one, features[_ENCODED], fn_output_signature=tf.TensorSpec(shape, tf.uint8), parallel_iterations=16
    )
    return images, targets_of(features, size, max_boxes)


MOSAIC_MIN_AREA = 0.1
"""A box cut by a mosaic's window is kept when at least this share of its area is inside (as YOLO's)."""


def augment(
    images: Any, targets: Any, shape: tuple[int, int, int], seed: int | None, mosaic_chance: float = 0.0
) -> tuple[Any, Any]:
    """A mosaic for ``mosaic_chance`` of the images (:func:`mosaic`), then random horizontal flips,
    boxes moved with the images (padding stays -1).
    """
    import tensorflow as tf

    if mosaic_chance > 0:
        images, targets = mosaic(images, targets, shape[0], mosaic_chance, seed)
    width = float(shape[1])
    flip = tf.random.uniform([tf.shape(images)[0]], seed=seed) < 0.5
    images = tf.where(flip[:, None, None, None], tf.reverse(images, axis=[2]), images)
    boxes, labels = targets["boxes"], targets["labels"]
    flipped = tf.stack([boxes[..., 0], width - boxes[..., 3], boxes[..., 2], width - boxes[..., 1]], axis=-1)
    keep = flip[:, None, None] & (labels[..., None] >= 0)
    return images, {"boxes": tf.where(keep, flipped, boxes), "labels": labels}


def mosaic(images: Any, targets: Any, size: int, chance: float, seed: int | None) -> tuple[Any, Any]:
    """For ``chance`` of a batch's images: four of the batch's images side by side on a 2x2 canvas,
    and a window of the image's size cut from it at a random place, the boxes moved with it.

    Objects keep their size (no resizing, whole-pixel windows: the boxes stay exact); a box cut by
    the window keeps the part inside when at least :data:`MOSAIC_MIN_AREA` of it is, else it
    becomes padding. The boxes are padded to four times as many (the other images' too): static
    shapes, as a TPU needs.
    """
    import tensorflow as tf

    batch = tf.shape(images)[0]
    order = [tf.roll(tf.range(batch), -q, axis=0) for q in range(4)]  # quadrants: TL, TR, BL, BR
    parts = [tf.gather(images, i) for i in order]
    canvas = tf.concat([tf.concat(parts[:2], axis=2), tf.concat(parts[2:], axis=2)], axis=1)
    origin = tf.random.uniform([batch, 2], 0, size + 1, dtype=tf.int32, seed=seed)  # the window's top left
    cut = tf.map_fn(
        lambda a: tf.slice(a[0], tf.concat([a[1], [0]], axis=0), [size, size, -1]),
        (canvas, origin),
        fn_output_signature=tf.TensorSpec([size, size, images.shape[-1]], images.dtype),
    )
    corner = tf.cast(origin, tf.float32)
    boxes, labels = [], []
    for q, index in enumerate(order):
        shift = tf.constant([(q // 2) * size, (q % 2) * size], tf.float32) - corner  # [B, 2]
        moved = tf.gather(targets["boxes"], index) + tf.concat([shift, shift], axis=-1)[:, None, :]
        inside = tf.clip_by_value(moved, 0.0, float(size))
        kept = (tf.gather(targets["labels"], index) >= 0) & (_area(inside) >= MOSAIC_MIN_AREA * _area(moved))
        kept &= tf.reduce_min(inside[..., 2:] - inside[..., :2], axis=-1) >= 2.0  # at least 2 px a side
        boxes.append(tf.where(kept[..., None], inside, -1.0))
        labels.append(tf.where(kept, tf.gather(targets["labels"], index), -1.0))
    padding = tf.shape(targets["labels"])[1] * 3
    plain_boxes = tf.concat([targets["boxes"], tf.fill([batch, padding, 4], -1.0)], axis=1)
    plain_labels = tf.concat([targets["labels"], tf.fill([batch, padding], -1.0)], axis=1)
    use = tf.random.uniform([batch], seed=seed) < chance
    return tf.where(use[:, None, None, None], cut, images), {
        "boxes": tf.where(use[:, None, None], tf.concat(boxes, axis=1), plain_boxes),
        "labels": tf.where(use[:, None], tf.concat(labels, axis=1), plain_labels),
    }


def _area(yxyx: Any) -> Any:
    import tensorflow as tf

    return tf.maximum(yxyx[..., 2] - yxyx[..., 0], 0.0) * tf.maximum(yxyx[..., 3] - yxyx[..., 1], 0.0)


def letterbox(image: Any, size: int) -> tuple[Any, Any]:
    """Resizes an image to fit ``size`` x ``size`` keeping its aspect ratio, padding bottom/right.

    Returns:
        (float32 image in [0, 1] of shape [size, size, channels], the scale factor applied).
    """
    import tensorflow as tf

    image = tf.image.convert_image_dtype(image, tf.float32)
    dims = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = size / tf.reduce_max(dims)
    new = tf.cast(tf.round(dims * scale), tf.int32)
    same = tf.reduce_all(tf.equal(new, tf.shape(image)[:2]))
    # An image already of the size is passed as is, so bytes-in equals tensors-in exactly.
    resized = tf.cond(same, lambda: image, lambda: tf.image.resize(image, new, method="bilinear", antialias=True))
    padded = tf.image.pad_to_bounding_box(resized, 0, 0, size, size)
    return tf.ensure_shape(tf.clip_by_value(padded, 0.0, 1.0), [size, size, None]), scale


def targets_of(features: Mapping[str, Any], size: int, max_boxes: int) -> dict[str, Any]:
    """Absolute letterboxed yxyx boxes and float labels, crowd boxes dropped, -1 padded to ``max_boxes``."""
    import tensorflow as tf

    height = tf.cast(features[_HEIGHT], tf.float32)
    width = tf.cast(features[_WIDTH], tf.float32)
    scale = size / tf.maximum(height, width)
    coords = [features[k] for k in _BOX_KEYS]  # ragged [B, None] each
    factors = [height * scale, width * scale, height * scale, width * scale]
    boxes = tf.stack([c * f[:, None] for c, f in zip(coords, factors, strict=True)], axis=-1)  # ragged [B, None, 4]
    labels = tf.cast(features[_LABELS], tf.float32)
    keep = tf.equal(features[_CROWD], 0)
    boxes = tf.ragged.boolean_mask(boxes, keep)
    labels = tf.ragged.boolean_mask(labels, keep)
    return {
        "boxes": boxes.to_tensor(default_value=-1.0, shape=[None, max_boxes, 4]),
        "labels": labels.to_tensor(default_value=-1.0, shape=[None, max_boxes]),
    }


def read_detection_split(info: DatasetInfo, split: str, limit: int | None = None) -> list[dict[str, Any]]:
    """A split's records: encoded image, true size, normalised boxes, labels and crowd flags.

    Args:
        info: the dataset's manifest, as ``tfrecords.load_dataset_info`` reads it.
        split: the split to read.
        limit: read at most this many records; None for all.

    Raises:
        DatasetError: the split is missing or empty.
    """
    import tensorflow as tf

    from trainer import tfrecords

    info.split_count(split)
    files = info.shard_paths(split)
    spec = {k: tfrecords.FEATURE_SPEC[k] for k in FEATURE_KEYS}
    ds = tf.data.TFRecordDataset(files, compression_type=info.compression or "")
    if limit is not None:
        ds = ds.take(limit)
    records = []
    for batch in ds.batch(256).map(lambda s: tf.io.parse_example(s, spec)):
        coords = [batch[k].to_list() for k in _BOX_KEYS]
        labels, crowd = batch[_LABELS].to_list(), batch[_CROWD].to_list()
        for i, encoded in enumerate(batch[_ENCODED].numpy()):
            records.append(
                {
                    "encoded": encoded,
                    "height": int(batch[_HEIGHT][i]),
                    "width": int(batch[_WIDTH][i]),
                    "boxes": [list(b) for b in zip(*(c[i] for c in coords), strict=True)],
                    "labels": [int(v) for v in labels[i]],
                    "crowd": [int(v) for v in crowd[i]],
                }
            )
    return records
