"""Serving checks of a model through TensorFlow Serving's REST API (docs/promotion.md).

Each check is a function that can run alone and returns a :class:`CheckResult` (it never raises
for a failed check; the result says why):

- :func:`check_health`: the (expected) version is AVAILABLE.
- :func:`check_metadata`: ``serving_default`` takes and returns what the task's serving schema says.
- :func:`check_response_schema`: a row and a columnar ``:predict`` answer have the task's schema.
- :func:`check_bad_requests`: bad requests get 400/404 answers with an error message.
- :func:`check_known_predictions`: known examples get their expected answers often enough.
- :func:`check_load`: the stage's load test, bounded in requests and seconds, meets its objectives
  (latency percentiles, rate, errors); its figures become the history's ``load_test`` record.

:func:`run_checks` runs them in that order (the others only once health passed) and raises
:class:`ServingChecksError` listing every failure. The task (``trainer.tasks``) is asked what a
response looks like and whether a prediction is right; no check assumes classes. Standard library
only (urllib), so the same checks run against the local model server and against TensorFlow
Serving on a cluster.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import math
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional, ParamSpec

from components.serving.config import LoadTestConfig
from components.serving.load import LoadTestRecord, run_load
from trainer import records
from trainer.tasks import Task

PREDICT_BATCH = 32
"""Known examples per ``:predict`` request of the prediction check."""


class CheckFailed(Exception):
    """Raised inside a check when what it checks is wrong; becomes a failed :class:`CheckResult`."""

    def __init__(self, message: str, figures: Optional[Mapping[str, float]] = None):
        super().__init__(message)
        self.figures = dict(figures or {})


@dataclasses.dataclass(frozen=True)
class CheckResult(records.Record):
    """The outcome of one check; in a stage's history, ``checks.<name>``: passed, detail[, figures].

    Forward-compatible, as the history that keeps it: keys of a newer version are kept in ``extra``.

    Attributes:
        name: the check (``health``, ``metadata``, ``predict_schema``, ``bad_requests``,
            ``prediction``, ``load``).
        passed: whether it passed.
        detail: what it found, or why it failed.
        figures: numbers it measured (the served version, the share of known examples right,
            the load test's rate and latency), as measured (counts stay ints); left out when none.
        extra: keys this code does not know, kept as they were.
    """

    _mode = records.FORWARD_COMPATIBLE
    _what = "check result"
    _omit_empty = ("figures",)

    name: str = records.field(data=False)
    passed: bool
    detail: str = ""
    figures: Mapping[str, int | float] = dataclasses.field(default_factory=dict)
    extra: Mapping[str, Any] = records.extra_field()

    @classmethod
    def from_dict(cls, name: str, data: Mapping[str, Any]) -> CheckResult:
        """Reads ``checks.<name>`` of a history entry (of any version): its name is the key it sits under.

        Raises:
            RecordError: a key is missing or a value has the wrong type.
        """
        return cls._build({**cls._values(data, f"{name}."), "name": name}, f"{name}.")


def checks_to_dict(checks: Sequence[CheckResult]) -> dict[str, dict[str, Any]]:
    """``{name: {"passed", "detail"[, "figures"]}}``, in run order: the history's ``checks``."""
    return {c.name: c.to_dict() for c in checks}


def checks_from_dict(data: Optional[Mapping[str, Any]]) -> tuple[CheckResult, ...]:
    """The inverse of :func:`checks_to_dict` (history entries of every version load).

    Raises:
        RecordError: ``data`` is not a mapping of checks, or a check is malformed.
    """
    if data is not None and not isinstance(data, Mapping):
        raise records.RecordError(f"expected a mapping of check name -> result, got {data!r}")
    return tuple(CheckResult.from_dict(name, value) for name, value in (data or {}).items())


def _b64(image: bytes) -> str:
    return base64.b64encode(image).decode("ascii")


def _unb64(text: Any) -> bytes:
    try:
        return base64.b64decode(text)
    except (TypeError, ValueError):
        raise records.RecordError(f"expected base64 text, got {str(text)[:80]!r}") from None


@dataclasses.dataclass(frozen=True)
class KnownExample(records.Record):
    """An input whose right answer is known: the prediction check sends it.

    Its JSON (in ``smoke_examples.json``) is ``{"b64": ..., "expected": ...}``, the answer as the
    task writes it (``Task.expected_to_json``, applied by the stage registry).

    Attributes:
        image: the encoded image, sent as ``{"b64": ...}``.
        expected: the task's expected answer (classification: the class index).
    """

    _what = "known example"

    image: bytes = records.field(key="b64", dump=_b64, load=_unb64)
    expected: Any


DEFAULT_LOAD = LoadTestConfig()
"""The load check's bounds when none are given (no latency objectives)."""


@dataclasses.dataclass(frozen=True)
class ChecksReport:
    """What :func:`run_checks` found.

    Attributes:
        checks: every check that ran, in order.
        version: the version that answered (health's), or the expected one if health failed.
        accuracy: the share of known examples answered right, when the prediction check ran.
        load_test: the load check's figures and objectives, when it ran.
    """

    checks: tuple[CheckResult, ...]
    version: Optional[int]
    accuracy: Optional[float]
    load_test: Optional[LoadTestRecord] = None

    @property
    def passed(self) -> bool:
        """Every check passed."""
        return all(c.passed for c in self.checks)

    def check(self, name: str) -> CheckResult:
        """The check called ``name``.

        Raises:
            KeyError: no such check ran.
        """
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(f"no check {name!r} ran; ran: {[c.name for c in self.checks]}")


class ServingChecksError(RuntimeError):
    """One or more checks failed; ``report`` holds every check and its detail."""

    def __init__(self, message: str, report: ChecksReport):
        super().__init__(message)
        self.report = report


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


def _model_url(base_url: str, model_name: str) -> str:
    return f"{base_url.rstrip('/')}/v1/models/{model_name}"


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
            status, body = http_json("GET", _model_url(base_url, model_name), timeout_s=10)
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


def _expect(condition: bool, message: str, figures: Optional[Mapping[str, float]] = None) -> None:
    if not condition:
        raise CheckFailed(message, figures)


_P = ParamSpec("_P")


def _check(name: str) -> Callable[[Callable[_P, tuple[str, dict[str, float]]]], Callable[_P, CheckResult]]:
    """Turns a check body into a check: the body returns (detail, figures) or raises, the check
    returns a :class:`CheckResult` either way (the public ``check_*`` functions are wrapped so).
    """

    def wrap(body: Callable[_P, tuple[str, dict[str, float]]]) -> Callable[_P, CheckResult]:
        @functools.wraps(body)
        def run(*args: _P.args, **kwargs: _P.kwargs) -> CheckResult:
            try:
                detail, figures = body(*args, **kwargs)
            except CheckFailed as err:
                return CheckResult(name, False, str(err), err.figures)
            except Exception as err:  # a malformed answer (KeyError, TaskError, ...) fails the check: report it
                return CheckResult(name, False, f"{type(err).__name__}: {err}")
            return CheckResult(name, True, detail, figures)

        return run

    return wrap


@_check("health")
def check_health(
    base_url: str, model_name: str, expected_version: Optional[int] = None, timeout_s: float = 60.0
) -> tuple[str, dict[str, float]]:
    """The expected version (any, if None) becomes AVAILABLE within ``timeout_s``.

    Returns:
        A :class:`CheckResult` whose figures hold the newest available ``version``.
    """
    body = wait_until_available(base_url, model_name, expected_version, timeout_s)
    version = max(_available_versions(body, expected_version))
    return f"version {version} AVAILABLE", {"version": version}


def _num_outputs(outputs: Mapping[str, Any], first_output: str) -> Optional[int]:
    # The last dimension of the task's first output: the class count for classification.
    dims = outputs[first_output].get("tensor_shape", {}).get("dim", [])
    size = int(dims[-1]["size"]) if dims else -1
    return size if size > 0 else None


@_check("metadata")
def check_metadata(base_url: str, model_name: str, task: Task) -> tuple[str, dict[str, float]]:
    """``serving_default`` takes the task's one input (name, dtype) and returns its outputs.

    Returns:
        A :class:`CheckResult`; its figures hold ``num_outputs``, the last dimension of the task's
        first output (classification: the number of classes), when the metadata gives it.
    """
    schema = task.serving
    status, body = http_json("GET", f"{_model_url(base_url, model_name)}/metadata")
    _expect(status == 200, f"GET metadata answered {status}: {body}")
    sigs = body["metadata"]["signature_def"]["signature_def"]
    _expect("serving_default" in sigs, f"no serving_default signature; has {sorted(sigs)}")
    inputs = sigs["serving_default"]["inputs"]
    _expect(
        list(inputs) == [schema.input_name] and inputs[schema.input_name]["dtype"] == schema.input_dtype,
        f"serving_default must take {schema.input_name} ({schema.input_dtype}), takes {inputs}",
    )
    outputs = sigs["serving_default"]["outputs"]
    _expect(set(schema.outputs) <= set(outputs), f"outputs must include {', '.join(schema.outputs)}: {sorted(outputs)}")
    n = _num_outputs(outputs, schema.outputs[0])
    size = f"; {schema.outputs[0]} has {n} values" if n is not None else ""
    return f"signatures {sorted(sigs)}{size}", ({"num_outputs": n} if n is not None else {})


@_check("predict_schema")
def check_response_schema(
    base_url: str,
    model_name: str,
    task: Task,
    image: bytes,
    version: Optional[int] = None,
    num_outputs: Optional[int] = None,
) -> tuple[str, dict[str, float]]:
    """A row (``instances``) and a columnar (``inputs``) request answer with the task's schema.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8501``.
        model_name: the served name.
        task: what a prediction must look like (``task.check_prediction``).
        image: one encoded input.
        version: ask this version explicitly; None asks the model.
        num_outputs: the output size the metadata announced (classification: class count).
    """
    model_url = _model_url(base_url, model_name)
    url = f"{model_url}/versions/{version}:predict" if version else f"{model_url}:predict"
    status, body = http_json("POST", url, {"instances": [_b64(image)]})
    _expect(status == 200, f"predict answered {status}: {body}")
    preds = body.get("predictions")
    _expect(isinstance(preds, list) and len(preds) == 1, f"expected predictions: [one object], got {body}")
    _expect(isinstance(preds[0], dict), f"a prediction must be an object of named outputs, got {str(preds[0])[:200]}")
    task.check_prediction(preds[0], num_outputs)
    status, body = http_json("POST", f"{model_url}:predict", {"inputs": [_b64(image)]})
    _expect(status == 200, f"columnar predict answered {status}: {body}")
    _expect(set(body.get("outputs", {})) == set(task.serving.outputs), f"columnar response {str(body)[:200]}")
    return "row and columnar responses have the expected schema", {}


@_check("bad_requests")
def check_bad_requests(base_url: str, model_name: str) -> tuple[str, dict[str, float]]:
    """Bad requests are answered 400 (404 where TensorFlow Serving does) with an ``error`` message.

    The cases: broken JSON, no instances, bad base64, not an image, an unknown signature, an
    unknown model.
    """
    model_url = _model_url(base_url, model_name)
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
        ("unknown model", f"{model_url}-does-not-exist", None, (404,)),
    ]
    wrong = []
    for label, url, body, allowed in cases:
        status, answer = http_json("POST" if body is not None else "GET", url, body)
        if status not in allowed or not isinstance(answer, dict) or "error" not in answer:
            wrong.append(f"{label}: {status} {str(answer)[:120]} (expected {allowed} with an error message)")
    _expect(not wrong, "; ".join(wrong))
    return f"{len(cases)} bad requests answered with errors", {}


@_check("prediction")
def check_known_predictions(
    base_url: str, model_name: str, task: Task, examples: Sequence[KnownExample], min_accuracy: float
) -> tuple[str, dict[str, float]]:
    """At least ``min_accuracy`` of the known examples get their expected answer (``task.matches``).

    Returns:
        A :class:`CheckResult` whose figures hold ``accuracy``, ``right`` and ``examples``.
    """
    _expect(bool(examples), "no known examples to send")
    model_url = _model_url(base_url, model_name)
    right = 0
    for start in range(0, len(examples), PREDICT_BATCH):
        chunk = examples[start : start + PREDICT_BATCH]
        status, body = http_json("POST", f"{model_url}:predict", {"instances": [_b64(e.image) for e in chunk]})
        _expect(status == 200, f"predict answered {status}: {str(body)[:300]}")
        preds = body["predictions"]
        _expect(len(preds) == len(chunk), f"{len(preds)} predictions for {len(chunk)} instances")
        right += sum(int(task.matches(p, e.expected)) for p, e in zip(preds, chunk, strict=True))
    accuracy = right / len(examples)
    figures = {"accuracy": accuracy, "right": right, "examples": len(examples)}
    _expect(
        accuracy >= min_accuracy,
        f"{right}/{len(examples)} known test images right ({accuracy:.2f}), need {min_accuracy:.2f}",
        figures,
    )
    return f"{right}/{len(examples)} right ({accuracy:.2f} >= {min_accuracy:.2f})", figures


@_check("load")
def check_load(
    base_url: str, model_name: str, image: bytes, settings: LoadTestConfig = DEFAULT_LOAD
) -> tuple[str, dict[str, float]]:
    """``settings.clients`` clients send one-image requests for at most ``settings.max_requests``
    requests or ``settings.max_seconds`` seconds; the run must meet the settings' objectives
    (latency percentiles, rate, at most ``max_errors`` failed requests).

    Returns:
        A :class:`CheckResult` whose figures hold the rate and latency (kept in the history).
    """
    result = run_load(
        base_url,
        model_name,
        {"instances": [_b64(image)]},
        clients=settings.clients,
        duration_s=settings.max_seconds,
        max_requests=settings.max_requests,
    )
    # NaN latencies (no request succeeded) are left out: the history is JSON.
    figures = {k: v for k, v in result.figures().items() if not math.isnan(v)}
    _expect(result.requests > 0, "no request was sent", figures)
    missed = settings.violations(figures)
    samples = f"; e.g. {'; '.join(result.error_samples)}" if result.error_samples else ""
    _expect(not missed, f"{result.summary()}: missed {', '.join(missed)}{samples}", figures)
    return result.summary(), figures


def run_checks(
    base_url: str,
    model_name: str,
    examples: Sequence[KnownExample],
    min_accuracy: float,
    *,
    task: Task,
    expected_version: Optional[int] = None,
    timeout_s: float = 60.0,
    load: Optional[LoadTestConfig] = DEFAULT_LOAD,
) -> ChecksReport:
    """Run health, then metadata, response schema, bad requests, known predictions and load.

    Args:
        base_url: e.g. ``http://127.0.0.1:8501`` (no trailing path).
        model_name: the served name.
        examples: known examples from the test split (the first is the schema and load input).
        min_accuracy: the share of ``examples`` that must get their expected answer.
        task: the model's task (``trainer.tasks.get_task``): response schema and right answers.
        expected_version: the version that must be AVAILABLE (and answer); None accepts any.
        timeout_s: how long health may take to become AVAILABLE.
        load: the load check's bounds; None skips it.

    Returns:
        The report, every check passed.

    Raises:
        ServingChecksError: any check failed; the message lists each failed check and why.
        ValueError: no examples were given.
    """
    if not examples:
        raise ValueError("no known examples: pass known examples (image bytes, expected answer) from the test split")
    base_url = base_url.rstrip("/")
    health = check_health(base_url, model_name, expected_version, timeout_s)
    checks = [health]
    version = int(health.figures["version"]) if health.passed else expected_version
    if health.passed:
        metadata = check_metadata(base_url, model_name, task)
        num_outputs = metadata.figures.get("num_outputs")
        checks += [
            metadata,
            check_response_schema(
                base_url, model_name, task, examples[0].image, version, int(num_outputs) if num_outputs else None
            ),
            check_bad_requests(base_url, model_name),
            check_known_predictions(base_url, model_name, task, examples, min_accuracy),
        ]
        if load is not None:
            checks.append(check_load(base_url, model_name, examples[0].image, load))
    prediction = next((c for c in checks if c.name == "prediction"), None)
    accuracy = prediction.figures.get("accuracy") if prediction else None
    load_check = next((c for c in checks if c.name == "load"), None)
    load_test = None
    if load_check is not None and load is not None and load_check.figures:
        load_test = LoadTestRecord.of(load_check.figures, load.objectives(), load_check.passed)
    report = ChecksReport(checks=tuple(checks), version=version, accuracy=accuracy, load_test=load_test)
    if not report.passed:
        failed = [f"{c.name}: {c.detail}" for c in checks if not c.passed]
        raise ServingChecksError(
            f"serving checks of {model_name} at {base_url} failed ({len(failed)} of {len(checks)} checks): "
            + " | ".join(failed),
            report,
        )
    return report
