"""OpenVINO IR files of a model body, float and int8, and their runner (OpenVINO's CPU plugin).

Both are converted from the export's ONNX files (``trainer.export.onnx``): ``model.onnx`` gives
``model.xml`` and ``model_int8.onnx`` (onnxruntime's QDQ quantization) gives ``model_int8.xml``;
OpenVINO reads the QDQ pairs as its own quantization and runs the convolutions with int8 kernels,
so no second calibration is needed. Each IR is an ``.xml`` graph with its weights in a ``.bin``
beside it. The input keeps the ONNX file's shape (``images``, float32 ``[None, H, W, C]``) and the
outputs its names (the body's).

The plugin's precision hint is left at its default: on a CPU with bf16 units (``avx512_bf16``,
AMX) it runs the float IR's convolutions in bf16, as the served SavedModel does; elsewhere in
float32. :attr:`Runner.precision` says what the compiled model actually runs them in.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

# The layers that carry the model's arithmetic: their runtime precision is the model's.
_COMPUTE = ("Convolution", "GroupConvolution", "Deconvolution", "FullyConnected", "MatMul")
_NAMES = {"u8": "int8", "i8": "int8", "bf16": "bf16", "f32": "float32", "f16": "float16"}


def convert(onnx_path: str, path: str) -> None:
    """Writes the IR of an ONNX file: ``path`` (``.xml``) and its weights beside it (``.bin``)."""
    import openvino as ov

    ov.save_model(ov.convert_model(onnx_path), path)


def weights(path: str) -> str:
    """The ``.bin`` file beside an IR's ``.xml``."""
    return os.path.splitext(path)[0] + ".bin"


def precision(compiled: object) -> str:
    """The precisions the compiled model's compute layers run in (``bf16``; ``int8``; ``int8+bf16``).

    Read from the plugin's runtime graph (each layer's ``runtimePrecision``), not from its hint:
    the hint is bf16 on such a CPU even where a quantized layer runs in int8.
    """
    found = set()
    for op in compiled.get_runtime_model().get_ordered_ops():  # type: ignore[attr-defined]
        info = op.get_rt_info()
        if "layerType" in info and info["layerType"].astype(str) in _COMPUTE:
            value = info["runtimePrecision"].astype(str) if "runtimePrecision" in info else "?"
            found.add(_NAMES.get(value, value))
    hint = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()  # type: ignore[attr-defined]
    return "+".join(sorted(found)) or _NAMES.get(hint, hint)


class Runner:
    """Runs an IR with OpenVINO's CPU plugin on batches of float32 images; outputs by name."""

    def __init__(self, path: str):
        import openvino as ov

        self._compiled = ov.Core().compile_model(path, "CPU")
        self._request = self._compiled.create_infer_request()
        self._outputs = [(o.get_any_name(), o) for o in self._compiled.outputs]
        self.precision = precision(self._compiled)

    def __call__(self, images: np.ndarray) -> Mapping[str, np.ndarray]:
        found = self._request.infer({0: np.ascontiguousarray(images, dtype=np.float32)})
        return {name: np.array(found[output]) for name, output in self._outputs}
