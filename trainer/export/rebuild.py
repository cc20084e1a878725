"""The float32 rebuild of a trained model, and its body as one traced function.

What is served computes in bfloat16 where it was trained with ``mixed_bfloat16``: ONNX refuses
its convolutions and LiteRT needs Flex ops for them. Every format is converted from a rebuild of
the same layers under a float32 policy with the trained weights copied in, by name. A loaded
model's own policy can read float32 while its layers are mixed, so the rebuild replaces every
layer's policy in the serialized model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

_POLICIES = ("DTypePolicy", "FloatDTypePolicy")


def _float32_policies(node: Any) -> Any:
    """The serialized model with every layer's dtype policy set to float32."""
    if isinstance(node, dict):
        if node.get("class_name") in _POLICIES and isinstance(node.get("config"), dict):
            return {**node, "config": {**node["config"], "name": "float32"}}
        return {k: _float32_policies(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_float32_policies(v) for v in node]
    return node


def float32_rebuild(model: Any, input_shape: tuple[int, int, int]) -> Any:
    """The same model under a float32 policy, its weights copied from ``model`` by path.

    Raises:
        ValueError: a weight of the rebuild has no counterpart (the serialized model is incomplete).
    """
    import keras

    rebuilt = keras.saving.deserialize_keras_object(_float32_policies(keras.saving.serialize_keras_object(model)))
    rebuilt(np.zeros((1, *input_shape), np.float32))  # builds every layer at the body's shape
    trained = {v.path: v for v in model.weights}
    missing = [v.path for v in rebuilt.weights if v.path not in trained]
    if missing:
        raise ValueError(f"the float32 rebuild has weights the trained model lacks: {', '.join(missing[:5])}")
    for variable in rebuilt.weights:
        variable.assign(np.asarray(trained[variable.path]).astype(variable.dtype))
    mixed = sorted({layer.dtype_policy.name for layer in rebuilt._flatten_layers()} - {"float32"})
    if mixed:
        raise ValueError(f"the rebuild still has layers computing in {', '.join(mixed)}")
    return rebuilt


def traced(body: Callable[[Any], Mapping[str, Any]], input_shape: tuple[int, int, int]) -> Any:
    """``body`` as a ``tf.function`` over ``images`` of ``[None, *input_shape]`` float32."""
    import tensorflow as tf

    return tf.function(body, input_signature=[tf.TensorSpec([None, *input_shape], tf.float32, name="images")])


def frozen(function: Any) -> Any:
    """The traced body's concrete function with its variables folded in (what LiteRT converts)."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    return convert_variables_to_constants_v2(function.get_concrete_function())


def output_names(function: Any) -> list[str]:
    """The body's output names, in the order a converted graph flattens them (sorted)."""
    return sorted(function.get_concrete_function().structured_outputs)
