"""The traffic collector: sampled live traffic from a cluster's model servers (docs/observability.md).

Two ways in, one :class:`~components.serving.traffic.TrafficLog` behind them:

- **KServe's payload logger** (``spec.predictor.logger: {mode: all, url: http://traffic-collector}``)
  POSTs every request and every response as a CloudEvent (binary mode: ``ce-id``, ``ce-type``
  ending in ``.request`` or ``.response``, ``ce-inferenceservicename``; the body as sent). The
  logger has no sampling setting: the collector takes the sampler's turn when a request arrives,
  keeps a sampled request until its response (same ``ce-id``) and forgets the others at once;
  at most ``--pending`` requests wait for their response (the oldest are dropped and counted).
- **A proxy in front of TensorFlow Serving's REST port** (``--proxy-to http://127.0.0.1:8501``): every
  request is forwarded as it is and its answer returned as it is; ``:predict`` exchanges take
  their turn in the sampler.

``GET /metrics`` serves the stage's newest drift gauges (what the monitor's last run wrote beside
its ``drift.json``, read again at most every 30 s) for the cluster's Prometheus, whose traffic
alerts read them.

Command line::

    python -m components.serving.collector --stages-root gs://bucket/stages --stage prod --port 8080
    python -m components.serving.collector --stages-root gs://bucket/stages --stage prod --port 8080 \
        --proxy-to http://127.0.0.1:8501
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import logging
import math
import re
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

from components.serving.drift_history import stage_gauges
from components.serving.traffic import DEFAULT_RATES, KEEPS, Exchange, TrafficConfig, TrafficLog, traffic_dir

log = logging.getLogger(__name__)

_PREDICT = re.compile(r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>\d+))?:predict$")


class Pairing:
    """Pairs KServe's request and response events by ``ce-id``; only sampled requests are kept.

    Args:
        traffic: the log the sampled exchanges go to.
        pending: the most requests kept waiting for their response (the oldest go first).
    """

    def __init__(self, traffic: TrafficLog, pending: int = 1024):
        self.traffic = traffic
        self.pending = pending
        self.expired = 0
        self._waiting: collections.OrderedDict[str, tuple[bytes, float]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def request(self, event_id: str, body: bytes) -> bool:
        """A request arrived: kept when the sampler takes it; returns whether it was."""
        if not self.traffic.sampler.take():
            return False
        with self._lock:
            self._waiting[event_id] = (body, time.perf_counter())
            while len(self._waiting) > self.pending:
                self._waiting.popitem(last=False)
                self.expired += 1
        return True

    def response(self, event_id: str, model: str, version: Optional[int], body: bytes) -> bool:
        """A response arrived: its sampled request and it go to the log; returns whether they did."""
        with self._lock:
            waiting = self._waiting.pop(event_id, None)
        if waiting is None:
            return False
        raw, began = waiting
        try:
            answer = json.loads(body)
        except ValueError:
            answer = {"error": "the response is not JSON"}
        status = HTTPStatus.OK if isinstance(answer, dict) and "error" not in answer else HTTPStatus.BAD_REQUEST
        ms = (time.perf_counter() - began) * 1e3
        self.traffic.sampled += 1
        return self.traffic.put(Exchange(model, version, int(status), ms, raw, answer))


class CollectorHandler(BaseHTTPRequestHandler):
    """CloudEvents from KServe's logger (``POST /``), or every request in proxy mode."""

    protocol_version = "HTTP/1.1"
    server_version = "lean-tpu-traffic-collector/1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        log.debug("%s - %s", self.address_string(), format % args)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _reply(self, status: int, data: bytes = b"", headers: Optional[dict[str, str]] = None) -> None:
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path == GAUGES_PATH:  # the monitor's newest drift gauges, for the cluster's Prometheus
            self._reply(HTTPStatus.OK, self.server.gauges().encode(), {"Content-Type": "text/plain; version=0.0.4"})
        elif self.server.proxy_to:
            self._forward("GET", None)
        else:
            self._reply(HTTPStatus.OK, b"ok\n")  # the readiness probe

    def do_POST(self) -> None:  # noqa: N802
        body = self._body()
        if self.server.proxy_to:
            self._forward("POST", body)
            return
        kind = self.headers.get("ce-type", "")
        event_id = self.headers.get("ce-id", "")
        if not event_id or not kind.endswith((".request", ".response")):
            self._reply(
                HTTPStatus.BAD_REQUEST,
                b"expected a CloudEvent with ce-id and a ce-type ending in .request or .response\n",
            )
            return
        if kind.endswith(".request"):
            self.server.pairing.request(event_id, body)
        else:
            model = self.headers.get("ce-inferenceservicename", "model")
            self.server.pairing.response(event_id, model, None, body)
        self._reply(HTTPStatus.ACCEPTED)

    def _forward(self, method: str, body: Optional[bytes]) -> None:
        began = time.perf_counter()
        request = urllib.request.Request(f"{self.server.proxy_to}{self.path}", data=body, method=method)
        request.add_header("Content-Type", self.headers.get("Content-Type", "application/json"))
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status, data, version = response.status, response.read(), response.headers.get("X-Model-Version")
        except urllib.error.HTTPError as err:
            status, data, version = err.code, err.read(), err.headers.get("X-Model-Version")
        except OSError as err:
            self._reply(HTTPStatus.BAD_GATEWAY, json.dumps({"error": f"model server unreachable: {err}"}).encode())
            return
        headers = {"Content-Type": "application/json", **({"X-Model-Version": version} if version else {})}
        self._reply(status, data, headers)
        match = _PREDICT.match(self.path.split("?", 1)[0])
        if method == "POST" and match:
            ms = (time.perf_counter() - began) * 1e3
            answer = _json_or_error(data)
            number = int(version) if version and version.isdigit() else None
            self.server.traffic.offer(lambda: Exchange(match["name"], number, status, ms, body, answer))


def _json_or_error(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return {"error": "not JSON"}


GAUGES_PATH = "/metrics"
GAUGES_TTL_S = 30.0
"""How long the drift gauges read from the stage's storage are served before they are read again."""


class _Cached:
    """``read()``'s text, read again once it is ``ttl_s`` old (scrapes read the storage at most that often)."""

    def __init__(self, read: Callable[[], str], ttl_s: float):
        self._read, self._ttl_s, self._at, self._text = read, ttl_s, -math.inf, ""
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            if time.monotonic() - self._at >= self._ttl_s:
                try:
                    self._text = self._read()
                except OSError as err:  # the storage is unreachable: the last text, and say so
                    log.warning("drift gauges not read again: %s", err)
                self._at = time.monotonic()
            return self._text


class CollectorServer(ThreadingHTTPServer):
    """The collector's HTTP server; ``traffic``, ``pairing``, ``proxy_to`` and ``gauges`` are what its handlers use."""

    daemon_threads = True
    request_queue_size = 128

    def __init__(
        self, address: tuple[str, int], traffic: TrafficLog, proxy_to: str = "", pending: int = 1024,
        gauges: Optional[Callable[[], str]] = None,
    ):  # fmt: skip
        super().__init__(address, CollectorHandler)
        self.traffic = traffic
        self.pairing = Pairing(traffic, pending)
        self.proxy_to = proxy_to.rstrip("/")
        self.gauges = _Cached(gauges or (lambda: ""), GAUGES_TTL_S)

    @property
    def url(self) -> str:
        """``http://host:port``."""
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


def _stage(text: str) -> str:
    """A stage's name from itself or from its namespace (``ltp-prod``: a sidecar reads its pod's)."""
    stage = text.removeprefix("ltp-")
    if stage not in DEFAULT_RATES:
        raise argparse.ArgumentTypeError(f"expected one of {sorted(DEFAULT_RATES)} or ltp-<stage>, got {text!r}")
    return stage


def main(argv: Optional[list[str]] = None) -> int:
    """Run the collector until SIGTERM or Ctrl-C (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m components.serving.collector", description=__doc__.split("\n\n")[0])
    p.add_argument("--stages-root", required=True, help="the stage registry (traffic goes under <stage>/traffic/)")
    p.add_argument("--stage", required=True, type=_stage, help="demo, staging or prod (or its namespace, ltp-<stage>)")
    p.add_argument("--sample-rate", type=float, help="share of requests kept (default: the stage's)")
    p.add_argument("--keep", default="summary", choices=KEEPS, help="what is kept of a sampled image")
    p.add_argument("--host", default="0.0.0.0", help="listen address")  # noqa: S104 (a pod's collector)
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--proxy-to", default="", help="TensorFlow Serving's REST URL: forward every request there")
    p.add_argument("--pending", type=int, default=1024, help="sampled requests kept waiting for their response")
    args = p.parse_args(argv)
    rate = DEFAULT_RATES[args.stage] if args.sample_rate is None else args.sample_rate
    try:
        config = TrafficConfig(sample_rate=rate, keep=args.keep)
    except ValueError as err:
        p.error(str(err))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    with TrafficLog(traffic_dir(args.stages_root, args.stage), config) as traffic:
        gauges = functools.partial(stage_gauges, args.stages_root, args.stage)
        server = CollectorServer((args.host, args.port), traffic, args.proxy_to, args.pending, gauges)
        signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
        print(f"collecting {args.stage}'s traffic at {server.url}, {rate:.0%} sampled", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass  # Ctrl-C is the normal way to stop
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
