"""The monitor step: is every serving stage keeping its objectives, and still answering right?

For each stage that serves a model (its ``current.json`` in the stage registry):

1. Prometheus is asked for each objective's value over the window, with the very expressions of
   the stage's alerts (``components.monitor.rules``): error ratio, p99 latency, targets up,
   SavedModel load failures.
2. The API regression and prediction checks (``components.serving.checks``: health, metadata,
   response schema, bad requests, known predictions; no load test) are sent to the stage where
   its serving target (``components.serving.targets``) says it answers, with the known images
   the registry kept at its promotion.

3. The drift and input-quality checks of the stage's sampled traffic over the same window
   (``components.monitor.drift``), written as the stage's ``drift.json``.

The result is a :class:`MonitorReport` (a Markdown table and flat metrics); a stage that misses
an objective or fails a check is broken. Standard library only (urllib) besides the checks.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import operator
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any, Optional

from components import markdown
from components.monitor import drift, rules
from components.monitor.drift import DriftReport
from components.serving.checks import CheckResult, ServingChecksError, run_checks
from components.serving.config import MonitorConfig
from components.serving.stages import StageRegistry
from components.serving.targets import ServingTarget, StageUnavailable, get_target
from trainer.tasks import get_task

log = logging.getLogger(__name__)

_OPS = {">": operator.gt, "<": operator.lt}


class PrometheusError(RuntimeError):
    """Prometheus could not be asked, or refused the query; the message says which and why."""


def query(prometheus_url: str, expr: str, timeout_s: float = 30.0) -> list[tuple[dict[str, str], float]]:
    """Evaluates ``expr`` now through Prometheus' HTTP API: ``[(labels, value), ...]``.

    Raises:
        PrometheusError: Prometheus is unreachable, or answered with an error (a bad query).
    """
    url = f"{prometheus_url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as err:
        raise PrometheusError(
            f"Prometheus at {prometheus_url} refused {expr!r}: HTTP {err.code} {err.read()[:300]!r}"
        ) from None
    except (OSError, json.JSONDecodeError) as err:
        raise PrometheusError(
            f"cannot query Prometheus at {prometheus_url}: {type(err).__name__}: {err}; "
            "check the prometheus_url parameter (its /api/v1/query must be reachable from the step)"
        ) from err
    if body.get("status") != "success":
        raise PrometheusError(f"Prometheus at {prometheus_url} answered {body.get('error')!r} for {expr!r}")
    data = body["data"]
    if data["resultType"] == "scalar":
        return [({}, float(data["result"][1]))]
    return [(dict(r["metric"]), float(r["value"][1])) for r in data["result"]]


@dataclasses.dataclass(frozen=True)
class ObjectiveResult:
    """One objective of one stage over the window.

    Attributes:
        name: the alert it belongs to (``ModelServerErrorRatioHigh``, ...).
        value: the worst value over the series (None: no series, e.g. no traffic).
        threshold: the bound; the objective is missed when ``value op threshold``.
        op: ``>`` or ``<``.
        met: whether it was kept.
        detail: what was seen.
    """

    name: str
    value: Optional[float]
    threshold: float
    op: str
    met: bool
    detail: str


@dataclasses.dataclass(frozen=True)
class StageStatus:
    """What the monitor found for one stage.

    Attributes:
        stage: the stage.
        version: the version its registry says it serves (None: nothing).
        objectives: each objective over the window.
        checks: the API regression and prediction checks.
        drift: the drift and input-quality checks of its sampled traffic over the window (an
            alarm is reported, and alerts, but does not break the stage: its answers still work).
    """

    stage: str
    version: Optional[int]
    objectives: tuple[ObjectiveResult, ...] = ()
    checks: tuple[CheckResult, ...] = ()
    drift: Optional[DriftReport] = None

    @property
    def passed(self) -> bool:
        """Every objective met and every check passed (a stage that serves nothing passes)."""
        return all(o.met for o in self.objectives) and all(c.passed for c in self.checks)


def _stage_rows(status: StageStatus) -> list[list[str]]:
    """A stage's table rows: each objective with its value and bound, then each check."""
    rows = [
        [o.name, "yes" if o.met else "NO", "no data" if o.value is None else f"{o.value:.4g}",
         f"{o.op} {o.threshold:g}: {o.detail}"]
        for o in status.objectives
    ]  # fmt: skip
    rows += [[f"check {c.name}", "yes" if c.passed else "NO", "", c.detail] for c in status.checks]
    for d in status.drift.checks if status.drift is not None else ():
        value = "" if d.figure is None else f"{d.figure:.4g}"
        bound = f"> {d.threshold:g} fires; {d.samples} samples, at least {d.minimum}"
        rows.append([f"drift {d.name}", {"alarm": "NO", "ok": "yes"}.get(d.state, d.state), value, bound])
    return rows


@dataclasses.dataclass(frozen=True)
class MonitorReport:
    """Every watched stage's status."""

    stages: tuple[StageStatus, ...]
    window: str

    @property
    def passed(self) -> bool:
        """No stage is broken."""
        return all(s.passed for s in self.stages)

    @property
    def broken(self) -> list[str]:
        """The broken stages."""
        return [s.stage for s in self.stages if not s.passed]

    def metrics(self) -> dict[str, float]:
        """Flat numbers for a Metrics artifact: ``<stage>_<objective>`` values, ``<stage>_passed``."""
        out: dict[str, float] = {}
        for s in self.stages:
            out[f"{s.stage}_passed"] = float(s.passed)
            for o in s.objectives:
                if o.value is not None and not math.isnan(o.value):
                    out[f"{s.stage}_{o.name}"] = o.value
            if s.drift is not None:
                out[f"{s.stage}_drift_alarm"] = float(s.drift.alarm)
                out[f"{s.stage}_traffic_samples"] = float(s.drift.samples)
                out.update({f"{s.stage}_drift_{c.name}": c.figure for c in s.drift.checks if c.figure is not None})
        return out

    def to_markdown(self) -> str:
        """A table per stage: each objective and check, kept or not."""
        lines = [f"# Monitor: {'all stages healthy' if self.passed else 'BROKEN: ' + ', '.join(self.broken)}", ""]
        lines.append(f"Objectives over the last {self.window}; checks on the stage's known images.")
        for s in self.stages:
            lines += ["", f"## {s.stage}: " + (f"version {s.version}" if s.version is not None else "serves nothing")]
            if s.version is None:
                continue
            lines += ["", *markdown.table(["what", "ok", "value", "objective / detail"], _stage_rows(s), "llll")]
            if s.drift is not None:
                lines += ["", f"Traffic: {s.drift.line()}"]
        return "\n".join(lines) + "\n"


def check_objectives(prometheus_url: str, stage: str, window: str, timeout_s: float = 30.0) -> list[ObjectiveResult]:
    """Asks Prometheus for each of the stage's alert values over ``window`` and compares them.

    Raises:
        PrometheusError: Prometheus cannot be asked.
    """
    objectives = dataclasses.replace(rules.OBJECTIVES[stage], window=window)
    results = []
    for alert in rules.alerts(stage, objectives):
        series = query(prometheus_url, alert.value, timeout_s)
        values = [v for _, v in series if not math.isnan(v)]
        if not values:
            results.append(ObjectiveResult(alert.name, None, alert.threshold, alert.op, True, "no data (no traffic)"))
            continue
        worst = max(values) if alert.op == ">" else min(values)
        missed = [labels for labels, v in series if _OPS[alert.op](v, alert.threshold)]
        detail = f"{len(series)} series" + (f"; missed by {missed}" if missed else "")
        results.append(ObjectiveResult(alert.name, worst, alert.threshold, alert.op, not missed, detail))
    return results


def _checks(config: MonitorConfig, target: ServingTarget, stage: str, version: int) -> tuple[CheckResult, ...]:
    """The stage's checks; a stage whose server the target finds missing or not ready fails ``health``."""
    examples = target.stages.load_examples(stage, config.model_name)
    try:
        with target.endpoints(stage, {config.model_name: version}) as endpoints:
            report = run_checks(
                endpoints.url(config.model_name),
                config.model_name,
                examples.examples,
                config.min_smoke_accuracy,
                task=get_task(examples.task),
                expected_version=version,
                timeout_s=config.timeout_s,
                load=None,  # the objectives come from the traffic Prometheus saw, not a new load
            )
    except StageUnavailable as err:
        return (CheckResult("health", False, str(err)),)
    except ServingChecksError as err:
        return err.report.checks
    return report.checks


def monitor(config: MonitorConfig, target: Optional[ServingTarget] = None) -> MonitorReport:
    """Watch every stage of ``config.stages`` once (see the module docstring).

    Args:
        config: what to watch and how.
        target: where the stages serve, built for the registry of ``config.stages_root``; None: the
            target ``config.target`` names, built for that registry with ``config.serving_options``.

    Raises:
        TypeError: ``config`` is not a MonitorConfig.
        components.serving.targets.TargetError: an unknown target, options it does not take, or a
            given target built for another stages root.
        PrometheusError: Prometheus cannot be asked (the run cannot judge the stages).
    """
    if not isinstance(config, MonitorConfig):
        raise TypeError(f"config must be a MonitorConfig, got {type(config).__name__}")
    if target is None:
        target = get_target(config.target, StageRegistry(config.stages_root), config.serving_options)
    target.check_registry(config.stages_root)
    statuses = []
    for stage in config.stages:
        current = target.stages.read_current(stage, config.model_name)
        if current is None or current.version is None:
            log.info("%s serves nothing: skipped", stage)
            statuses.append(StageStatus(stage, None))
            continue
        objectives = check_objectives(config.prometheus_url, stage, config.window, config.timeout_s)
        checks = _checks(config, target, stage, current.version)
        drifted = drift.watch(config.stages_root, [stage], config.model_name, config.window, drift.DriftConfig())
        statuses.append(StageStatus(stage, current.version, tuple(objectives), checks, next(iter(drifted), None)))
    return MonitorReport(tuple(statuses), config.window)


def status_line(report: MonitorReport) -> str:
    """``ok``, or ``broken: <stage>: <what>; ...`` (the component's output; the next task fails on it)."""
    if report.passed:
        return "ok"
    parts = []
    for s in report.stages:
        if not s.passed:
            what = [o.name for o in s.objectives if not o.met] + [f"check {c.name}" for c in s.checks if not c.passed]
            parts.append(f"{s.stage}: {', '.join(what)}")
    return "broken: " + "; ".join(parts)


def summary_of(report: MonitorReport) -> Mapping[str, Any]:
    """A JSON-able summary (the command line's ``--json``)."""
    return {
        "passed": report.passed,
        "window": report.window,
        "stages": [
            {
                "stage": s.stage,
                "version": s.version,
                "passed": s.passed,
                "objectives": [dataclasses.asdict(o) for o in s.objectives],
                "checks": {c.name: c.to_dict() for c in s.checks},
                "drift": s.drift.to_dict() if s.drift is not None else None,
            }
            for s in report.stages
        ],
    }
