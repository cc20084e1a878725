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

A traffic split (``ModelServer(..., split=Split(name, version, percent))``,
:class:`components.serving.canary.Split`) serves
one model at two versions, as a canary rollout does: ``percent`` of its unpinned requests reach
``version`` (the canary), the rest the newest version below it, in a fixed interleaving (10%:
every tenth request); ``/versions/<v>`` reaches either one, and the model's status lists both.
Every answer from a model names the version that answered in the ``X-Model-Version`` header.

Errors answer ``{"error": "<message>"}`` like TensorFlow Serving: 400 for a bad request (bad
JSON, wrong shape or type, bad base64, an image that does not decode, a batch over the cap), 404
for an unknown model (naming the served ones), version or signature, 413 for a body over the size
cap. Requests are served
concurrently (one thread per connection, HTTP/1.1 keep-alive); no input stops the server.

TensorFlow is imported when the server starts, not when this module is imported. This module holds
the server itself (:class:`ModelServer`) and its command line; ``components.serving.rest`` the HTTP
handler and its routes, ``components.serving.model`` a loaded model and its request conversion,
``components.serving.canary`` the traffic split. A version folder holding a portable format
(``portable/serving.json``, written by a promotion's ``serving_format``) is served through that
format's runtime with the same REST contract (``components.serving.portable``).

Command line::

    python -m components.serving.server --model classifier=stages/demo/models/classifier \
        --model detector=stages/demo/models/detector --port 8501
    python -m components.serving.server --model-base-path stages/demo/models/classifier \
        --model-name classifier --port 8501
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import threading
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from pathlib import Path
from typing import Any, Optional

from components.serving.canary import Split, stable_version
from components.serving.metrics import METRICS_PATH, ServingMetrics
from components.serving.model import Model, resolve_model_dir
from components.serving.portable import load_model
from components.serving.rest import RequestError, RestHandler, RestHTTPServer
from components.serving.traffic import TrafficLog
from trainer.runtime import configure_tensorflow_env

log = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_BATCH_SIZE = 1024


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
        traffic: keep a sample of the ``:predict`` exchanges (:class:`~components.serving.traffic.TrafficLog`).
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
        traffic: Optional[TrafficLog] = None,
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
        self.traffic = traffic
        self._models: dict[str, Model] = {}
        self._canary: Optional[Model] = None
        self._requests = 0
        self._httpd: Optional[RestHTTPServer] = None
        self._thread: Optional[threading.Thread] = None
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()

    def track(self, conn: socket.socket, add: bool) -> None:
        """Adds (or, with ``add`` False, forgets) an open connection, closed by :meth:`stop`."""
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
                version = stable_version(base_path, self.split.version)
                canary_path = resolve_model_dir(base_path, self.split.version)[1]
                self._canary = load_model(name, self.split.version, canary_path, self.max_batch_size, self.metrics)
            version, path = resolve_model_dir(base_path, version)
            loaded[name] = load_model(name, version, path, self.max_batch_size, self.metrics)
        self._models = loaded
        if self.traffic is not None:
            self.traffic.start()
        self._httpd = RestHTTPServer((self.host, self.port), RestHandler)
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
        if self.traffic is not None:
            self.traffic.close()  # the last shard is written

    def pick(self, name: str, version: Optional[str], count: bool) -> Model:
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

    def model_status(self, model: Model, pinned: bool) -> dict[str, Any]:
        """A model's status: both versions while its traffic is split (unless one was asked for)."""
        if pinned or self._canary is None or model.name != self._canary.name:
            return model.status()
        return {"model_version_status": [self._canary.version_status(), model.version_status()]}

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


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
