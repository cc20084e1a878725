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

OpenVINO is native code that reads the CPU's own description, and some of its releases die on
some virtual machines (a SIGFPE in ``compile_model`` from cache sizes a hypervisor reports as
zero). So an IR is first converted, compiled and run once in a child process
(``python -m trainer.export.openvino``): where the plugin crashes, the caller gets a
:class:`PluginCrash` naming the signal (the export refuses the format, the server does not load
it) instead of losing its own process, with everything else it held. Each file is checked once
per process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence

import numpy as np

_CHECKED: set[tuple[str, int, int]] = set()  # (IR path, size, mtime) checked in a child by this process
_CHILD_TIMEOUT_S = 600

# The layers that carry the model's arithmetic: their runtime precision is the model's.
_COMPUTE = ("Convolution", "GroupConvolution", "Deconvolution", "FullyConnected", "MatMul")
_NAMES = {"u8": "int8", "i8": "int8", "bf16": "bf16", "f32": "float32", "f16": "float16"}


class PluginCrash(RuntimeError):
    """OpenVINO died converting, compiling or running a model on this machine (its child process did)."""


def convert(onnx_path: str, path: str) -> None:
    """Writes the IR of an ONNX file (``path``, ``.xml``, its weights beside it), compiled and run once.

    Raises:
        PluginCrash: OpenVINO crashed or failed in the child that converts and checks it.
    """
    try:
        in_child(
            [sys.executable, "-m", __name__, "convert", onnx_path, path], f"converting {os.path.basename(onnx_path)}"
        )
    except PluginCrash:
        for left in (path, weights(path)):  # nothing half-written stays beside the other formats
            if os.path.exists(left):
                os.remove(left)
        raise
    _CHECKED.add(_identity(path))


def check(path: str) -> None:
    """Compiles and runs an IR once in a child process (once per file and process).

    Raises:
        PluginCrash: OpenVINO's CPU plugin crashed or failed on it.
    """
    if _identity(path) not in _CHECKED:
        in_child([sys.executable, "-m", __name__, "check", path], f"compiling {os.path.basename(path)}")
        _CHECKED.add(_identity(path))


def in_child(argv: Sequence[str], doing: str) -> None:
    """Runs ``argv``; its death by a signal or its failure is a :class:`PluginCrash` saying which."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=_CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise PluginCrash(f"OpenVINO did not finish {doing} in {_CHILD_TIMEOUT_S} s") from None
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name
        raise PluginCrash(
            f"OpenVINO's CPU plugin crashed ({name}) {doing} on this machine's CPU (some OpenVINO releases "
            "do on some virtual machines); serve another format, or try another OpenVINO release"
        )
    if done.returncode:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()] or ["(no output)"]
        raise PluginCrash(f"OpenVINO failed {doing}: {lines[-1][:300]}")


def _identity(path: str) -> tuple[str, int, int]:
    stat = os.stat(path)
    return os.path.realpath(path), stat.st_size, stat.st_mtime_ns


def _run_once(path: str) -> None:
    """Compiles an IR and runs it on one image of zeros (what the child checks)."""
    import openvino as ov

    compiled = ov.Core().compile_model(path, "CPU")
    shape = [d.get_length() if d.is_static else 1 for d in compiled.input(0).get_partial_shape()]
    compiled.create_infer_request().infer({0: np.zeros(shape, np.float32)})


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

        check(path)
        self._compiled = ov.Core().compile_model(path, "CPU")
        self._request = self._compiled.create_infer_request()
        self._outputs = [(o.get_any_name(), o) for o in self._compiled.outputs]
        self.precision = precision(self._compiled)

    def __call__(self, images: np.ndarray) -> Mapping[str, np.ndarray]:
        found = self._request.infer({0: np.ascontiguousarray(images, dtype=np.float32)})
        return {name: np.array(found[output]) for name, output in self._outputs}


def _main(argv: Sequence[str]) -> None:
    command, *paths = argv
    if command == "convert":
        import openvino as ov

        source, path = paths
        ov.save_model(ov.convert_model(source), path, compress_to_fp16=False)  # float32 weights: the float IR
        _run_once(path)
    elif command == "check":
        _run_once(paths[0])
    else:
        raise SystemExit(f"usage: python -m {__name__} convert ONNX XML | check XML")


if __name__ == "__main__":
    _main(sys.argv[1:])
