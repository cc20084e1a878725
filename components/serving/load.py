"""A bounded load test of a model server's REST API: N concurrent clients for a fixed time.

Each client keeps one HTTP/1.1 connection open (as real clients and load balancers do) and sends
the same ``:predict`` request back to back. Standard library only.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
from typing import Any


def percentile(values: list[float], q: float) -> float:
    """Return the q-th percentile (0..100) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def run_load(
    base_url: str,
    model_name: str,
    body: dict[str, Any],
    clients: int = 8,
    duration_s: float = 20.0,
    timeout_s: float = 30.0,
) -> dict[str, Any]:
    """Send ``body`` to ``/v1/models/<model_name>:predict`` from ``clients`` threads for ``duration_s``.

    Args:
        base_url: e.g. ``http://127.0.0.1:8501``.
        model_name: the served name.
        body: the JSON request body.
        clients: concurrent clients (one connection each).
        duration_s: how long to send for.
        timeout_s: per-request socket timeout.

    Returns:
        ``requests``, ``errors`` (non-200 answers and connection failures), ``error_samples``,
        ``duration_s``, ``requests_per_s`` and latency ``p50_ms``/``p95_ms``/``p99_ms``/``max_ms``.
    """
    if clients < 1 or duration_s <= 0:
        raise ValueError(f"clients must be >= 1 and duration_s > 0, got {clients} and {duration_s}")
    url = urllib.parse.urlsplit(base_url)
    path = f"/v1/models/{model_name}:predict"
    payload = json.dumps(body).encode()
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[list[str]] = [[] for _ in range(clients)]
    start_gate = threading.Barrier(clients + 1)
    stop_at = [0.0]

    def client(i: int) -> None:
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout_s)
        start_gate.wait()
        try:
            while time.monotonic() < stop_at[0]:
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
    return {
        "clients": clients,
        "requests": len(ok) + len(failed),
        "errors": len(failed),
        "error_samples": failed[:5],
        "duration_s": elapsed,
        "requests_per_s": len(ok) / elapsed,
        "p50_ms": percentile(ok, 50),
        "p95_ms": percentile(ok, 95),
        "p99_ms": percentile(ok, 99),
        "max_ms": max(ok) if ok else float("nan"),
    }
