"""A local model server speaking TensorFlow Serving's REST API, for ``make run`` and the tests.

It serves one or several models side by side, by name, each from a TensorFlow Serving model base
path (numeric version subfolders, the newest complete one served; a plain SavedModel folder is
served as version 1) on loopback, as TensorFlow Serving with a model config list does:

- ``GET  /v1/models/<name>[/versions/<v>]``            model status (``AVAILABLE``)
- ``GET  /v1/models/<name>[/versions/<v>]/metadata``   signature definitions
- ``POST /v1/models/<name>[/versions/<v>]:predict``    ``instances`` (row) or ``inputs`` (columnar)
  requests, ``signature_name``, ``{"b64": ...}`` for bytes inputs
- ``GET  /monitoring/prometheus/metrics``              TensorFlow Serving's Prometheus metrics
  (``components.serving.metrics``: request count, request and runtime latency, SavedModel loads);
  off with ``metrics=False`` (``--no-metrics``), as TF Serving without ``--monitoring_config_file``

A traffic split (``ModelServer(..., split=Split(name, version, percent))``) serves
one model at two versions, as a canary rollout does: ``percent`` of its unpinned requests reach
``version`` (the canary), the rest the newest version below it, in a fixed interleaving (10%:
every tenth request); ``/versions/<v>`` reaches either one, and the model's status lists both.
Every answer from a model names the version that answered in the ``X-Model-Version`` header.

Errors answer ``{"error": "<message>"}`` like TensorFlow Serving: 400 for a bad request (bad
JSON, wrong shape or type, bad base64, an image that does not decode, a batch over the cap), 404
for an unknown model (naming the served ones), version or signature, 413 for a body over the size
cap. Requests are served
concurrently (one thread per connection, HTTP/1.1 keep-alive); no input stops the server.

TensorFlow is imported when the server starts, not when this module is imported.

Command line::

    python -m components.serving.server --model classifier=stages/demo/models/classifier \
        --model detector=stages/demo/models/detector --port 8501
    python -m components.serving.server --model-base-path stages/demo/models/classifier \
        --model-name classifier --port 8501
"""

from __future__ import annotations

import argparse
import base64
import binascii
import dataclasses
import json
import logging
import re
import signal
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Optional

import numpy as np
import orjson

from components.serving.metrics import METRICS_PATH, ServingMetrics
from trainer.runtime import configure_tensorflow_env

log = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_BATCH_SIZE = 1024
DEFAULT_SIGNATURE = "serving_default"
VERSION_HEADER = "X-Model-Version"
"""The response header that names the version of the model that answered."""


@dataclasses.dataclass(frozen=True)
class Split:
    """A traffic split of one model between its canary version and the newest version below it.

    Attributes:
        model_name: the model split.
        version: the canary version.
        percent: the canary's share of the model's unpinned requests, 0 to 100.
    """

    model_name: str
    version: int
    percent: int

    def __post_init__(self) -> None:
        if not 0 <= self.percent <= 100:
            raise ValueError(f"a split's percent must be in 0..100, got {self.percent}")

    def to_canary(self, request_number: int) -> bool:
        """Whether request number ``request_number`` (0, 1, ...) goes to the canary: the canary's
        share of the first n requests is always within one request of ``percent``.
        """
        return (request_number + 1) * self.percent // 100 > request_number * self.percent // 100


_MODEL_PATH = re.compile(r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+))?(?P<rest>.*)$")
_DTYPE_NAMES = {"string": "DT_STRING", "float32": "DT_FLOAT", "int64": "DT_INT64", "int32": "DT_INT32"}


class RequestError(Exception):
    """A request the server answers with an error status and message (never a crash)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def find_versions(model_base_path: str) -> list[int]:
    """Return the complete versions (numeric subfolders holding ``saved_model.pb``), ascending."""
    base = Path(model_base_path)
    if not base.is_dir():
        return []
    return sorted(
        int(p.name) for p in base.iterdir() if p.is_dir() and p.name.isdigit() and (p / "saved_model.pb").is_file()
    )


def _resolve_model_dir(model_base_path: str, version: Optional[int]) -> tuple[int, Path]:
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


class _Signature:
    """One serving signature: input specs, output names, and the callable."""

    def __init__(self, fn):
        _, kwargs = fn.structured_input_signature
        self.fn = fn
        self.inputs = dict(kwargs)  # name -> TensorSpec
        self.outputs = dict(fn.structured_outputs)  # name -> TensorSpec

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


class _Model:
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
        self.signatures = {key: _Signature(fn) for key, fn in self._loaded.signatures.items()}
        if not self.signatures:
            raise ValueError(f"the SavedModel at {path} has no serving signatures")

    def signature(self, name: Optional[str]) -> tuple[str, _Signature]:
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
            return [_Model._decode_strings(v, f"{where}[{i}]") for i, v in enumerate(value)]
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

    def _row_inputs(self, sig: _Signature, instances: Any) -> dict[str, Any]:
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

    def _columnar_inputs(self, sig: _Signature, inputs: Any) -> dict[str, Any]:
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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: load clients reuse connections
    # The headers and the body go out in two writes: with Nagle's algorithm on, the body waited for
    # the client's delayed ACK of the headers on a reused connection (40 ms a request on Linux).
    disable_nagle_algorithm = True
    server_version = "lean-tpu-model-server/1"
    timeout = 60  # an idle keep-alive connection gives its thread back after this

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        log.debug("%s - %s", self.address_string(), format % args)

    def setup(self) -> None:
        super().setup()
        self.server.owner._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner._track(self.connection, add=False)

    # -- plumbing -------------------------------------------------------------------------------

    def _send(self, status: int, payload: dict[str, Any], text: Optional[str] = None) -> None:
        self.answered = status
        data = text.encode() if text is not None else _encode_json(payload)
        # Counted before the answer goes out: a client that reads the metrics page as soon as it
        # has its answer sees its request there.
        self._record()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4" if text is not None else "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.answered_by is not None:
            self.send_header(VERSION_HEADER, str(self.answered_by))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def _route(self, method: str) -> None:
        owner: ModelServer = self.server.owner
        began = time.perf_counter()
        self.answered_by: Optional[int] = None  # the version that answers (a keep-alive handler serves many requests)
        self._uncounted: Optional[tuple[str, str, float]] = None
        path = self.path.split("?", 1)[0]
        match = _MODEL_PATH.match(path)
        if method == "GET" and path == METRICS_PATH and owner.metrics is not None:
            self._send(HTTPStatus.OK, {}, text=owner.metrics.render())
            return
        self.answered = HTTPStatus.INTERNAL_SERVER_ERROR
        # Like TF Serving, every request to a model path counts, under the name it asked for;
        # other paths (TF Serving's dispatcher ignores them) do not.
        if match and owner.metrics is not None:
            self._uncounted = (match["name"], match["rest"].lstrip(":") if method == "POST" else "", began)
        try:
            self._answer(method, owner, match)
        finally:
            self._record()  # an answer that never went out counts too

    def _record(self) -> None:
        """Counts the request being answered in the metrics, once (its status and latency so far)."""
        uncounted, self._uncounted = getattr(self, "_uncounted", None), None
        if uncounted is not None:
            name, api, began = uncounted
            self.server.owner.metrics.record_request(name, api, self.answered, (time.perf_counter() - began) * 1e6)

    def _answer(self, method: str, owner: ModelServer, match: Optional[re.Match]) -> None:
        try:
            # The body is read first, whatever the path: an unread body would corrupt the next
            # request on this keep-alive connection.
            raw = self._read_raw() if method == "POST" else None
            if not match:
                raise RequestError(HTTPStatus.NOT_FOUND, f"unknown path {self.path}; expected /v1/models/<name>...")
            model = owner._pick(match["name"], match["version"], count=method == "POST")
            self.answered_by = model.version
            rest = match["rest"]
            if method == "GET" and rest in ("", "/"):
                self._send(HTTPStatus.OK, owner._status(model, pinned=match["version"] is not None))
            elif method == "GET" and rest == "/metadata":
                self._send(HTTPStatus.OK, model.metadata())
            elif method == "POST" and rest == ":predict":
                self._send(HTTPStatus.OK, model.predict(_parse_json(raw)))
            elif rest in (":classify", ":regress"):
                raise RequestError(HTTPStatus.BAD_REQUEST, f"{rest[1:]} is not supported; use :predict")
            else:
                raise RequestError(HTTPStatus.NOT_FOUND, f"unknown path {self.path} for {method}")
        except RequestError as err:
            self._send(err.status, {"error": err.message})
        except Exception as err:  # never let one request take the server down; report it
            log.exception("request %s %s failed", method, self.path)
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"internal error: {type(err).__name__}: {err}"})

    def _read_raw(self) -> bytes:
        length = self.headers.get("Content-Length")
        if length is None:
            self.close_connection = True
            raise RequestError(HTTPStatus.LENGTH_REQUIRED, "a Content-Length header is required")
        try:
            size = int(length)
        except ValueError:
            self.close_connection = True
            raise RequestError(HTTPStatus.BAD_REQUEST, f"bad Content-Length {length!r}") from None
        limit = self.server.owner.max_request_bytes
        if size > limit or size < 0:
            # The body is not read: the connection cannot be reused.
            self.close_connection = True
            raise RequestError(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                f"request body of {size} bytes exceeds the server's limit of {limit} bytes; send smaller batches",
            )
        return self.rfile.read(size)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")


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


def _encode_json(payload: Any) -> bytes:
    """``payload`` as compact JSON; NumPy arrays (the outputs) are written directly by orjson.

    A detector answers tens of thousands of float32 numbers per batch. ``json.dumps`` of their
    ``tolist()`` was most of the served path's overhead: it wrote each as a 17-digit float64 (a
    fifth more bytes for the client to parse). orjson writes each with float32's shortest digits,
    which parse back to the same float32 value, about ten times faster.
    """
    return orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)


def _parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise RequestError(HTTPStatus.BAD_REQUEST, f"JSON Parse error: {err}") from None
    except RecursionError:
        raise RequestError(HTTPStatus.BAD_REQUEST, "JSON Parse error: nested too deeply") from None
    if not isinstance(body, dict):
        raise RequestError(HTTPStatus.BAD_REQUEST, f"the request must be a JSON object, got {type(body).__name__}")
    return body


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128


class ModelServer:
    """TensorFlow Serving's REST API for one or several models on a loopback port (see the module docstring).

    Use as a context manager, or call :meth:`start` and :meth:`stop`::

        with ModelServer("stages/demo/models/classifier", "classifier") as server:
            requests.get(f"{server.url}/v1/models/classifier")
        with ModelServer([("classifier", "stages/demo/models/classifier"),
                          ("detector", "stages/demo/models/detector")]) as server:
            requests.get(f"{server.url}/v1/models/detector")

    Args:
        model_base_path: numeric version folders (the newest complete one is served) or a plain
            SavedModel folder (served as version 1); or, for several models, ``(name, base path)``
            pairs or a name -> base path mapping (then no ``model_name``).
        model_name: the name in ``/v1/models/<name>`` of the one model.
        host: the address to listen on; loopback by default.
        port: the port; 0 picks a free one (read it back from :attr:`url`).
        version: serve this version instead of the newest (one model only).
        max_request_bytes: larger request bodies are refused with 413.
        max_batch_size: larger batches are refused with 400.
        metrics: serve TensorFlow Serving's Prometheus metrics at ``/monitoring/prometheus/metrics``
            (and count them); False turns both off (the overhead benchmark compares the two).
        split: serve one model at two versions, a share of its traffic to the canary (:class:`Split`).
    """

    def __init__(
        self,
        model_base_path: str | Sequence[tuple[str, str]] | Mapping[str, str],
        model_name: Optional[str] = None,
        host: str = "127.0.0.1",
        port: int = 0,
        version: Optional[int] = None,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        metrics: bool = True,
        split: Optional[Split] = None,
    ):
        models = _model_pairs(model_base_path, model_name)
        if split is not None and split.model_name not in models:
            raise ValueError(f"split names model {split.model_name!r}, which is not served: serving {list(models)}")
        if version is not None and len(models) > 1:
            raise ValueError(f"version pins the one model served; got it with {len(models)} models {list(models)}")
        if max_request_bytes < 1 or max_batch_size < 1:
            raise ValueError(
                f"max_request_bytes and max_batch_size must be >= 1, got {max_request_bytes}, {max_batch_size}"
            )
        self.models = models  # name -> base path, in the order given
        # The first model's (the one model's in the one-model form).
        self.model_name, self.model_base_path = next(iter(models.items()))
        self.host = host
        self.port = port
        self.version = version
        self.max_request_bytes = max_request_bytes
        self.max_batch_size = max_batch_size
        self.metrics: Optional[ServingMetrics] = ServingMetrics() if metrics else None
        self.split = split
        self._models: dict[str, _Model] = {}
        self._canary: Optional[_Model] = None
        self._requests = 0
        self._httpd: Optional[_HTTPServer] = None
        self._thread: Optional[threading.Thread] = None
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()

    def _track(self, conn: socket.socket, add: bool) -> None:
        with self._lock:
            (self._connections.add if add else self._connections.discard)(conn)

    @property
    def served_version(self) -> int:
        """The version being served of the one model (after :meth:`start`).

        Raises:
            RuntimeError: not started, or several models are served (read :attr:`served_versions`).
        """
        versions = self.served_versions
        if len(versions) != 1:
            raise RuntimeError(f"this server serves {len(versions)} models: read served_versions, got {versions}")
        return next(iter(versions.values()))

    @property
    def served_versions(self) -> dict[str, int]:
        """The version being served of each model, by name (after :meth:`start`)."""
        if not self._models:
            raise RuntimeError("the server is not started")
        return {name: model.version for name, model in self._models.items()}

    @property
    def metrics_url(self) -> Optional[str]:
        """The metrics page's URL (after :meth:`start`); None when metrics are off."""
        return f"{self.url}{METRICS_PATH}" if self.metrics is not None else None

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:40123`` (after :meth:`start`)."""
        if self._httpd is None:
            raise RuntimeError("the server is not started: call start() or use it as a context manager")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> ModelServer:
        """Load the model and start answering; returns once the version is AVAILABLE.

        Raises:
            FileNotFoundError: no servable SavedModel at the base path.
        """
        if self._httpd is not None:
            return self
        loaded = {}
        for name, base_path in self.models.items():
            version = self.version
            if self.split is not None and name == self.split.model_name:
                version = _stable_version(base_path, self.split.version)
                canary_path = _resolve_model_dir(base_path, self.split.version)[1]
                self._canary = _Model(name, self.split.version, canary_path, self.max_batch_size, self.metrics)
            version, path = _resolve_model_dir(base_path, version)
            loaded[name] = _Model(name, version, path, self.max_batch_size, self.metrics)
        self._models = loaded
        self._httpd = _HTTPServer((self.host, self.port), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="model-server", daemon=True)
        self._thread.start()
        for model in loaded.values():
            log.info("serving %s version %d from %s at %s", model.name, model.version, model.path, self.url)
        return self

    def stop(self) -> None:
        """Stop answering, close open connections and free the port."""
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:  # idle keep-alive connections would otherwise linger
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed by the client
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._httpd = None
        self._thread = None

    def _pick(self, name: str, version: Optional[str], count: bool) -> _Model:
        """The model version that answers a request for ``name`` (at ``version``, if pinned).

        ``count``: the request takes its turn in the split (predictions do, status reads do not).

        Raises:
            RequestError: 404, no such model or version.
        """
        model = self._models.get(name)
        if model is None:
            raise RequestError(
                HTTPStatus.NOT_FOUND,
                f"Servable not found for request: Latest({name}); this server serves {sorted(self._models)}",
            )
        canary = self._canary if self.split is not None and name == self.split.model_name else None
        if version is not None:
            for candidate in (model, canary):
                if candidate is not None and version == str(candidate.version):
                    return candidate
            served = [m.version for m in (model, canary) if m is not None]
            raise RequestError(
                HTTPStatus.NOT_FOUND,
                f"Servable not found for request: Specific({name}, {version}); this server serves versions {served}",
            )
        if canary is None or not count:
            return model
        with self._lock:
            number, self._requests = self._requests, self._requests + 1
        return canary if self.split.to_canary(number) else model

    def _status(self, model: _Model, pinned: bool) -> dict[str, Any]:
        """A model's status: both versions while its traffic is split (unless one was asked for)."""
        if pinned or self._canary is None or model.name != self._canary.name:
            return model.status()
        return {"model_version_status": [self._canary.version_status(), model.version_status()]}

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _stable_version(model_base_path: str, canary_version: int) -> int:
    """The newest complete version below ``canary_version``: the one a split keeps serving.

    Raises:
        FileNotFoundError: there is none (a split needs an earlier version).
    """
    earlier = [v for v in find_versions(model_base_path) if v < canary_version]
    if not earlier:
        raise FileNotFoundError(
            f"a split of version {canary_version} needs an earlier complete version under {model_base_path}; "
            f"complete versions there: {find_versions(model_base_path)}"
        )
    return earlier[-1]


def _model_pairs(
    model_base_path: str | Sequence[tuple[str, str]] | Mapping[str, str], model_name: Optional[str]
) -> dict[str, str]:
    """The served models, name -> base path, from either form of :class:`ModelServer`'s arguments.

    Raises:
        ValueError: a bad or repeated name, no model, or both forms at once.
    """
    if isinstance(model_base_path, Mapping):
        model_base_path = list(model_base_path.items())
    if isinstance(model_base_path, (str, Path)):
        if model_name is None:
            raise ValueError(f"model_name is required with one model base path ({model_base_path})")
        pairs = [(model_name, str(model_base_path))]
    else:
        if model_name is not None:
            raise ValueError(
                f"model_name {model_name!r} goes with one base path; with (name, base path) pairs, name each pair"
            )
        pairs = [(name, str(path)) for name, path in model_base_path]
        if not pairs:
            raise ValueError("no model to serve: pass a base path and a name, or (name, base path) pairs")
    models: dict[str, str] = {}
    for name, path in pairs:
        if not name or "/" in name or ":" in name:
            raise ValueError(f"model_name must be a non-empty name without '/' or ':', got {name!r}")
        if name in models:
            raise ValueError(f"model {name!r} is given twice ({models[name]} and {path}): each name serves one model")
        models[name] = path
    return models


def _parse_model_flag(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(
            f"expected NAME=PATH (e.g. classifier=stages/demo/models/classifier), got {text!r}"
        )
    return name, path


def main(argv: Optional[list[str]] = None) -> int:
    """Run the server from the command line until interrupted."""
    configure_tensorflow_env()  # before the model is loaded (TensorFlow reads it on import)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        type=_parse_model_flag,
        metavar="NAME=PATH",
        help="serve the model at PATH (version folders or a SavedModel) as /v1/models/NAME; repeatable",
    )
    parser.add_argument("--model-base-path", help="the one model's version folders or SavedModel folder")
    parser.add_argument("--model-name", help="the one model's name, served as /v1/models/<name>")
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default loopback)")
    parser.add_argument("--port", type=int, default=8501, help="REST port (TensorFlow Serving's is 8501)")
    parser.add_argument("--version", type=int, default=None, help="serve this version, not the newest")
    parser.add_argument("--max-request-bytes", type=int, default=DEFAULT_MAX_REQUEST_BYTES)
    parser.add_argument("--max-batch-size", type=int, default=DEFAULT_MAX_BATCH_SIZE)
    parser.add_argument(
        "--no-metrics", action="store_true", help=f"do not serve (or count) the Prometheus metrics at {METRICS_PATH}"
    )
    args = parser.parse_args(argv)
    if args.model and (args.model_base_path or args.model_name):
        parser.error("give --model NAME=PATH (repeatable) or --model-base-path with --model-name, not both")
    if not args.model and not (args.model_base_path and args.model_name):
        parser.error("give --model NAME=PATH (repeatable), or --model-base-path and --model-name")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        server = ModelServer(
            args.model or args.model_base_path,
            None if args.model else args.model_name,
            host=args.host,
            port=args.port,
            version=args.version,
            max_request_bytes=args.max_request_bytes,
            max_batch_size=args.max_batch_size,
            metrics=not args.no_metrics,
        )
    except ValueError as err:
        parser.error(str(err))
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    server.start()
    served = ", ".join(f"{name} version {version}" for name, version in server.served_versions.items())
    print(f"serving {served} at {server.url}", flush=True)
    if server.metrics_url:
        print(f"metrics at {server.metrics_url}", flush=True)
    try:
        stopped.wait()
    except KeyboardInterrupt:
        pass  # Ctrl-C is the normal way to stop
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
