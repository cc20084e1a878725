"""A third task, defined outside trainer/: regress an image's mean brightness (proves the task seam).

Registered through ``LTP_EXTENSIONS=tests.toy_task`` (:mod:`trainer.extensions`): the task
registry and the convert step's source registry import this module when first looked up, in the
test process and in every subprocess a step runs in. It registers three things:

- the task ``brightness``: it reads classification-format records (``image/encoded``; the
  label, dark or bright, is ignored: the target is computed from the pixels) of a dataset whose
  ``dataset.json`` says ``task: brightness``; ``serving_default`` returns ``brightness`` in
  [0, 1] and ``darkness`` (1 - brightness: a model server answers a one-output signature with
  bare values, and the serving checks want named outputs);
- the built-in source ``brightness:<count>`` (``count`` generated 16x16 RGB images of random
  gray levels), whose datasets the converter writes with ``task: brightness``;
- its renderers (the evaluate step's report and page).

It has no batch prediction (no :class:`~trainer.tasks.base.Prediction` facet): planning a batch
prediction with its model fails in one line naming what is missing.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from components.evaluate.renderers import Renderers
from components.evaluate.renderers import register as register_renderers
from components.image_input.sources.arrays import ArrayKind, array_source
from components.image_input.sources.base import Claim, Source, SourceError, fingerprint
from components.image_input.sources.registry import register_kind
from trainer.configbase import ConfigBase
from trainer.tasks import EvaluationResultBase, Metric, RunDefaults, ServingSchema, Task, TaskError, register
from trainer.tfrecords import DatasetInfo

if TYPE_CHECKING:
    from trainer.config import EvaluateConfig

NAME = "brightness"
_ENCODED = "image/encoded"
TOLERANCE = 0.15  # a served brightness this close to the truth is right
OUTPUTS = ("brightness", "darkness")


@dataclasses.dataclass(frozen=True)
class BrightnessOptions(ConfigBase):
    """The toy model's one option.

    Attributes:
        exact_start: start from the weights that compute the mean brightness exactly (the toy
            proves the plumbing; a few training steps cannot be relied on to learn it).
    """

    _section: ClassVar[str] = "model_options."

    exact_start: bool = True


@dataclasses.dataclass(frozen=True)
class BrightnessEvaluation(EvaluationResultBase):
    """Mean absolute error of the served brightness."""

    metrics: dict[str, float]
    class_names: list[str] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return dataclasses.asdict(self)


def _outputs(brightness: Any) -> dict[str, Any]:
    return {"brightness": brightness, "darkness": 1.0 - brightness}


def _brightness(images: Any) -> Any:
    import tensorflow as tf

    return tf.reduce_mean(tf.cast(images, tf.float32), axis=[1, 2, 3]) / 255.0


@register
class Brightness(Task):
    """Mean brightness of an image, a single sigmoid output, squared error."""

    name: ClassVar[str] = NAME
    options_type: ClassVar[type[BrightnessOptions]] = BrightnessOptions
    metrics: ClassVar[tuple[Metric, ...]] = (Metric("mae", False, "mean absolute error", label="MAE"),)
    headline_metric: ClassVar[str] = "mae"
    quality_metrics: ClassVar[tuple[str, ...]] = ("mae",)
    serving: ClassVar[ServingSchema] = ServingSchema(outputs=OUTPUTS)
    default_value_thresholds: ClassVar[Mapping[str, float]] = {"mae": 0.5}
    run_defaults: ClassVar[RunDefaults] = RunDefaults(
        data="brightness:200", limit=100, epochs=1, served_model_name="brightness", model="tiny", headline=("mae",)
    )

    def check_prediction(self, prediction: Mapping[str, Any], num_outputs: int | None = None) -> None:
        """Two numbers in [0, 1] that add up to 1."""
        values = [prediction.get(k) for k in OUTPUTS]
        if set(prediction) != set(OUTPUTS) or not all(isinstance(v, (int, float)) and 0 <= v <= 1 for v in values):
            raise TaskError(f"prediction {prediction!r}, expected brightness and darkness in [0, 1]")
        if abs(sum(values) - 1) > 1e-4:
            raise TaskError(f"brightness and darkness add up to {sum(values)}, expected 1")

    def matches(self, prediction: Mapping[str, Any], expected: Any) -> bool:
        """Within the tolerance."""
        return abs(float(prediction["brightness"]) - float(expected)) <= TOLERANCE

    def output_signature(self, num_classes: int) -> dict[str, str]:
        """Two floats per image."""
        return {"brightness": "float32 [None]", "darkness": "float32 [None]"}

    def feature_keys(self) -> tuple[str, ...]:
        """The image only."""
        return (_ENCODED,)

    def input_shape(self, info: DatasetInfo) -> tuple[int, int, int]:
        """The dataset's shape."""
        from trainer import data

        return data.image_shape_of(info)

    def decode(self, features: Mapping[str, Any], shape: tuple[int, int, int]) -> tuple[Any, Any]:
        """The images and their mean brightness."""
        import tensorflow as tf

        from trainer import tfrecords

        images = tf.map_fn(
            lambda data: tf.ensure_shape(tfrecords.decode_image(data, channels=shape[2]), shape),
            features[_ENCODED],
            fn_output_signature=tf.TensorSpec(shape, tf.uint8),
        )
        return images, _brightness(images)

    def augment(self, images: Any, targets: Any, shape: tuple[int, int, int], seed: int | None) -> tuple[Any, Any]:
        """None: the brightness does not move."""
        return images, targets

    def optimizer(self, learning_rate: float, total_steps: int) -> Any:
        """Adam."""
        import keras

        return keras.optimizers.Adam(learning_rate=learning_rate)

    def build_model(self, model_name: str, info: DatasetInfo) -> Any:
        """Global average pooling, one linear unit, clipped to [0, 1]."""
        import keras

        if model_name != "tiny":
            raise TaskError(f"train.model: the {NAME} task trains 'tiny', got {model_name!r}")
        shape = self.input_shape(info)
        inputs = keras.Input(shape, name="images")
        x = keras.layers.GlobalAveragePooling2D()(inputs)
        start = 1.0 / shape[2] if self.options.exact_start else 0.5
        x = keras.layers.Dense(1, kernel_initializer=keras.initializers.Constant(start), dtype="float32")(x)
        outputs = keras.layers.Reshape(())(keras.layers.ReLU(max_value=1.0)(x))
        return keras.Model(inputs, outputs)

    def compile(self, model: Any, optimizer: Any, *, steps_per_execution: int, jit_compile: Any) -> None:
        """Mean squared error."""
        model.compile(optimizer=optimizer, loss="mse", steps_per_execution=steps_per_execution, jit_compile=False)

    def export(self, model: Any, export_dir: str, info: DatasetInfo) -> str:
        """``serving_default`` (bytes) and ``serving_tensors`` returning ``brightness``."""
        import tensorflow as tf

        shape = self.input_shape(info)
        module = tf.Module()
        module.model = model

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
        def serve_bytes(image_bytes):
            images = tf.map_fn(
                lambda d: tf.ensure_shape(tf.io.decode_image(d, channels=shape[2], expand_animations=False), shape),
                image_bytes,
                fn_output_signature=tf.TensorSpec(shape, tf.uint8),
            )
            return _outputs(model(tf.cast(images, tf.float32) / 255.0, training=False))

        @tf.function(input_signature=[tf.TensorSpec([None, *shape], tf.float32, name="images")])
        def serve_tensors(images):
            return _outputs(model(images, training=False))

        module.serve_bytes, module.serve_tensors = serve_bytes, serve_tensors
        signatures = {"serving_default": serve_bytes.get_concrete_function()}
        signatures["serving_tensors"] = serve_tensors.get_concrete_function()
        tf.saved_model.save(module, export_dir, signatures=signatures)
        return export_dir

    def serving_function(self, saved_model_dir: str, info: DatasetInfo) -> tuple[Any, Any]:
        """``serving_default``, checked to return ``brightness``."""
        import tensorflow as tf

        loaded = tf.saved_model.load(saved_model_dir)
        fn = loaded.signatures["serving_default"]
        if set(fn.structured_outputs) != set(OUTPUTS):
            raise TaskError(f"{saved_model_dir}: serving_default returns {sorted(fn.structured_outputs)}")
        return loaded, fn

    def _truth(self, dataset_dir: str, split: str, limit: int | None) -> tuple[list[bytes], list[float], DatasetInfo]:
        import tensorflow as tf

        from trainer.evaluate import read_encoded_split

        images, _labels, info = read_encoded_split(dataset_dir, split, limit)
        decoded = [tf.io.decode_image(d, expand_animations=False)[None] for d in images]
        return images, [float(_brightness(d)[0]) for d in decoded], info

    def evaluate(
        self, saved_model_dir: str, dataset_dir: str, config: EvaluateConfig, limit: int | None = None
    ) -> BrightnessEvaluation:
        """The mean absolute error on ``config.split``."""
        import numpy as np
        import tensorflow as tf

        images, truth, info = self._truth(dataset_dir, config.split, limit)
        _loaded, fn = self.serving_function(saved_model_dir, info)
        served = np.concatenate(
            [
                fn(image_bytes=tf.constant(images[i : i + config.batch_size]))["brightness"].numpy()
                for i in range(0, len(images), config.batch_size)
            ]
        )
        mae = float(np.abs(served - np.asarray(truth)).mean())
        return BrightnessEvaluation(metrics={"mae": mae, "num_examples": float(len(images))})

    def known_examples(self, dataset_dir: str, split: str, count: int) -> list[tuple[bytes, Any]]:
        """The split's first images and their brightness."""
        images, truth, _ = self._truth(dataset_dir, split, count)
        return list(zip(images, truth, strict=True))


def _report(result: BrightnessEvaluation, decision: Any, split: str, model_uri: str, baseline: Any) -> str:
    verdict = "BLESSED" if decision.blessed else "NOT BLESSED"
    return "\n".join([f"# Brightness evaluation ({split})", "", f"## Decision: {verdict}", "", *decision.reasons])


def _page(result: BrightnessEvaluation, decision: Any, split: str) -> str:
    return (
        f"<html><body><h1>Brightness on {html.escape(split)}</h1><p>MAE {result.metrics['mae']:.4f}</p></body></html>"
    )


register_renderers(NAME, Renderers(report=_report, page=_page))


_SIZE = 16  # pixels a side: the model pools over them, any size would do
_GENERATOR_VERSION = 1  # bump when the images change: a dataset converted before is then out of date


def _count(uri: str) -> int:
    text = uri.split(":", 1)[1] if ":" in uri else ""
    if not text.isdigit() or int(text) < 1:
        raise SourceError(f"bad built-in source {uri!r}: expected 'brightness:<count>' (e.g. brightness:64)")
    return int(text)


def brightness_images(count: int) -> np.ndarray:
    """``count`` RGB images, ``[count, 16, 16, 3]`` uint8: a random gray level each, plus noise (seeded)."""
    rng = np.random.default_rng(_GENERATOR_VERSION)
    levels = rng.integers(16, 240, size=(count, 1, 1, 1))
    noise = rng.integers(-16, 17, size=(count, _SIZE, _SIZE, 3))
    return np.clip(levels + noise, 0, 255).astype(np.uint8)


class BrightnessKind(ArrayKind):
    """The built-in name ``brightness:<count>``: generated images, classes dark and bright, task brightness."""

    name = NAME
    description = "brightness:<count> (the toy task's generated images)"
    claim = Claim.NAME

    def matches(self, uri: str) -> bool:
        return uri.startswith(f"{self.name}:")

    def open(self, uri: str, classes: list[str] | None) -> Source:
        count = _count(uri)
        images = brightness_images(count)
        labels = (images.mean(axis=(1, 2, 3)) >= 128).astype(np.int64)
        fp = fingerprint([NAME, _GENERATOR_VERSION, count])
        source = array_source(self.name, uri, {"all": labels}, {"all": images}, ["dark", "bright"], fp, False, {})
        source.task = NAME
        return source

    def arrays(self, spec: dict[str, Any]) -> dict[str, np.ndarray]:
        return {"all": brightness_images(_count(spec["uri"]))}


BRIGHTNESS_SOURCE = register_kind(BrightnessKind())
