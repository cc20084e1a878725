"""Image classification: the notebook's CNN and the transfer classifiers.

Records give ``image/encoded`` and ``image/class/label``; the model maps float32 images in [0, 1]
to class probabilities; ``serving_default`` returns ``probabilities`` and ``classes``; the
evaluation scores accuracy, top-k, loss and per-class precision/recall/F1 (trainer/evaluate.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from trainer.tasks.base import Metric, ServingSchema, Task, TaskError

_ENCODED_KEY = "image/encoded"
_LABEL_KEY = "image/class/label"


class Classification(Task):
    """One label per image, softmax output, sparse categorical cross-entropy."""

    name: ClassVar[str] = "classification"
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("accuracy", True, "share of test images whose top class is right"),
        Metric("top_k_accuracy", True, "share whose right class is among the top k"),
        Metric("macro_precision", True, "precision averaged over classes"),
        Metric("macro_recall", True, "recall averaged over classes"),
        Metric("macro_f1", True, "F1 averaged over classes"),
        Metric("loss", False, "cross-entropy on the test split"),
    )
    headline_metric: ClassVar[str] = "accuracy"
    serving: ClassVar[ServingSchema] = ServingSchema(outputs=("probabilities", "classes"))
    default_value_thresholds: ClassVar[Mapping[str, float]] = {"accuracy": 0.8}

    # ----------------------------------------------------------------- no TensorFlow needed

    def check_prediction(self, prediction: Mapping[str, Any], num_outputs: int | None = None) -> None:
        """Probabilities that sum to 1 over ``num_outputs`` classes and ``classes`` their argmax."""
        if set(prediction) != set(self.serving.outputs):
            raise TaskError(f"prediction keys {sorted(prediction)}, expected {sorted(self.serving.outputs)}")
        probs = prediction["probabilities"]
        if not isinstance(probs, list) or not probs or not all(isinstance(p, (int, float)) for p in probs):
            raise TaskError(f"probabilities must be a list of numbers, got {str(probs)[:120]}")
        n = num_outputs or len(probs)
        if len(probs) != n:
            raise TaskError(f"{len(probs)} probabilities, expected {n}")
        if not math.isclose(sum(probs), 1.0, abs_tol=1e-3) or min(probs) < 0:
            raise TaskError(f"probabilities do not sum to 1: {sum(probs)}")
        cls = prediction["classes"]
        if not isinstance(cls, int) or not 0 <= cls < n:
            raise TaskError(f"bad class {cls!r}")
        if probs.index(max(probs)) != cls:
            raise TaskError("classes is not the argmax of probabilities")

    def matches(self, prediction: Mapping[str, Any], expected: Any) -> bool:
        """The served top class is the label."""
        return prediction.get("classes") == int(expected)

    def output_signature(self, num_classes: int) -> dict[str, str]:
        """Probabilities per class and the top class."""
        return {"probabilities": f"float32 [None, {num_classes}]", "classes": "int64 [None]"}

    def expected_from_json(self, data: Any) -> Any:
        """Labels are ints."""
        return int(data)

    # ----------------------------------------------------------------- TensorFlow inside

    def feature_keys(self) -> tuple[str, ...]:
        """The image and its label."""
        return (_ENCODED_KEY, _LABEL_KEY)

    def input_shape(self, manifest: Mapping[str, Any], options: Mapping[str, Any]) -> tuple[int, int, int]:
        """The dataset's own image shape (one size for all its images; else resize at conversion)."""
        from trainer import data

        return data.image_shape_of(manifest)

    def decode(
        self, features: Mapping[str, Any], shape: tuple[int, int, int], options: Mapping[str, Any]
    ) -> tuple[Any, Any]:
        """The images decoded as stored (checked against ``shape``) and int32 labels."""
        import tensorflow as tf

        from trainer import tfrecords

        images = tf.map_fn(
            lambda data: tf.ensure_shape(tfrecords.decode_image(data, channels=shape[2]), shape),
            features[_ENCODED_KEY],
            fn_output_signature=tf.TensorSpec(shape, tf.uint8),
            parallel_iterations=16,
        )
        return images, tf.cast(features[_LABEL_KEY], tf.int32)

    def augment(self, images: Any, targets: Any, shape: tuple[int, int, int], seed: int | None) -> tuple[Any, Any]:
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

    def optimizer(self, learning_rate: float, total_steps: int, options: Mapping[str, Any]) -> Any:
        """Adam at a constant rate (the notebook's)."""
        import keras

        return keras.optimizers.Adam(learning_rate=learning_rate)

    def check_dataset(self, manifest: Mapping[str, Any]) -> None:
        """A classifier needs a single image shape (checked by ``data.image_shape_of``) and 2+ classes."""
        from trainer import data
        from trainer.tfrecords import DatasetError

        data.image_shape_of(manifest)
        if len(manifest.get("classes") or []) < 2:
            raise DatasetError(
                f"{manifest.get('dir', 'the dataset')}: a classifier needs at least 2 classes, the dataset has "
                f"{list(manifest.get('classes') or [])}; convert a source with two or more classes"
            )

    def build_model(self, config: Any, manifest: Mapping[str, Any]) -> Any:
        """``trainer.models.build_model`` for the dataset's shape and classes, checked against both."""
        from trainer import data
        from trainer.models import ModelError, build_model

        image_shape = data.image_shape_of(manifest)
        num_classes = len(manifest["classes"])
        try:
            model = build_model(config.model, image_shape, num_classes, **dict(config.model_options))
        except ModelError as err:
            raise TaskError(f"train.model: {err}") from err
        in_shape = tuple(model.inputs[0].shape[1:])
        if in_shape != tuple(image_shape):
            raise TaskError(
                f"train.model: {config.model!r} takes images of shape {in_shape} but the dataset's images are "
                f"{tuple(image_shape)}; build the model for the dataset's shape or convert with resize"
            )
        out_classes = model.outputs[0].shape[-1]
        if out_classes != num_classes:
            raise TaskError(
                f"train.model: {config.model!r} outputs {out_classes} classes but the dataset has {num_classes}; "
                "build the model for the dataset's classes"
            )
        return model

    def compile(self, model: Any, optimizer: Any, *, steps_per_execution: int, jit_compile: Any) -> None:
        """Sparse categorical cross-entropy and accuracy."""
        import keras

        model.compile(
            optimizer=optimizer,
            loss=keras.losses.SparseCategoricalCrossentropy(),
            metrics=["accuracy"],
            steps_per_execution=steps_per_execution,
            jit_compile=jit_compile,
        )

    def export(self, model: Any, export_dir: str, manifest: Mapping[str, Any], options: Mapping[str, Any]) -> str:
        """Bytes-in and tensors-in signatures returning ``probabilities`` and ``classes``."""
        from trainer import data
        from trainer.export import export_saved_model

        return export_saved_model(model, export_dir, list(manifest["classes"]), data.image_shape_of(manifest))

    def evaluate(self, saved_model_dir: str, dataset_dir: str, config: Any, limit: int | None = None) -> Any:
        """Accuracy, top-k, loss, per-class metrics and the confusion matrix."""
        from trainer.evaluate import evaluate_saved_model

        return evaluate_saved_model(saved_model_dir, dataset_dir, config.split, config.batch_size, config.top_k, limit)

    def serving_function(self, saved_model_dir: str, manifest: Mapping[str, Any]) -> tuple[Any, Any]:
        """``serving_default``, checked to return probabilities over the dataset's classes."""
        from trainer.evaluate import load_serving_signature

        return load_serving_signature(saved_model_dir, len(manifest["classes"]))

    def known_examples(self, dataset_dir: str, split: str, count: int) -> list[tuple[bytes, Any]]:
        """The split's first ``count`` labelled images."""
        from trainer.evaluate import read_encoded_split

        images, labels, _ = read_encoded_split(dataset_dir, split, limit=count)
        return [(img, int(lab)) for img, lab in zip(images, labels, strict=False) if int(lab) >= 0]

    def describe(self, summary: Mapping[str, Any]) -> Sequence[str]:
        """Loss and accuracy, train and validation."""

        def fmt(value: Any) -> str:
            return "n/a" if value is None else format(value, ".4f")

        return [
            "| | loss | accuracy |",
            "|---|---|---|",
            f"| train | {fmt(summary.get('train_loss'))} | {fmt(summary.get('train_accuracy'))} |",
            f"| validation | {fmt(summary.get('val_loss'))} | {fmt(summary.get('val_accuracy'))} |",
        ]
