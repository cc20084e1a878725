"""Classification's models by name, and how one is built for a dataset and compiled.

``build_model(name, input_shape, num_classes, **kwargs)`` is the one entry point; the training,
evaluation and benchmark code all go through it, so a model name in a config means the same
network everywhere. Models take float32 images in [0, 1] shaped ``[batch, H, W, C]`` and return
class probabilities (softmax), float32 even under a mixed-precision policy.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

import keras

from trainer.tasks.base import TaskError

# keras.applications backbones the transfer-learning classifier accepts, with how each one wants
# its [0, 1] input rescaled (scale, offset) and the smallest side it accepts.
_BACKBONES: dict[str, tuple[str, float, float, int]] = {
    # name: (keras.applications attribute, scale, offset, min side)
    "mobilenet_v2": ("MobileNetV2", 2.0, -1.0, 32),
    "mobilenet_v3_small": ("MobileNetV3Small", 255.0, 0.0, 32),
    "efficientnet_b0": ("EfficientNetB0", 255.0, 0.0, 32),
    "resnet50": ("ResNet50", 255.0, 0.0, 32),
}


class ModelError(TaskError):
    """A model cannot be built as asked (unknown name, bad shape, missing weights); a ``TaskError``."""


def mnist_cnn(input_shape: tuple[int, int, int], num_classes: int) -> keras.Model:
    """The GPU-vs-TPU notebook's CNN, layer for layer.

    Conv2D 64 k2 same relu, MaxPool 2, Dropout 0.3, Conv2D 32 k2 same relu, MaxPool 2,
    Dropout 0.3, Flatten, Dense 256 relu, Dropout 0.5, Dense softmax.

    Args:
        input_shape: ``(height, width, channels)``; the notebook uses ``(28, 28, 1)``.
        num_classes: output classes.

    Returns:
        An uncompiled ``keras.Model``.
    """
    layers = keras.layers
    model = keras.Sequential(
        [
            keras.Input(shape=input_shape, name="images"),
            layers.Conv2D(64, kernel_size=2, padding="same", activation="relu"),
            layers.MaxPooling2D(pool_size=2),
            layers.Dropout(0.3),
            layers.Conv2D(32, kernel_size=2, padding="same", activation="relu"),
            layers.MaxPooling2D(pool_size=2),
            layers.Dropout(0.3),
            layers.Flatten(),
            layers.Dense(256, activation="relu"),
            layers.Dropout(0.5),
            # float32 output keeps the softmax stable under mixed_bfloat16/mixed_float16 policies;
            # under float32 it changes nothing.
            layers.Dense(num_classes, activation="softmax", dtype="float32", name="probabilities"),
        ],
        name="mnist_cnn",
    )
    return model


# The side the transfer classifier sees when none is given: the images' short side, rounded down
# to a multiple of 32 (whole cells for the backbone's five stride-2 stages), within 32..224 px
# (the smallest side keras.applications take, and the ImageNet size beyond which a photo
# classifier gains little for its cost).
MIN_SIDE, MAX_SIDE = 32, 224
IMAGENET = "imagenet"  # keras.applications' own weights: downloaded from storage.googleapis.com


def fitted_side(height: int, width: int) -> int:
    """The input side that suits images of ``height`` x ``width`` for a transfer classifier."""
    return max(MIN_SIDE, min(MAX_SIDE, min(height, width) // 32 * 32))


def transfer_classifier(
    input_shape: tuple[int, int, int],
    num_classes: int,
    backbone: str = "mobilenet_v2",
    weights: str | None = None,
    trainable_backbone: bool = False,
    dropout: float = 0.2,
    image_size: int | None = None,
) -> keras.Model:
    """An image classifier on a ``keras.applications`` backbone (transfer learning).

    ``weights`` is a local or ``gs://`` path to the backbone's weights (a ``.weights.h5``/``.h5``
    file saved from the same application with ``include_top=False``), ``imagenet`` (Keras
    downloads them: a cluster needs access to storage.googleapis.com, or a copy given as a
    path), or ``None`` for random initialisation.

    Grayscale input is repeated to three channels and images are resized inside the model to
    ``image_size`` (square), so the model still takes the dataset's images as they are.

    Args:
        input_shape: ``(height, width, channels)`` of the dataset's images, channels 1 or 3.
        num_classes: output classes.
        backbone: one of ``mobilenet_v2``, ``mobilenet_v3_small``, ``efficientnet_b0``, ``resnet50``.
        weights: path to the backbone weights, ``imagenet``, or ``None``.
        trainable_backbone: fine-tune the backbone too (else only the new head trains).
        dropout: dropout before the classification layer.
        image_size: the side the backbone sees; ``None``: :func:`fitted_side` of the images.

    Returns:
        An uncompiled ``keras.Model``.

    Raises:
        ModelError: unknown backbone, unsupported channel count, a weights path that does not
            exist or holds another architecture, or ImageNet weights that cannot be downloaded.
    """
    if backbone not in _BACKBONES:
        raise ModelError(f"backbone: unknown {backbone!r}; expected one of {', '.join(sorted(_BACKBONES))}")
    height, width, channels = input_shape
    if channels not in (1, 3):
        raise ModelError(f"input_shape: the {backbone} backbone takes 1 or 3 channels, got {channels} in {input_shape}")
    if weights is not None and weights != IMAGENET and not _exists(weights):
        raise ModelError(
            f"weights: {weights!r} does not exist; give a local or gs:// path to {backbone} weights "
            f"saved with include_top=False, {IMAGENET!r} (downloaded), or None to start from random weights"
        )
    attr, scale, offset, min_side = _BACKBONES[backbone]
    side = max(min_side, image_size or fitted_side(height, width))

    inputs = keras.Input(shape=input_shape, name="images")
    x = inputs
    if channels == 1:
        x = keras.layers.Concatenate(axis=-1, name="to_rgb")([x, x, x])
    if (side, side) != (height, width):
        x = keras.layers.Resizing(side, side, antialias=True, name="resize")(x)
    x = keras.layers.Rescaling(scale, offset=offset, name="backbone_scale")(x)
    base = _application(attr, side, weights)
    base.trainable = trainable_backbone
    x = base(x, training=trainable_backbone)
    x = keras.layers.Dropout(dropout)(x)
    outputs = keras.layers.Dense(num_classes, activation="softmax", dtype="float32", name="probabilities")(x)
    return keras.Model(inputs, outputs, name=f"transfer_{backbone}")


def _application(attr: str, side: int, weights: str | None) -> keras.Model:
    """The ``keras.applications`` backbone without its top, with ``weights`` loaded (see above)."""
    from trainer import presets

    build = getattr(keras.applications, attr)
    if weights == IMAGENET:
        try:
            return build(include_top=False, weights=IMAGENET, input_shape=(side, side, 3), pooling="avg")
        except Exception as err:  # noqa: BLE001 - Keras' downloader raises whatever the network gave it
            raise ModelError(
                f"weights: cannot download {attr}'s ImageNet weights "
                f"({type(err).__name__}: {presets.brief(err, 160)}); "
                "without access to storage.googleapis.com, save them once where there is "
                f"(keras.applications.{attr}(include_top=False, weights='imagenet').save_weights"
                "('notop.weights.h5')) and give that file's local or gs:// path"
            ) from err
    base = build(include_top=False, weights=None, input_shape=(side, side, 3), pooling="avg")
    if weights is not None:
        try:
            base.load_weights(presets.local_file(weights))
        except ValueError as err:
            raise ModelError(
                f"weights: {weights!r} does not fit {attr} with include_top=False ({presets.brief(err)}): weights of "
                "another architecture; give the backbone option they were saved from"
            ) from err
    return base


def _exists(path: str) -> bool:
    if path.startswith("gs://"):
        import tensorflow as tf

        return bool(tf.io.gfile.exists(path))
    return os.path.exists(path)


MODELS: dict[str, Callable[..., keras.Model]] = {
    "mnist_cnn": mnist_cnn,
    "transfer_classifier": transfer_classifier,
}


def build_model(name: str, input_shape: tuple[int, int, int], num_classes: int, **kwargs: Any) -> keras.Model:
    """Builds a model by name.

    Args:
        name: a key of ``MODELS`` (``mnist_cnn``, ``transfer_classifier``).
        input_shape: ``(height, width, channels)`` of the images.
        num_classes: output classes (at least 2).
        **kwargs: passed to the builder (e.g. ``backbone=``, ``weights=`` for ``transfer_classifier``).

    Returns:
        An uncompiled ``keras.Model`` taking float32 images in [0, 1] and returning probabilities.

    Raises:
        ModelError: unknown name, a bad shape or class count, or arguments the builder does not take.
    """
    if name not in MODELS:
        raise ModelError(f"model: unknown model {name!r}; expected one of {', '.join(sorted(MODELS))}")
    shape = tuple(int(v) for v in input_shape)
    if len(shape) != 3 or min(shape) < 1:
        raise ModelError(f"input_shape: expected (height, width, channels) of positive sizes, got {input_shape}")
    if int(num_classes) < 2:
        raise ModelError(f"num_classes: a classifier needs at least 2 classes, got {num_classes}")
    builder = MODELS[name]
    accepted = list(inspect.signature(builder).parameters)[2:]
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise ModelError(
            f"model {name!r}: unknown argument(s) {', '.join(unknown)}; it takes {', '.join(accepted) or 'none'}"
        )
    return builder(shape, int(num_classes), **kwargs)


def build_classifier(
    name: str, image_shape: tuple[int, int, int], class_names: list[str], options: dict[str, Any]
) -> keras.Model:
    """:func:`build_model` for a dataset's shape and classes, checked against both.

    Raises:
        ModelError: the model cannot be built, or takes another shape or outputs another class count.
    """
    num_classes = len(class_names)
    model = build_model(name, image_shape, num_classes, **options)
    in_shape = tuple(model.inputs[0].shape[1:])
    if in_shape != tuple(image_shape):
        raise ModelError(
            f"{name!r} takes images of shape {in_shape} but the dataset's images are "
            f"{tuple(image_shape)}; build the model for the dataset's shape or convert with resize"
        )
    out_classes = model.outputs[0].shape[-1]
    if out_classes != num_classes:
        raise ModelError(
            f"{name!r} outputs {out_classes} classes but the dataset has {num_classes}; "
            "build the model for the dataset's classes"
        )
    return model


def compile_classifier(model: keras.Model, optimizer: Any, *, steps_per_execution: int, jit_compile: Any) -> None:
    """Sparse categorical cross-entropy and accuracy."""
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
        jit_compile=jit_compile,
    )
