"""A served model: its version folder found and loaded, and its ``:predict`` requests answered.

A request's JSON (``instances`` in rows or ``inputs`` in columns, ``{"b64": ...}`` for bytes) becomes
the signature's tensors; the outputs come back as TensorFlow Serving's REST API writes them.
TensorFlow is imported when a model is loaded, not when this module is imported.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Mapping
from http import HTTPStatus
from pathlib import Path
from typing import Any, Optional

import numpy as np

from components.serving.metrics import ServingMetrics
from components.serving.rest import RequestError

DEFAULT_SIGNATURE = "serving_default"
_DTYPE_NAMES = {"string": "DT_STRING", "float32": "DT_FLOAT", "int64": "DT_INT64", "int32": "DT_INT32"}


def find_versions(model_base_path: str) -> list[int]:
    """Return the complete versions (numeric subfolders holding ``saved_model.pb``), ascending."""
    base = Path(model_base_path)
    if not base.is_dir():
        return []
    return sorted(
        int(p.name) for p in base.iterdir() if p.is_dir() and p.name.isdigit() and (p / "saved_model.pb").is_file()
    )


def resolve_model_dir(model_base_path: str, version: Optional[int]) -> tuple[int, Path]:
    """The version to serve (``version``, else the newest complete one) and its folder.

    Raises:
        FileNotFoundError: no such version, or no SavedModel at all under ``model_base_path``.
    """
    base = Path(model_base_path)
    versions = find_versions(model_base_path)
    if version is not None:
        if version not in versions:
            raise FileNotFoundError(
                f"version {version} not found under {model_base_path}: complete versions there: {versions}"
            )
        return version, base / str(version)
    if versions:
        return versions[-1], base / str(versions[-1])
    if (base / "saved_model.pb").is_file():
        return 1, base  # a plain SavedModel folder
    raise FileNotFoundError(
        f"no SavedModel under {model_base_path}: expected numeric version folders (1/, 2/, ...) "
        "each holding saved_model.pb, or a SavedModel folder itself"
    )


class Signature:
    """One serving signature: input specs, output names, and the callable."""

    def __init__(self, fn):
        _, kwargs = fn.structured_input_signature
        self.fn = fn
        self.inputs = dict(kwargs)  # name -> TensorSpec
        self.outputs = dict(fn.structured_outputs)  # name -> TensorSpec

    @classmethod
    def of(cls, fn: Any, inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> Signature:
        """A signature around any callable of tensors, with the given input and output TensorSpecs."""
        signature = cls.__new__(cls)
        signature.fn, signature.inputs, signature.outputs = fn, dict(inputs), dict(outputs)
        return signature

    def metadata(self) -> dict[str, Any]:
        def spec(name, s, kind):
            dims = [{"size": str(-1 if d is None else d), "name": ""} for d in s.shape.as_list()]
            return {
                "dtype": _DTYPE_NAMES.get(s.dtype.name, f"DT_{s.dtype.name.upper()}"),
                "tensor_shape": {"dim": dims, "unknown_rank": False},
                "name": f"{kind}_{name}:0",
            }

        return {
            "inputs": {n: spec(n, s, "serving_default") for n, s in self.inputs.items()},
            "outputs": {n: spec(n, s, "StatefulPartitionedCall") for n, s in self.outputs.items()},
            "method_name": "tensorflow/serving/predict",
        }


class Model:
    """A loaded SavedModel and the request-to-tensor conversion for its signatures."""

    def __init__(self, name: str, version: int, path: Path, max_batch_size: int, metrics: Optional[ServingMetrics]):
        import tensorflow as tf

        self.name = name
        self.version = version
        self.path = path
        self.max_batch_size = max_batch_size
        self.metrics = metrics
        self._tf = tf
        began = time.perf_counter()
        try:
            self._loaded = tf.saved_model.load(str(path))
        except Exception:
            if metrics is not None:
                metrics.record_load(str(path), ok=False)
            raise
        if metrics is not None:
            metrics.record_load(str(path), ok=True, latency_us=(time.perf_counter() - began) * 1e6)
        self.signatures = {key: Signature(fn) for key, fn in self._loaded.signatures.items()}
        if not self.signatures:
            raise ValueError(f"the SavedModel at {path} has no serving signatures")

    def signature(self, name: Optional[str]) -> tuple[str, Signature]:
        key = name or DEFAULT_SIGNATURE
        if key not in self.signatures:
            raise RequestError(
                HTTPStatus.BAD_REQUEST,
                f'Serving signature name: "{key}" not found in signature def; available: {sorted(self.signatures)}',
            )
        return key, self.signatures[key]

    # -- request conversion -------------------------------------------------------------------

    @staticmethod
    def _decode_strings(value: Any, where: str) -> Any:
        """Turn nested lists of ``{"b64": ...}`` objects and plain strings into bytes."""
        if isinstance(value, list):
            return [Model._decode_strings(v, f"{where}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, dict):
            if set(value) != {"b64"} or not isinstance(value["b64"], str):
                raise RequestError(
                    HTTPStatus.BAD_REQUEST,
                    f'{where}: a bytes value must be {{"b64": "<base64 string>"}}, got keys {sorted(value)}',
                )
            try:
                return base64.b64decode(value["b64"], validate=True)
            except (binascii.Error, ValueError) as err:
                raise RequestError(HTTPStatus.BAD_REQUEST, f"{where}: invalid base64 ({err})") from None
        if isinstance(value, str):
            return value.encode("utf-8")
        raise RequestError(
            HTTPStatus.BAD_REQUEST,
            f'{where}: expected a string or {{"b64": ...}} for a DT_STRING input, got {type(value).__name__}',
        )

    def _to_tensor(self, name: str, spec, value: Any, where: str):
        expected = [d if d is not None else -1 for d in spec.shape.as_list()]
        if spec.dtype.name == "string":
            data = np.array(self._decode_strings(value, where), dtype=object)
            if data.dtype != object or any(not isinstance(x, bytes) for x in data.reshape(-1)):
                raise RequestError(HTTPStatus.BAD_REQUEST, f"{where}: ragged or mixed list for input {name!r}")
        else:
            try:
                data = np.asarray(value, dtype=spec.dtype.as_numpy_dtype)
            except (ValueError, TypeError) as err:
                raise RequestError(
                    HTTPStatus.BAD_REQUEST,
                    f"{where}: input {name!r} must be a rectangular list of numbers of shape {expected} "
                    f"({spec.dtype.name}); could not convert it: {err}",
                ) from None
        if data.ndim != len(expected) or any(e not in (-1, g) for e, g in zip(expected, data.shape, strict=False)):
            raise RequestError(
                HTTPStatus.BAD_REQUEST,
                f"{where}: input {name!r} has shape {list(data.shape)}, expected {expected} "
                "(-1 is any size; the first dimension is the batch)",
            )
        if data.shape and data.shape[0] > self.max_batch_size:
            raise RequestError(
                HTTPStatus.BAD_REQUEST,
                f"batch of {data.shape[0]} exceeds the server's max batch size {self.max_batch_size}; "
                "split the request",
            )
        if data.shape and data.shape[0] == 0:
            raise RequestError(HTTPStatus.BAD_REQUEST, f"{where}: input {name!r} is an empty batch")
        if spec.dtype.name == "string":
            return self._tf.constant(list(data.reshape(-1)), dtype=self._tf.string, shape=data.shape)
        return self._tf.constant(data)

    def _row_inputs(self, sig: Signature, instances: Any) -> dict[str, Any]:
        if not isinstance(instances, list):
            raise RequestError(HTTPStatus.BAD_REQUEST, f"'instances' must be a list, got {type(instances).__name__}")
        if not instances:
            raise RequestError(HTTPStatus.BAD_REQUEST, "'instances' is empty: send at least one instance")
        names = list(sig.inputs)
        named = all(isinstance(x, dict) and set(x) != {"b64"} for x in instances)
        if named:
            columns: dict[str, list] = {n: [] for n in names}
            for i, inst in enumerate(instances):
                if set(inst) != set(names):
                    raise RequestError(
                        HTTPStatus.BAD_REQUEST,
                        f"instances[{i}] has keys {sorted(inst)}, expected exactly the inputs {names}",
                    )
                for n in names:
                    columns[n].append(inst[n])
            return {n: self._to_tensor(n, sig.inputs[n], columns[n], "instances") for n in names}
        if len(names) != 1:
            raise RequestError(
                HTTPStatus.BAD_REQUEST,
                f"this signature has several inputs {names}: each instance must be an object naming them",
            )
        return {names[0]: self._to_tensor(names[0], sig.inputs[names[0]], instances, "instances")}

    def _columnar_inputs(self, sig: Signature, inputs: Any) -> dict[str, Any]:
        names = list(sig.inputs)
        if isinstance(inputs, dict) and set(inputs) != {"b64"}:
            if set(inputs) != set(names):
                raise RequestError(
                    HTTPStatus.BAD_REQUEST, f"'inputs' has keys {sorted(inputs)}, expected exactly {names}"
                )
            return {n: self._to_tensor(n, sig.inputs[n], inputs[n], f"inputs.{n}") for n in names}
        if len(names) != 1:
            raise RequestError(HTTPStatus.BAD_REQUEST, f"'inputs' must be an object naming the inputs {names}")
        return {names[0]: self._to_tensor(names[0], sig.inputs[names[0]], inputs, "inputs")}

    def predict(self, body: dict[str, Any]) -> dict[str, Any]:
        """Answer a ``:predict`` request body (already parsed JSON)."""
        unknown = sorted(set(body) - {"signature_name", "instances", "inputs"})
        if unknown:
            raise RequestError(HTTPStatus.BAD_REQUEST, f"unknown request keys {unknown}")
        if ("instances" in body) == ("inputs" in body):
            raise RequestError(
                HTTPStatus.BAD_REQUEST,
                "send exactly one of 'instances' (row format) or 'inputs' (columnar format)",
            )
        signature_name = body.get("signature_name")
        if signature_name is not None and not isinstance(signature_name, str):
            raise RequestError(HTTPStatus.BAD_REQUEST, "'signature_name' must be a string")
        _, sig = self.signature(signature_name)
        row = "instances" in body
        tensors = self._row_inputs(sig, body["instances"]) if row else self._columnar_inputs(sig, body["inputs"])
        began = time.perf_counter()
        try:
            outputs = sig.fn(**tensors)
        except self._tf.errors.InvalidArgumentError as err:
            # e.g. bytes that are not an image: the client's fault, with TensorFlow's reason.
            message = err.message.strip().splitlines()
            reason = next((m for m in message if "Detected at node" not in m and m.strip()), str(err))
            raise RequestError(HTTPStatus.BAD_REQUEST, f"the model rejected the input: {reason.strip()}") from None
        if self.metrics is not None:
            self.metrics.record_runtime(self.name, (time.perf_counter() - began) * 1e6)
        values = {k: _json_value(k, v.numpy()) for k, v in outputs.items()}
        if not row:
            return {"outputs": values if len(values) > 1 else next(iter(values.values()))}
        if len(values) == 1:
            return {"predictions": next(iter(values.values()))}
        batch = len(next(iter(values.values())))
        return {"predictions": [{k: v[i] for k, v in values.items()} for i in range(batch)]}

    def status(self) -> dict[str, Any]:
        return {"model_version_status": [self.version_status()]}

    def version_status(self) -> dict[str, Any]:
        return {"version": str(self.version), "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}

    def metadata(self) -> dict[str, Any]:
        return {
            "model_spec": {"name": self.name, "signature_name": "", "version": str(self.version)},
            "metadata": {
                "signature_def": {
                    "signature_def": {k: s.metadata() for k, s in self.signatures.items()},
                }
            },
        }


def _json_value(name: str, array: Any) -> Any:
    """An output tensor as TensorFlow Serving's REST API writes it.

    String tensors are UTF-8 text, except outputs whose name ends in ``_bytes``, which are
    base64 (``{"b64": ...}``), as in TensorFlow Serving.
    """
    if array.dtype != object:
        # Kept as an array: _encode_json writes it, float32 with float32's shortest digits.
        return np.ascontiguousarray(array) if array.dtype.kind in "biuf" and array.ndim else array.tolist()
    flat = [
        {"b64": base64.b64encode(v).decode("ascii")} if name.endswith("_bytes") else v.decode("utf-8", "replace")
        for v in array.reshape(-1)
    ]
    nested: Any = flat
    for dim in reversed(array.shape[1:]):
        nested = [nested[i : i + dim] for i in range(0, len(nested), dim)]
    return nested if array.ndim else nested[0]
