"""A FAKE Kubeflow Pipelines REST API (v2beta1) for tests: a small http.server on 127.0.0.1.

It implements only what ``make schedule`` asks through ``kfp.Client`` (2.17.3), with the API's
semantics as far as they matter there:

- ``GET /apis/v2beta1/healthz``;
- experiments: list (``filter`` on ``display_name`` with ``EQUALS``), create;
- recurring runs: create (``mode`` ENABLE or DISABLE; the cron must have KFP's 6 fields, else 400
  as the API's cron parser answers), list (by ``experiment_id`` and a ``display_name`` filter),
  get, delete (404 when there is none), ``:enable`` and ``:disable``.

Every change is appended to ``events`` (``("create", id, mode)``, ``("delete", id)``,
``("enable", id)``), so a test sees the order a replacement took, and ``enabled_at_each_step``
says how many recurring runs of a name were enabled after each change (no gap: never 0 once one
was). A delete of an id in ``refuse_delete`` answers 500 (a host that refuses it). Not implemented: pipelines,
runs, namespaces, authentication, paging (everything is one page).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional
from urllib.parse import parse_qs, urlsplit

API = "/apis/v2beta1"
_RECURRING = re.compile(rf"^{API}/recurringruns/(?P<id>[^/:]+)(?::(?P<verb>enable|disable))?$")


class FakeKfp:
    """The API's state: experiments, recurring runs, and the changes made, in order."""

    def __init__(self) -> None:
        self.experiments: dict[str, dict[str, Any]] = {}
        self.recurring: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[Any, ...]] = []
        self.enabled_after: list[dict[str, int]] = []
        self.refuse_delete: set[str] = set()
        self.lock = threading.Lock()
        self._ids = 0

    def _id(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}-{self._ids}"

    def _changed(self, *event: Any) -> None:
        self.events.append(event)
        counts: dict[str, int] = {}
        for run in self.recurring.values():
            counts.setdefault(run["display_name"], 0)
            counts[run["display_name"]] += run["mode"] == "ENABLE"
        self.enabled_after.append(counts)

    def enabled_at_each_step(self, name: str) -> list[int]:
        """How many recurring runs named ``name`` were enabled after each change."""
        return [counts.get(name, 0) for counts in self.enabled_after]

    # ------------------------------------------------------------------ handlers: (status, body)

    def handle(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        with self.lock:
            if (method, path) == ("GET", f"{API}/healthz"):
                return 200, {"multi_user": False}
            if path == f"{API}/experiments":
                return self._experiments(method, query, body)
            if path == f"{API}/recurringruns":
                return self._recurring_runs(method, query, body)
            match = _RECURRING.match(path)
            if match:
                return self._recurring_run(method, match.group("id"), match.group("verb"))
            return 404, _status(5, f"no {method} {path} here")

    def _experiments(self, method: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        if method == "POST":
            experiment = {"experiment_id": self._id("e"), "display_name": body["display_name"]}
            self.experiments[experiment["experiment_id"]] = experiment
            return 200, experiment
        found = [e for e in self.experiments.values() if _matches(e, query.get("filter"))]
        return 200, {"experiments": found, "total_size": len(found)} if found else {}

    def _recurring_runs(self, method: str, query: dict[str, str], body: Any) -> tuple[int, Any]:
        if method == "POST":
            cron = ((body.get("trigger") or {}).get("cron_schedule") or {}).get("cron", "")
            if len(cron.split()) != 6 and not cron.startswith("@"):
                return 400, _status(3, f"invalid cron expression {cron!r}: expected exactly 6 fields")
            if body.get("experiment_id") not in self.experiments:
                return 404, _status(5, f"experiment {body.get('experiment_id')!r} not found")
            run = {**body, "recurring_run_id": self._id("rr"), "status": f"{body['mode']}D"}
            self.recurring[run["recurring_run_id"]] = run
            self._changed("create", run["recurring_run_id"], run["mode"])
            return 200, run
        found = [
            r
            for r in self.recurring.values()
            if query.get("experiment_id") in (None, r["experiment_id"]) and _matches(r, query.get("filter"))
        ]
        return 200, {"recurringRuns": found, "total_size": len(found)} if found else {}

    def _recurring_run(self, method: str, run_id: str, verb: Optional[str]) -> tuple[int, Any]:
        if run_id not in self.recurring:
            return 404, _status(5, f"recurring run {run_id} not found")
        if method == "GET" and verb is None:
            return 200, self.recurring[run_id]
        if method == "DELETE" and verb is None:
            if run_id in self.refuse_delete:
                return 500, _status(13, "internal error: the scheduler did not answer")
            del self.recurring[run_id]
            self._changed("delete", run_id)
            return 200, {}
        if method == "POST" and verb:
            mode = "ENABLE" if verb == "enable" else "DISABLE"
            self.recurring[run_id].update(mode=mode, status=f"{mode}D")
            self._changed(verb, run_id)
            return 200, {}
        return 405, _status(12, f"{method} not allowed here")


def _status(code: int, message: str) -> dict[str, Any]:
    return {"code": code, "message": message, "details": []}


def _matches(item: dict[str, Any], text: Optional[str]) -> bool:
    """Whether ``item`` passes a filter of ``EQUALS`` predicates (the only operation the fake knows)."""
    if not text:
        return True
    for predicate in json.loads(text).get("predicates", []):
        # kfp's client writes the operation by name, or (get_experiment) by its enum number: EQUALS is 1.
        if predicate.get("operation") not in ("EQUALS", 1) or item.get(predicate["key"]) != predicate.get(
            "stringValue"
        ):
            return False
    return True


def _handler(api: FakeKfp) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null") if length else None
            status, answer = api.handle(self.command, parts.path, query, body)
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _serve

    return Handler


@contextlib.contextmanager
def serve(api: Optional[FakeKfp] = None) -> Iterator[tuple[str, FakeKfp]]:
    """Serves a fake KFP API on 127.0.0.1 (a free port); yields ``(host URL, the fake)``."""
    api = api or FakeKfp()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", api
    finally:
        server.shutdown()
        server.server_close()
