"""Exports a Keras classifier as the SavedModel that is served (docs/CONTRACTS.md).

The SavedModel has two signatures, both returning ``probabilities`` (float32, [None, classes])
and ``classes`` (int64, [None]):

- ``serving_default`` takes ``image_bytes`` (tf.string, [None]): encoded PNG, JPEG, GIF or BMP
  images, decoded, resized to the model's input size and scaled to [0, 1] inside the graph, so a
  client (or TensorFlow Serving's REST API with ``{"b64": ...}``) sends files as they are.
- ``serving_tensors`` takes ``images`` (float32, [None, H, W, C], values in [0, 1]).

The class names are written to ``assets/labels.txt`` (one per line, in class-index order), so the
served folder alone says what the class indices mean.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

LABELS_FILE = "labels.txt"
SIGNATURE_BYTES = "serving_default"
SIGNATURE_TENSORS = "serving_tensors"


def _check_args(class_names: Sequence[str], image_shape: Sequence[int]) -> tuple[int, int, int]:
    if len(image_shape) != 3 or any(int(d) < 1 for d in image_shape):
        raise ValueError(f"image_shape must be (height, width, channels) with positive sizes, got {tuple(image_shape)}")
    height, width, channels = (int(d) for d in image_shape)
    if channels not in (1, 3):
        raise ValueError(f"image_shape channels must be 1 (grayscale) or 3 (RGB) for image decoding, got {channels}")
    if not class_names:
        raise ValueError("class_names is empty: pass the dataset's classes in label-index order")
    for name in class_names:
        if not isinstance(name, str) or not name or "\n" in name:
            raise ValueError(f"class names must be non-empty one-line strings, got {name!r}")
    return height, width, channels


def _image_decoder(height: int, width: int, channels: int):
    """``encoded image -> float32 [height, width, channels] in [0, 1]``, as ``serving_default`` decodes."""
    import tensorflow as tf

    def _to_channels(image):
        # Images arrive with 1 (gray), 2 (gray + alpha), 3 (RGB) or 4 (RGBA) channels; alpha is
        # dropped and colour converted to what the model takes.
        have = tf.shape(image)[-1]
        colour = tf.cond(have >= 3, lambda: image[..., :3], lambda: tf.image.grayscale_to_rgb(image[..., :1]))
        if channels == 3:
            return colour
        return tf.cond(have >= 3, lambda: tf.image.rgb_to_grayscale(colour), lambda: image[..., :1])

    def decode_one(data):
        # decode_image handles PNG, JPEG, GIF and BMP; expand_animations=False gives a GIF's first
        # frame as a 3-D image like the other formats. channels=0 keeps the stored channels
        # because the GIF decoder refuses channels=1; _to_channels converts afterwards.
        image = tf.io.decode_image(data, channels=0, expand_animations=False, dtype=tf.uint8)
        image.set_shape([None, None, None])
        image = tf.image.convert_image_dtype(image, tf.float32)  # uint8 -> [0, 1]
        image = _to_channels(image)
        image.set_shape([None, None, channels])
        size = tf.shape(image)[:2]
        # Skip resizing at the model's own size so bytes-in equals tensors-in exactly.
        same = tf.reduce_all(tf.equal(size, tf.constant([height, width])))
        image = tf.cond(
            same,
            lambda: image,
            lambda: tf.image.resize(image, [height, width], method="bilinear", antialias=True),
        )
        return tf.ensure_shape(tf.clip_by_value(image, 0.0, 1.0), [height, width, channels])

    return decode_one


def export_saved_model(
    model,
    export_dir: str,
    class_names: list[str],
    image_shape: tuple[int, int, int],
) -> str:
    """Write ``model`` as a SavedModel with the contract's two serving signatures.

    Args:
        model: a Keras model mapping float32 images in [0, 1] of ``image_shape`` to class
            probabilities (a softmax output), shape [batch, len(class_names)].
        export_dir: the folder to write (local or gs://); it must not hold a SavedModel already.
        class_names: the class names in label-index order (dataset.json ``classes``).
        image_shape: ``(height, width, channels)`` the model takes; channels 1 or 3.

    Returns:
        ``export_dir``.

    Raises:
        ValueError: the arguments do not fit each other or the model.

    """
    import tensorflow as tf

    height, width, channels = _check_args(class_names, image_shape)
    num_classes = len(class_names)
    out_shape = tuple(model.outputs[0].shape) if getattr(model, "outputs", None) else None
    if out_shape is not None and out_shape[-1] is not None and out_shape[-1] != num_classes:
        raise ValueError(
            f"the model outputs {out_shape[-1]} scores per image but {num_classes} class names were "
            f"given ({list(class_names)[:5]}...): pass the classes the model was trained on"
        )
    if tf.io.gfile.exists(os.path.join(export_dir, "saved_model.pb")):
        raise ValueError(f"{export_dir} already holds a SavedModel; export into a new folder (or delete it first)")

    decode_one = _image_decoder(height, width, channels)

    # One function under both signatures: the model's graph is traced once, not once per signature.
    @tf.function(input_signature=[tf.TensorSpec([None, height, width, channels], tf.float32)])
    def _outputs(images):
        probabilities = tf.cast(model(images, training=False), tf.float32)
        return {
            "probabilities": probabilities,
            "classes": tf.argmax(probabilities, axis=-1, output_type=tf.int64),
        }

    module = tf.Module()
    module.model = model  # tracks the model's variables
    with tempfile.TemporaryDirectory() as tmp:
        labels_path = Path(tmp) / LABELS_FILE
        labels_path.write_text("".join(f"{name}\n" for name in class_names), encoding="utf-8")
        # An Asset is copied into <export_dir>/assets/ by tf.saved_model.save.
        module.labels = tf.saved_model.Asset(str(labels_path))

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
        def serve_bytes(image_bytes):
            images = tf.map_fn(
                decode_one,
                image_bytes,
                fn_output_signature=tf.TensorSpec([height, width, channels], tf.float32),
            )
            return _outputs(images)

        @tf.function(input_signature=[tf.TensorSpec([None, height, width, channels], tf.float32, name="images")])
        def serve_tensors(images):
            return _outputs(images)

        module.serve_bytes = serve_bytes
        module.serve_tensors = serve_tensors
        tf.saved_model.save(
            module,
            export_dir,
            signatures={
                SIGNATURE_BYTES: serve_bytes.get_concrete_function(),
                SIGNATURE_TENSORS: serve_tensors.get_concrete_function(),
            },
        )
    return export_dir


def read_class_names(saved_model_dir: str) -> list[str]:
    """Return the class names stored in a SavedModel's ``assets/labels.txt``.

    Raises:
        FileNotFoundError: the folder was not written by :func:`export_saved_model`.

    """
    import tensorflow as tf

    path = os.path.join(saved_model_dir, "assets", LABELS_FILE)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(
            f"{path} not found: {saved_model_dir} is not a SavedModel written by "
            "trainer.tasks.classification.export.export_saved_model (it has no class names)"
        )
    with tf.io.gfile.GFile(path, "r") as f:
        return [line.rstrip("\n") for line in f if line.strip()]
