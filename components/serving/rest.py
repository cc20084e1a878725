"""TensorFlow Serving's REST API over HTTP: the routes, the request handler and the HTTP server.

The handler parses the path, reads the body, asks its :class:`~components.serving.server.ModelServer`
(``server.owner``) which model version answers, and writes the JSON answer (or the metrics page);
a :class:`RequestError` becomes an ``{"error": ...}`` answer with its status.
"""

from __future__ import annotations

import json
import logging
import re
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, Optional

import orjson

from components.serving.metrics import METRICS_PATH
from components.serving.traffic import Exchange

if TYPE_CHECKING:
    from components.serving.server import ModelServer

log = logging.getLogger(__name__)

VERSION_HEADER = "X-Model-Version"
"""The response header that names the version of the model that answered."""

_MODEL_PATH = re.compile(r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+))?(?P<rest>.*)$")


class RequestError(Exception):
    """A request the server answers with an error status and message (never a crash)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class RestHandler(BaseHTTPRequestHandler):
    """Answers one connection's requests for the :class:`~components.serving.server.ModelServer` at ``server.owner``."""

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
        self.server.owner.track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.owner.track(self.connection, add=False)

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
        self._offer(status, data)  # after the answer went out: sampling never delays it

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
            model = owner.pick(match["name"], match["version"], count=method == "POST")
            self.answered_by = model.version
            rest = match["rest"]
            if method == "GET" and rest in ("", "/"):
                self._send(HTTPStatus.OK, owner.model_status(model, pinned=match["version"] is not None))
            elif method == "GET" and rest == "/metadata":
                self._send(HTTPStatus.OK, model.metadata())
            elif method == "POST" and rest == ":predict":
                self._sampled = (model, raw, time.perf_counter())
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

    def _offer(self, status: int, payload: bytes) -> None:
        """Hands a ``:predict`` exchange to the server's traffic log, if any (summarized on its own thread)."""
        sampled, self._sampled = getattr(self, "_sampled", None), None
        traffic = self.server.owner.traffic
        if sampled is not None and traffic is not None:
            model, raw, began = sampled
            ms = (time.perf_counter() - began) * 1e3
            traffic.offer(lambda: Exchange(model.name, model.version, int(status), ms, raw, payload))

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


class RestHTTPServer(ThreadingHTTPServer):
    """The HTTP server: a daemon thread per connection; ``owner`` is the :class:`ModelServer` it serves."""

    daemon_threads = True
    request_queue_size = 128
