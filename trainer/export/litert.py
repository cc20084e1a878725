"""LiteRT (TensorFlow Lite) files of a model body, float32 and full-integer int8, and their runner.

Only the builtin op sets are allowed (``TFLITE_BUILTINS``, ``TFLITE_BUILTINS_INT8``), so a graph
that would need a Flex (TensorFlow) op fails to convert; the Flex ops of a file are counted too,
a second check. int8 is full-integer: weights and activations, calibrated on a few hundred
training images; the file's input and output stay float32, so the runner is the same.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def convert(concrete: Any, calibration: np.ndarray | None = None) -> bytes:
    """A LiteRT flatbuffer of a frozen concrete function; int8 when ``calibration`` images are given."""
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_concrete_functions([concrete])
    if calibration is None:
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        return converter.convert()
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([calibration[i : i + 1]] for i in range(len(calibration)))
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    converter.inference_input_type = tf.float32
    converter.inference_output_type = tf.float32
    return converter.convert()


def flex_ops(flatbuffer: bytes) -> int:
    """How many operators of the file are Flex (TensorFlow) ops, which ``ai_edge_litert`` cannot run."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(flatbuffer, 0)
    codes = [(code.customCode or b"").decode() if isinstance(code.customCode, bytes) else (code.customCode or "")
             for code in model.operatorCodes or []]  # fmt: skip
    flex = {i for i, name in enumerate(codes) if name.startswith("Flex")}
    return sum(1 for graph in model.subgraphs or [] for op in graph.operators or [] if op.opcodeIndex in flex)


class Runner:
    """Runs a LiteRT file on batches of float32 images; outputs by name."""

    def __init__(self, path: str, names: Sequence[str]):
        from ai_edge_litert.interpreter import Interpreter

        self._interpreter = Interpreter(model_path=path, num_threads=os.cpu_count() or 1)
        self._input = self._interpreter.get_input_details()[0]["index"]
        # Outputs are named Identity, Identity_1, ... in the order of the body's sorted names.
        outputs = sorted(self._interpreter.get_output_details(), key=lambda d: (len(d["name"]), d["name"]))
        self._outputs = [(name, d["index"]) for name, d in zip(names, outputs, strict=True)]
        self._batch = 0

    def __call__(self, images: np.ndarray) -> Mapping[str, np.ndarray]:
        if len(images) != self._batch:
            self._interpreter.resize_tensor_input(self._input, list(images.shape))
            self._interpreter.allocate_tensors()
            self._batch = len(images)
        self._interpreter.set_tensor(self._input, np.ascontiguousarray(images, dtype=np.float32))
        self._interpreter.invoke()
        return {name: self._interpreter.get_tensor(index).copy() for name, index in self._outputs}
