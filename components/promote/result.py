"""What a promotion or a rollback returns and reports: its result record, its error, its Markdown."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Optional

from components import markdown
from components.serving.checks import CheckResult, checks_from_dict, checks_to_dict
from components.serving.load import LoadTestRecord
from components.serving.stages import StageEntry
from trainer import records


class PromotionError(RuntimeError):
    """A promotion failed (and was rolled back); the message says why and what the stage serves."""


@dataclasses.dataclass(frozen=True)
class PromotionResult(records.Record):
    """What a promotion or a rollback did (rendered by :func:`render_report`).

    A strict record; its JSON (the command line's ``--json``) is every field, ``checks`` as in the
    stage history.

    Attributes:
        action: ``promote`` or ``rollback``.
        stage: the stage acted on.
        version: the version the stage serves now (None: nothing).
        previous_version: the version it served before (the one a rollback left).
        no_op: the stage already served this model; nothing changed.
        model_uri: the model the served version came from.
        target: the serving target's name (``components.serving.targets``).
        checks: the serving checks of the version now served.
        accuracy: the share of known examples the prediction check got right.
        metrics: the evaluation metrics recorded with the version.
        source_stage, source_version: for a version moved from another stage.
        load_test: the served version's load test at this action, and its objectives.
        contract_change: the line naming how this promotion replaced what the stage served under
            the model name (``allow_contract_change``); None: it kept it.
        serving_format: the form the version is served in (``saved_model``, ``litert_int8``, ...);
            None where the stage's records do not say (read as ``saved_model``).
    """

    _what = "promotion result"
    _omit_empty = ("serving_format",)

    action: str
    stage: str
    version: Optional[int]
    previous_version: Optional[int]
    no_op: bool
    model_uri: str
    target: str
    checks: tuple[CheckResult, ...] = records.field(default=(), dump=checks_to_dict, load=checks_from_dict)
    accuracy: Optional[float] = None
    metrics: Mapping[str, float] = dataclasses.field(default_factory=dict)
    source_stage: Optional[str] = None
    source_version: Optional[int] = None
    load_test: Optional[LoadTestRecord] = None
    contract_change: Optional[str] = None
    serving_format: Optional[str] = None

    def check(self, name: str) -> CheckResult:
        """The check called ``name``.

        Raises:
            KeyError: no such check ran.
        """
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(f"no check {name!r} ran; ran: {[c.name for c in self.checks]}")


def result_of(entry: StageEntry, stage: str, no_op: bool) -> PromotionResult:
    """The result of a promotion or a rollback, from the stage entry it recorded."""
    return PromotionResult(
        action=entry.action,
        stage=stage,
        version=entry.version,
        previous_version=entry.previous_version,
        no_op=no_op,
        model_uri=entry.model_uri,
        target=entry.target or "",
        checks=entry.checks,
        accuracy=entry.accuracy,
        metrics=entry.metrics,
        source_stage=entry.source_stage,
        source_version=entry.source_version,
        load_test=entry.load_test,
        contract_change=entry.contract_change,
        serving_format=entry.serving_format,
    )


def render_report(result: PromotionResult) -> str:
    """Render a promotion or rollback result as Markdown for the Kubeflow UI."""
    lines = [f"# {result.action.capitalize()}: {result.stage} serves version {result.version}", ""]
    if result.no_op:
        lines += ["The stage already served this model: nothing was changed.", ""]
    lines += [
        f"- model: `{result.model_uri}`",
        f"- target: {result.target}",
        f"- previous version: {result.previous_version}",
    ]
    if result.source_stage is not None:
        lines.append(f"- from: {result.source_stage} version {result.source_version}")
    if result.serving_format is not None:
        lines.append(f"- served as: {result.serving_format}")
    if result.contract_change is not None:
        lines.append(f"- contract replaced (allow_contract_change): {result.contract_change}")
    if result.accuracy is not None:
        lines.append(f"- accuracy on known test images: {result.accuracy:.3f}")
    if result.metrics:
        lines.append("- recorded metrics: " + ", ".join(f"{k}={v:.4g}" for k, v in sorted(result.metrics.items())))
    if result.load_test is not None:
        lt = result.load_test
        pcts = ", ".join(
            f"{n} {v:.1f} ms" for n, v in (("p50", lt.p50_ms), ("p95", lt.p95_ms), ("p99", lt.p99_ms)) if v
        )
        goals = ", ".join(f"{k} {v:g}" for k, v in lt.objectives.items())
        lines.append(
            f"- load test: {lt.requests} requests from {lt.clients} clients, {lt.requests_per_s:.0f} req/s, "
            f"{pcts}, {lt.errors} errors; objectives {goals}: {'met' if lt.passed else 'MISSED'}"
        )
    checks = [[c.name, "yes" if c.passed else "NO", c.detail] for c in result.checks]
    lines += ["", *markdown.table(["check", "passed", "detail"], checks, "lll")]
    return "\n".join(lines) + "\n"
