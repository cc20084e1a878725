"""A bounded load test of a model server's REST API: N concurrent clients, at most M requests or S seconds.

Each client keeps one HTTP/1.1 connection open (as real clients and load balancers do) and sends
the same ``:predict`` request back to back, with the standard library's HTTP client. The promote step runs a short
one as one of its serving checks (``components.serving.checks.check_load``); the benchmark under
tests/benchmarks runs a long one.
"""

from __future__ import annotations

import dataclasses
import http.client
import itertools
import json
import threading
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any, Optional

from trainer import records


def percentile(values: list[float], q: float) -> float:
    """Return the q-th percentile (0..100) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclasses.dataclass(frozen=True)
class LoadResult:
    """What a load run measured.

    Attributes:
        clients: concurrent clients.
        requests: requests sent (answered or failed).
        errors: non-200 answers and connection failures.
        error_samples: up to five of those, as text.
        duration_s: wall time from the start signal to the last client's end.
        requests_per_s: successful requests per second.
        p50_ms, p95_ms, p99_ms, max_ms: latency of the successful requests (NaN without any).
    """

    clients: int
    requests: int
    errors: int
    error_samples: tuple[str, ...]
    duration_s: float
    requests_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float

    def figures(self) -> dict[str, float]:
        """The numbers, for a check's figures and the stage history."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "error_samples"}

    def summary(self) -> str:
        """One line: requests, clients, time, rate, latency, errors."""
        return (
            f"{self.requests} requests from {self.clients} clients in {self.duration_s:.1f} s: "
            f"{self.requests_per_s:.0f} req/s, p50 {self.p50_ms:.1f} ms, p95 {self.p95_ms:.1f} ms, "
            f"{self.errors} errors"
        )


@dataclasses.dataclass(frozen=True)
class LoadTestRecord(records.Record):
    """A stage's load test at promotion as its history keeps it (``load_test`` of a history entry).

    Forward-compatible, as the history that keeps it: keys of a newer version are kept in ``extra``.

    Attributes:
        clients, requests, errors, duration_s, requests_per_s: what ran and how fast it was answered.
        p50_ms, p95_ms, p99_ms: latency percentiles of the answered requests (None: none answered,
            and left out of the JSON).
        objectives: the objectives it was checked against (``max_p99_ms``, ``min_requests_per_s``, ...).
        passed: whether it met them.
        extra: keys this code does not know, kept as they were.
    """

    _mode = records.FORWARD_COMPATIBLE
    _what = "load test record"
    _omit_empty = ("p50_ms", "p95_ms", "p99_ms")

    clients: int
    requests: int
    errors: int
    duration_s: float
    requests_per_s: float
    p50_ms: Optional[float]
    p95_ms: Optional[float]
    p99_ms: Optional[float]
    objectives: Mapping[str, float]
    passed: bool
    extra: Mapping[str, Any] = records.extra_field()

    @classmethod
    def of(cls, figures: Mapping[str, float], objectives: Mapping[str, float], passed: bool) -> LoadTestRecord:
        """From a load check's figures (:meth:`LoadResult.figures`, NaN latencies left out)."""
        return cls(
            clients=int(figures.get("clients", 0)),
            requests=int(figures.get("requests", 0)),
            errors=int(figures.get("errors", 0)),
            duration_s=float(figures.get("duration_s", 0.0)),
            requests_per_s=float(figures.get("requests_per_s", 0.0)),
            p50_ms=figures.get("p50_ms"),
            p95_ms=figures.get("p95_ms"),
            p99_ms=figures.get("p99_ms"),
            objectives=dict(objectives),
            passed=passed,
        )


def run_load(
    base_url: str,
    model_name: str,
    body: dict[str, Any],
    clients: int = 8,
    duration_s: float = 20.0,
    timeout_s: float = 30.0,
    max_requests: Optional[int] = None,
) -> LoadResult:
    """Send ``body`` to ``/v1/models/<model_name>:predict`` from ``clients`` threads.

    The run stops after ``duration_s`` or, when ``max_requests`` is given, once that many
    requests were sent, whichever comes first.

    Args:
        base_url: e.g. ``http://127.0.0.1:8501``.
        model_name: the served name.
        body: the JSON request body.
        clients: concurrent clients (one connection each).
        duration_s: the most seconds to send for.
        timeout_s: per-request socket timeout.
        max_requests: the most requests to send, all clients together; None: no limit but time.

    Raises:
        ValueError: ``clients`` < 1, ``duration_s`` <= 0 or ``max_requests`` < 1.
    """
    if clients < 1 or duration_s <= 0 or (max_requests is not None and max_requests < 1):
        raise ValueError(
            f"clients must be >= 1, duration_s > 0 and max_requests >= 1 (or None), got {clients}, "
            f"{duration_s} and {max_requests}"
        )
    url = urllib.parse.urlsplit(base_url)
    path = f"/v1/models/{model_name}:predict"
    payload = json.dumps(body).encode()
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[list[str]] = [[] for _ in range(clients)]
    start_gate = threading.Barrier(clients + 1)
    stop_at = [0.0]
    tickets = itertools.count()  # next() is atomic under the GIL: a shared request budget
    budget = max_requests if max_requests is not None else float("inf")

    def client(i: int) -> None:
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout_s)
        start_gate.wait()
        try:
            while time.monotonic() < stop_at[0] and next(tickets) < budget:
                t0 = time.perf_counter()
                try:
                    conn.request("POST", path, payload, {"Content-Type": "application/json"})
                    response = conn.getresponse()
                    data = response.read()
                    if response.status != 200:
                        errors[i].append(f"HTTP {response.status}: {data[:200]!r}")
                        continue
                except (OSError, http.client.HTTPException) as err:
                    errors[i].append(f"{type(err).__name__}: {err}")
                    conn.close()
                    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout_s)
                    continue
                latencies[i].append(time.perf_counter() - t0)
        finally:
            conn.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    began = time.monotonic()
    stop_at[0] = began + duration_s
    start_gate.wait()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - began
    ok = [x * 1000 for per in latencies for x in per]
    failed = [e for per in errors for e in per]
    return LoadResult(
        clients=clients,
        requests=len(ok) + len(failed),
        errors=len(failed),
        error_samples=tuple(failed[:5]),
        duration_s=elapsed,
        requests_per_s=len(ok) / elapsed,
        p50_ms=percentile(ok, 50),
        p95_ms=percentile(ok, 95),
        p99_ms=percentile(ok, 99),
        max_ms=max(ok) if ok else float("nan"),
    )
