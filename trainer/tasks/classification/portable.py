"""The classifier's portable forms (``trainer.tasks.portable``): probabilities in, top-1 agreement."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from trainer.tasks.portable import Portable, Samples

PROBABILITIES = "probabilities"


class ClassificationPortable(Portable):
    """The body is the Keras classifier itself: images in [0, 1] -> ``probabilities``."""

    headline: ClassVar[str] = "accuracy"
    agreement_name: ClassVar[str] = "top-1 agreement"

    def load(self, keras_file: str) -> Any:
        """A local ``model.keras``, without its optimizer."""
        import keras

        return keras.saving.load_model(keras_file, compile=False)

    def body(self, model: Any) -> Callable[[Any], Mapping[str, Any]]:
        """``images -> {"probabilities": ...}``."""
        return lambda images: {PROBABILITIES: model(images, training=False)}

    def input_shape(self, model: Any) -> tuple[int, int, int]:
        """The model's own input shape."""
        height, width, channels = model.input_shape[1:]
        return int(height), int(width), int(channels)

    def samples(self, dataset_dir: str, split: str, limit: int, shape: tuple[int, int, int]) -> Samples:
        """Decoded and resized as ``serving_default`` does (``export._image_decoder``); truth: the labels."""
        import tensorflow as tf

        from trainer.evaluate import read_encoded_split
        from trainer.tasks.classification.export import _image_decoder

        encoded, labels, _ = read_encoded_split(dataset_dir, split, limit)
        decode = _image_decoder(*shape)
        images = np.stack([decode(tf.constant(e)).numpy() for e in encoded]) if encoded else np.zeros((0, *shape))
        return Samples(images.astype(np.float32), list(encoded), labels)

    def decode(self, raw: Mapping[str, np.ndarray], truth: Any, start: int) -> Any:
        """The probabilities are the output."""
        return np.asarray(raw[PROBABILITIES], dtype=np.float32)

    def rows(self, decoded: Any) -> list[Any]:
        """One probability vector per image."""
        return list(decoded)

    def metrics(self, predictions: list[Any], truth: Any) -> dict[str, float]:
        """Top-1 accuracy."""
        top1 = np.argmax(np.stack(predictions), axis=-1)
        return {"accuracy": float(np.mean(top1 == np.asarray(truth)))}

    def agreement(self, reference: list[Any], other: list[Any]) -> float:
        """The share of images with the same top-1 class."""
        return float(np.mean(np.argmax(np.stack(reference), -1) == np.argmax(np.stack(other), -1)))

    raw_outputs: ClassVar[tuple[str, ...]] = (PROBABILITIES,)

    def serving_inputs(self, encoded: Sequence[bytes], shape: tuple[int, int, int]) -> tuple[np.ndarray, Any]:
        """Decoded and resized as ``serving_default`` does (in one traced call); nothing else is needed afterwards."""
        import tensorflow as tf

        from trainer.tasks.classification.export import _image_decoder

        decoders = self.__dict__.setdefault("_decoders", {})
        if shape not in decoders:  # traced once: eager decoding costs more than the model body
            decode_one, spec = _image_decoder(*shape), tf.TensorSpec(shape, tf.float32)
            decoders[shape] = tf.function(
                lambda data: tf.map_fn(decode_one, data, fn_output_signature=spec),
                input_signature=[tf.TensorSpec([None], tf.string)],
            )
        return decoders[shape](tf.constant(list(encoded), dtype=tf.string)).numpy(), None

    def tensor_inputs(self, count: int, shape: tuple[int, int, int]) -> Any:
        """Nothing: the probabilities are the answer."""
        return None

    def serving_outputs(self, raw: Mapping[str, np.ndarray], context: Any) -> dict[str, np.ndarray]:
        """``probabilities`` and ``classes`` (int64 top-1), as ``export_saved_model``'s signatures."""
        probabilities = np.asarray(raw[PROBABILITIES], dtype=np.float32)
        return {"probabilities": probabilities, "classes": np.argmax(probabilities, axis=-1).astype(np.int64)}

    def served(self, saved_model_dir: str) -> tuple[Callable[[list[bytes]], list[Any]], Callable[[np.ndarray], Any]]:
        """``serving_default`` (bytes) for predictions, ``serving_tensors`` for timing."""
        import tensorflow as tf

        loaded = tf.saved_model.load(saved_model_dir)
        by_bytes, by_tensors = loaded.signatures["serving_default"], loaded.signatures["serving_tensors"]

        def predict(encoded: list[bytes]) -> list[Any]:
            out = by_bytes(image_bytes=tf.constant(encoded, dtype=tf.string))
            return list(out[PROBABILITIES].numpy())

        def timed(images: np.ndarray) -> Any:
            return by_tensors(images=tf.constant(images))[PROBABILITIES].numpy()

        timed.loaded = predict.loaded = loaded  # keeps the SavedModel alive
        return predict, timed
