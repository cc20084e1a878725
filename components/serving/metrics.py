"""TensorFlow Serving's Prometheus metrics, counted by the local model server.

TensorFlow Serving (``--monitoring_config_file`` with ``prometheus_config { enable: true }``)
serves its TensorFlow monitoring metrics as Prometheus text at ``/monitoring/prometheus/metrics``
on the REST port. The local server exports the ones the dashboards and alerts use, under the same
names, labels and units, so that one query works on both (checked in TensorFlow Serving's source,
``tensorflow_serving/servables/tensorflow/util.cc``, ``model_servers/http_server.cc`` and
``util/prometheus_exporter.cc``, and TensorFlow's ``cc/saved_model/loader.cc``):

- ``:tensorflow:serving:request_count{model_name,status}`` (counter): every REST request to a
  model path; ``status`` is the canonical error code's name (``OK``, ``INVALID_ARGUMENT``,
  ``NOT_FOUND``, ...).
- ``:tensorflow:serving:request_latency{model_name,API,entrypoint="REST"}`` (histogram, in
  microseconds): the wall time of each *successful* request only (TF Serving records none for a
  failed one); ``API`` is ``predict`` (``classify``/``regress``) for a POST and empty for a GET.
  Buckets: 10 * 1.8**i for i in 0..32, then ``+Inf``.
- ``:tensorflow:serving:runtime_latency{model_name,API,runtime}`` (histogram, microseconds): the
  time inside the model call (``API="Predict"``, ``runtime="TF1"`` as TensorFlow Serving's
  SavedModel runtime labels it).
- ``:tensorflow:cc:saved_model:load_attempt_count{model_path,status}`` (counter, ``success`` or
  ``fail``) and ``:tensorflow:cc:saved_model:load_latency{model_path}`` (counter, microseconds).

The names are TensorFlow's metric names with every character outside ``[a-zA-Z0-9_]`` turned into
``:``. TF Serving writes ``# TYPE`` lines and no ``# HELP``, no ``_total`` or ``_created`` series,
and bucket bounds and sums with six significant digits (``absl::StrCat`` of a double, like
``%g``); so does :meth:`ServingMetrics.render`. The counting is ``prometheus_client``'s (a private
registry); only the exposition is ours, since its own adds series TensorFlow Serving lacks.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator
from typing import Optional

from prometheus_client import CollectorRegistry, Counter, Histogram

METRICS_PATH = "/monitoring/prometheus/metrics"
"""TensorFlow Serving's default ``prometheus_config.path``."""

LATENCY_BUCKETS_US: tuple[float, ...] = tuple(10.0 * 1.8**i for i in range(33))
"""TensorFlow Serving's request and runtime latency buckets (``Buckets::Exponential(10, 1.8, 33)``)."""

REQUEST_COUNT = ":tensorflow:serving:request_count"
REQUEST_LATENCY = ":tensorflow:serving:request_latency"
RUNTIME_LATENCY = ":tensorflow:serving:runtime_latency"
LOAD_ATTEMPT_COUNT = ":tensorflow:cc:saved_model:load_attempt_count"
LOAD_LATENCY = ":tensorflow:cc:saved_model:load_latency"

# HTTP status -> the canonical error code TF Serving's REST handler answers it for
# (model_servers/http_server.cc ToHTTPStatusCode, read backwards).
_STATUS_CODES = {
    200: "OK",
    400: "INVALID_ARGUMENT",
    404: "NOT_FOUND",
    411: "INVALID_ARGUMENT",
    413: "RESOURCE_EXHAUSTED",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def status_code_name(http_status: int) -> str:
    """The canonical error code's name TF Serving labels a request answered ``http_status`` with."""
    return _STATUS_CODES.get(int(http_status), "UNKNOWN")


def _g(value: float) -> str:
    """A double as ``absl::StrCat`` writes it: six significant digits, ``%g`` style."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:g}"


def _labels(names: tuple[str, ...], values: tuple[str, ...], extra: str = "") -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"')

    parts = [f'{n}="{esc(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return ",".join(parts)


class ServingMetrics:
    """The local model server's TensorFlow Serving metrics (see the module docstring).

    Thread-safe: request threads count, a scrape renders. Each instance has its own registry, so
    several servers in one process (the tests, ``make serve``) count apart.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        # prometheus_client's names must not contain ':' at the start of a label set; they are
        # stored under safe names and written under TF Serving's in render().
        self._request_count = Counter("request_count", "requests", ["model_name", "status"], registry=self.registry)
        self._request_latency = Histogram(
            "request_latency",
            "request wall time (us)",
            ["model_name", "API", "entrypoint"],
            buckets=LATENCY_BUCKETS_US,
            registry=self.registry,
        )
        self._runtime_latency = Histogram(
            "runtime_latency",
            "model call wall time (us)",
            ["model_name", "API", "runtime"],
            buckets=LATENCY_BUCKETS_US,
            registry=self.registry,
        )
        self._load_attempts = Counter(
            "load_attempt_count", "SavedModel loads", ["model_path", "status"], registry=self.registry
        )
        self._load_latency = Counter(
            "load_latency", "SavedModel load time (us)", ["model_path"], registry=self.registry
        )
        self._render_lock = threading.Lock()

    def record_request(self, model_name: str, api: str, http_status: int, latency_us: float) -> None:
        """Count one REST request to a model path; its latency is kept only when it succeeded."""
        self._request_count.labels(model_name, status_code_name(http_status)).inc()
        if http_status == 200:
            self._request_latency.labels(model_name, api, "REST").observe(latency_us)

    def record_runtime(self, model_name: str, latency_us: float, api: str = "Predict", runtime: str = "TF1") -> None:
        """Count the time one model call took (TF Serving's ``runtime_latency``)."""
        self._runtime_latency.labels(model_name, api, runtime).observe(latency_us)

    def record_load(self, model_path: str, ok: bool, latency_us: Optional[float] = None) -> None:
        """Count one SavedModel load attempt (and, when it succeeded, its time)."""
        self._load_attempts.labels(model_path, "success" if ok else "fail").inc()
        if ok and latency_us is not None:
            self._load_latency.labels(model_path).inc(latency_us)

    def _families(self) -> Iterator[tuple[str, str, list]]:
        names = {
            "request_count": REQUEST_COUNT,
            "request_latency": REQUEST_LATENCY,
            "runtime_latency": RUNTIME_LATENCY,
            "load_attempt_count": LOAD_ATTEMPT_COUNT,
            "load_latency": LOAD_LATENCY,
        }
        for family in self.registry.collect():
            yield names[family.name], family.type, family.samples

    def render(self) -> str:
        """The metrics page, in TensorFlow Serving's Prometheus text form."""
        lines: list[str] = []
        with self._render_lock:
            for name, kind, samples in self._families():
                if not samples:
                    continue
                if kind == "counter":
                    lines.append(f"# TYPE {name} counter")
                    for s in samples:
                        if s.name.endswith("_total"):
                            keys = tuple(s.labels)
                            lines.append(f"{name}{{{_labels(keys, tuple(s.labels[k] for k in keys))}}} {int(s.value)}")
                    continue
                lines.append(f"# TYPE {name} histogram")
                # Samples come per label set: buckets (ascending), then _count, _sum, _created.
                by_set: dict[tuple, list] = {}
                for s in samples:
                    key = tuple((k, v) for k, v in s.labels.items() if k != "le")
                    by_set.setdefault(key, []).append(s)
                for key, group in by_set.items():
                    keys, values = tuple(k for k, _ in key), tuple(v for _, v in key)
                    total = 0
                    for s in group:
                        if s.name.endswith("_bucket"):
                            total = int(s.value)
                            le = 'le="' + _g(float(s.labels["le"])) + '"'
                            lines.append(f"{name}_bucket{{{_labels(keys, values, le)}}} {total}")
                    total_sum = next(s.value for s in group if s.name.endswith("_sum"))
                    lines.append(f"{name}_sum{{{_labels(keys, values)}}} {_g(total_sum)}")
                    lines.append(f"{name}_count{{{_labels(keys, values)}}} {total}")
        return "\n".join(lines) + "\n"
