"""A real Prometheus (Debian's ``prometheus`` package) on loopback, scraping local model servers.

The integration tests start their own ``prometheus`` binary on a free port with a temporary
config and data folder (whatever service the package started on install is not used), scrape
the local model server every second and evaluate a rule file every second.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

from components.serving.metrics import METRICS_PATH

PROMETHEUS = shutil.which("prometheus")
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus missing: `make prometheus` installs Debian's prometheus package"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    """A running test Prometheus: :meth:`query` (instant PromQL), :meth:`alerts`."""

    def __init__(self, url: str):
        self.url = url

    def _get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as err:  # a bad query: Prometheus says why
            raise AssertionError(f"{path} {params}: HTTP {err.code}: {err.read().decode()[:500]}") from None
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector of ``expr`` now: ``[{"metric": {...}, "value": [t, "v"]}, ...]``."""
        data = self._get("/api/v1/query", query=expr)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def value(self, expr: str) -> Optional[float]:
        """The single value of ``expr`` (None when the vector is empty)."""
        result = self.query(expr)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def alerts(self) -> dict[str, str]:
        """Alert name -> state (pending, firing) of the active alerts."""
        return {a["labels"]["alertname"]: a["state"] for a in self._get("/api/v1/alerts")["alerts"]}

    def wait_for(self, expr: str, predicate, timeout_s: float = 30.0) -> Optional[float]:
        """Polls ``expr`` until ``predicate(value)`` holds; returns the value."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.value(expr)
            if predicate(value):
                return value
            if time.monotonic() > deadline:
                pytest.fail(f"{expr} stayed at {value} for {timeout_s} s")
            time.sleep(0.25)

    def wait_for_alert(self, name: str, state: str = "firing", timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while self.alerts().get(name) != state:
            if time.monotonic() > deadline:
                pytest.fail(f"alert {name} did not become {state} in {timeout_s} s: {self.alerts()}")
            time.sleep(0.25)


@contextlib.contextmanager
def running_prometheus(
    workdir: Path,
    targets: Mapping[str, Sequence[str]],
    rule_groups: Sequence[Mapping[str, Any]] = (),
) -> Iterator[Prometheus]:
    """Starts Prometheus scraping ``targets`` (namespace -> ``host:port`` list) as job ``model-server``.

    Each target gets the ``namespace`` label a cluster's Prometheus gives a stage's pods, so the
    manifests' queries select it unchanged. Scrapes and rule evaluations run every second.
    """
    if PROMETHEUS is None:
        pytest.skip("prometheus missing: `make prometheus` installs Debian's prometheus package")
    workdir.mkdir(parents=True, exist_ok=True)
    rules_path = workdir / "rules.yaml"
    rules_path.write_text(yaml.safe_dump({"groups": [dict(g) for g in rule_groups]}))
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
        "rule_files": [str(rules_path)] if rule_groups else [],
        "scrape_configs": [
            {
                "job_name": "model-server",
                "metrics_path": METRICS_PATH,
                "static_configs": [{"targets": list(t), "labels": {"namespace": ns}} for ns, t in targets.items()],
            }
        ],
    }
    config_path = workdir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config))
    port = free_port()
    log = open(workdir / "prometheus.log", "wb")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config_path}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-lifecycle",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"prometheus did not start: {(workdir / 'prometheus.log').read_text()[-2000:]}")
            time.sleep(0.2)
        yield Prometheus(url)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
