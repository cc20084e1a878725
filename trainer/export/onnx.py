"""ONNX files of a model body, float32 and int8, and their runner (onnxruntime).

The float file is converted from the traced body with ``tf2onnx`` (its outputs keep the body's
names). int8 is onnxruntime's static quantization in the QDQ format (uint8 activations, int8
weights, per channel), after ``quant_pre_process`` (which needs the fixed image shape the body
has): the QOperator format kept the speed and lost a detector a fifth of its AP@0.5.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping

import numpy as np

OPSET = 17
QDQ = "qdq"
QOPERATOR = "qoperator"


def convert(function: object, path: str) -> None:
    """Writes the traced body (``rebuild.traced``) as an ONNX file."""
    import tf2onnx

    tf2onnx.convert.from_function(function, input_signature=function.input_signature, opset=OPSET, output_path=path)


class _Calibration:
    """onnxruntime's ``CalibrationDataReader`` over images, one at a time."""

    def __init__(self, name: str, images: np.ndarray):
        self._items = iter([{name: images[i : i + 1]} for i in range(len(images))])

    def get_next(self) -> dict | None:
        return next(self._items, None)


def quantize(float_path: str, int8_path: str, calibration: np.ndarray, scheme: str = QDQ) -> None:
    """Static int8 quantization of a float ONNX file, calibrated on ``calibration`` images."""
    import onnxruntime as ort
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    CalibrationDataReader.register(_Calibration)
    name = ort.InferenceSession(float_path, providers=["CPUExecutionProvider"]).get_inputs()[0].name
    with tempfile.TemporaryDirectory() as tmp:
        prepared = os.path.join(tmp, "prepared.onnx")
        quant_pre_process(float_path, prepared, skip_symbolic_shape=False)
        quantize_static(
            prepared,
            int8_path,
            _Calibration(name, calibration),
            quant_format=QuantFormat.QDQ if scheme == QDQ else QuantFormat.QOperator,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            per_channel=scheme == QDQ,
        )


class Runner:
    """Runs an ONNX file with onnxruntime on batches of float32 images; outputs by name."""

    def __init__(self, path: str):
        import onnxruntime as ort

        self._session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        self._input = self._session.get_inputs()[0].name
        self._names = [o.name for o in self._session.get_outputs()]

    def __call__(self, images: np.ndarray) -> Mapping[str, np.ndarray]:
        out = self._session.run(None, {self._input: np.ascontiguousarray(images, dtype=np.float32)})
        return dict(zip(self._names, out, strict=True))
