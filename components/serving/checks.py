"""Smoke tests of a served model through TensorFlow Serving's REST API (DESIGN.md section 5).

Three groups of checks, the case study's: health (the version is AVAILABLE), API regression
(status codes, the response's shape and schema, 400/404 answers to bad requests), and prediction
(known test images give their labels often enough). Standard library only (urllib), so the same
checks run against the local model server and against TensorFlow Serving on a cluster.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, Optional

PREDICT_BATCH = 32


class SmokeTestError(RuntimeError):
    """One or more smoke checks failed; ``result`` holds every check and its detail."""

    def __init__(self, message: str, result: dict[str, Any]):
        super().__init__(message)
        self.result = result


def http_json(method: str, url: str, body: Optional[bytes | dict] = None, timeout_s: float = 30.0) -> tuple[int, Any]:
    """Send a request and return (status, parsed JSON or the raw text if it is not JSON).

    Args:
        method: GET or POST.
        url: the full URL.
        body: a dict (sent as JSON) or raw bytes (sent as they are, e.g. broken JSON).
        timeout_s: socket timeout.
    """
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    try:
        return status, json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return status, raw.decode("utf-8", "replace")


def _b64(data: bytes) -> dict[str, str]:
    return {"b64": base64.b64encode(data).decode("ascii")}


def wait_until_available(
    base_url: str, model_name: str, expected_version: Optional[int] = None, timeout_s: float = 60.0
) -> dict[str, Any]:
    """Poll the model status until a (the expected) version is AVAILABLE; return the status body.

    Raises:
        TimeoutError: not available in time; the message has the last answer.
    """
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            status, body = http_json("GET", f"{base_url}/v1/models/{model_name}", timeout_s=10)
            last = (status, body)
            if status == 200 and _available_versions(body, expected_version):
                return body
        except (urllib.error.URLError, OSError) as err:  # not listening yet: keep polling
            last = repr(err)
        if time.monotonic() > deadline:
            want = f"version {expected_version}" if expected_version is not None else "a version"
            raise TimeoutError(
                f"{model_name} at {base_url}: {want} not AVAILABLE after {timeout_s:.0f} s; last: {last}"
            )
        time.sleep(0.5)


def _available_versions(body: Any, expected_version: Optional[int]) -> list[int]:
    entries = body.get("model_version_status", []) if isinstance(body, dict) else []
    versions = [int(e["version"]) for e in entries if e.get("state") == "AVAILABLE"]
    if expected_version is not None:
        return [v for v in versions if v == expected_version]
    return versions


def run_smoke_tests(
    base_url: str,
    model_name: str,
    examples: list[tuple[bytes, int]],
    min_accuracy: float,
    expected_version: Optional[int] = None,
    timeout_s: float = 60.0,
) -> dict[str, Any]:
    """Run health, API-regression and prediction checks against a served model.

    Args:
        base_url: e.g. ``http://127.0.0.1:8501`` (no trailing path).
        model_name: the served name.
        examples: (encoded image bytes, expected class index) pairs from the test split.
        min_accuracy: the share of ``examples`` the model must classify correctly.
        expected_version: the version that must be AVAILABLE (and answer); None accepts any.
        timeout_s: how long health may take to become AVAILABLE.

    Returns:
        ``{"passed": True, "version": int, "accuracy": float, "checks": {name: {"passed", "detail"}}}``.

    Raises:
        SmokeTestError: any check failed; the message lists each failed check and why.
        ValueError: no examples were given.
    """
    if not examples:
        raise ValueError("no smoke examples: pass (image bytes, label) pairs from the test split")
    base_url = base_url.rstrip("/")
    model_url = f"{base_url}/v1/models/{model_name}"
    checks: dict[str, dict[str, Any]] = {}
    context: dict[str, Any] = {"version": expected_version, "num_classes": None, "accuracy": None}

    def check(name: str, fn: Callable[[], str]) -> bool:
        try:
            checks[name] = {"passed": True, "detail": fn()}
        except Exception as err:  # a check's failure is a result to report, not a crash
            checks[name] = {"passed": False, "detail": f"{type(err).__name__}: {err}"}
        return checks[name]["passed"]

    def health() -> str:
        body = wait_until_available(base_url, model_name, expected_version, timeout_s)
        versions = _available_versions(body, expected_version)
        context["version"] = max(versions)
        return f"version {context['version']} AVAILABLE"

    def metadata() -> str:
        status, body = http_json("GET", f"{model_url}/metadata")
        _expect(status == 200, f"GET metadata answered {status}: {body}")
        sigs = body["metadata"]["signature_def"]["signature_def"]
        _expect("serving_default" in sigs, f"no serving_default signature; has {sorted(sigs)}")
        inputs = sigs["serving_default"]["inputs"]
        _expect(
            list(inputs) == ["image_bytes"] and inputs["image_bytes"]["dtype"] == "DT_STRING",
            f"serving_default must take image_bytes (DT_STRING), takes {inputs}",
        )
        outputs = sigs["serving_default"]["outputs"]
        _expect(
            {"probabilities", "classes"} <= set(outputs), f"outputs must include probabilities and classes: {outputs}"
        )
        dims = outputs["probabilities"]["tensor_shape"]["dim"]
        context["num_classes"] = int(dims[-1]["size"])
        return f"signatures {sorted(sigs)}; {context['num_classes']} classes"

    def predict_schema() -> str:
        url = f"{model_url}/versions/{context['version']}:predict" if context["version"] else f"{model_url}:predict"
        status, body = http_json("POST", url, {"instances": [_b64(examples[0][0])]})
        _expect(status == 200, f"predict answered {status}: {body}")
        preds = body.get("predictions")
        _expect(isinstance(preds, list) and len(preds) == 1, f"expected predictions: [one object], got {body}")
        pred = preds[0]
        _expect(set(pred) == {"probabilities", "classes"}, f"prediction keys {sorted(pred)}")
        probs = pred["probabilities"]
        n = context["num_classes"] or len(probs)
        _expect(len(probs) == n, f"{len(probs)} probabilities, expected {n}")
        _expect(abs(sum(probs) - 1) < 1e-3 and min(probs) >= 0, f"probabilities do not sum to 1: {sum(probs)}")
        _expect(isinstance(pred["classes"], int) and 0 <= pred["classes"] < n, f"bad class {pred['classes']!r}")
        _expect(probs.index(max(probs)) == pred["classes"], "classes is not the argmax of probabilities")
        status, body = http_json("POST", f"{model_url}:predict", {"inputs": [_b64(examples[0][0])]})
        _expect(status == 200, f"columnar predict answered {status}: {body}")
        _expect(set(body.get("outputs", {})) == {"probabilities", "classes"}, f"columnar response {str(body)[:200]}")
        return "row and columnar responses have the expected schema"

    def bad_requests() -> str:
        cases = [
            ("broken JSON", f"{model_url}:predict", b"{not json", (400,)),
            ("no instances", f"{model_url}:predict", {"signature_name": "serving_default"}, (400,)),
            ("bad base64", f"{model_url}:predict", {"instances": [{"b64": "@@not base64@@"}]}, (400,)),
            ("not an image", f"{model_url}:predict", {"instances": [_b64(b"definitely not an image")]}, (400,)),
            (
                "unknown signature",
                f"{model_url}:predict",
                {"signature_name": "nope", "instances": [_b64(b"x")]},
                (400, 404),
            ),
            ("unknown model", f"{base_url}/v1/models/{model_name}-does-not-exist", None, (404,)),
        ]
        wrong = []
        for label, url, body, allowed in cases:
            status, answer = http_json("POST" if body is not None else "GET", url, body)
            if status not in allowed or not isinstance(answer, dict) or "error" not in answer:
                wrong.append(f"{label}: {status} {str(answer)[:120]} (expected {allowed} with an error message)")
        _expect(not wrong, "; ".join(wrong))
        return f"{len(cases)} bad requests answered with errors"

    def prediction() -> str:
        correct = 0
        for start in range(0, len(examples), PREDICT_BATCH):
            chunk = examples[start : start + PREDICT_BATCH]
            status, body = http_json("POST", f"{model_url}:predict", {"instances": [_b64(b) for b, _ in chunk]})
            _expect(status == 200, f"predict answered {status}: {str(body)[:300]}")
            got = [p["classes"] for p in body["predictions"]]
            correct += sum(int(g == label) for g, (_, label) in zip(got, chunk, strict=False))
        accuracy = correct / len(examples)
        context["accuracy"] = accuracy
        _expect(
            accuracy >= min_accuracy,
            f"{correct}/{len(examples)} known test images right ({accuracy:.2f}), need {min_accuracy:.2f}",
        )
        return f"{correct}/{len(examples)} right ({accuracy:.2f} >= {min_accuracy:.2f})"

    if check("health", health):
        check("metadata", metadata)
        check("predict_schema", predict_schema)
        check("bad_requests", bad_requests)
        check("prediction", prediction)
    result = {
        "passed": all(c["passed"] for c in checks.values()),
        "version": context["version"],
        "accuracy": context["accuracy"],
        "checks": checks,
    }
    if not result["passed"]:
        failed = [f"{name}: {c['detail']}" for name, c in checks.items() if not c["passed"]]
        raise SmokeTestError(
            f"smoke tests of {model_name} at {base_url} failed ({len(failed)} of {len(checks)} checks): "
            + " | ".join(failed),
            result,
        )
    return result


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)
