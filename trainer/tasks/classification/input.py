"""Classification's input: the image (resized when its size differs) and its int32 label; flips and small translations.

Records give ``image/encoded`` and ``image/class/label`` (docs/CONTRACTS.md, TFRecord schema).
Every function here runs inside tf.data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ENCODED_KEY = "image/encoded"
LABEL_KEY = "image/class/label"
FEATURE_KEYS = (ENCODED_KEY, LABEL_KEY)


def decode(features: Mapping[str, Any], shape: tuple[int, int, int]) -> tuple[Any, Any]:
    """The images decoded at ``shape`` and int32 labels.

    An image of another size (a dataset of mixed sizes) is resized to ``shape`` as the exported
    ``serving_default`` resizes what it is sent: bilinear, antialiased; one of that size is kept as
    decoded.
    """
    import tensorflow as tf

    from trainer import tfrecords

    height, width, channels = shape

    def one(data):
        image = tfrecords.decode_image(data, channels=channels)
        same = tf.reduce_all(tf.equal(tf.shape(image)[:2], [height, width]))
        image = tf.cond(
            same,
            lambda: image,
            lambda: tf.saturate_cast(
                tf.round(tf.image.resize(image, [height, width], method="bilinear", antialias=True)), tf.uint8
            ),
        )
        return tf.ensure_shape(image, shape)

    images = tf.map_fn(
        one,
        features[ENCODED_KEY],
        fn_output_signature=tf.TensorSpec(shape, tf.uint8),
        parallel_iterations=16,
    )
    return images, tf.cast(features[LABEL_KEY], tf.int32)


def augment(images: Any, targets: Any, shape: tuple[int, int, int], seed: int | None) -> tuple[Any, Any]:
    """Horizontal flips and translations by up to 1/8 of the side: a class label stays valid."""
    import tensorflow as tf

    height, width, channels = shape
    pad_h, pad_w = max(1, height // 8), max(1, width // 8)
    images = tf.image.random_flip_left_right(images, seed=seed)
    # Random translation: pad by 1/8 of the side and crop back to the original size.
    padded = tf.pad(images, [[0, 0], [pad_h, pad_h], [pad_w, pad_w], [0, 0]], mode="REFLECT")
    batch = tf.shape(images)[0]
    images = tf.image.random_crop(padded, tf.stack([batch, height, width, channels]), seed=seed)
    return images, targets
