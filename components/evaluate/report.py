"""The parts of the evaluation report every task shares (Markdown head, the blessing artifact's JSON).

Each task's own report is its renderers' (``components/evaluate/renderers/<task>.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from components.evaluate.gate import Decision


def fmt(value: Optional[float], digits: int = 4) -> str:
    """A metric for a table: fixed digits, ``n/a`` for None."""
    return "n/a" if value is None else f"{value:.{digits}f}"


def decision_lines(
    title: str, decision: Decision, model_uri: str, baseline_entry: Optional[Mapping[str, Any]]
) -> list[str]:
    """The report's head, the same for every task: title, model, decision with reasons, baseline."""
    lines = [f"# {title}", ""]
    if model_uri:
        lines += [f"Model: `{model_uri}`", ""]
    lines += [f"## Decision: {'BLESSED' if decision.blessed else 'NOT BLESSED'}", ""]
    lines += [f"- {reason}" for reason in decision.reasons]
    if baseline_entry is None:
        return [*lines, "", "Baseline: none (prod serves no model yet)."]
    version, uri = baseline_entry.get("version", "?"), baseline_entry.get("model_uri", "?")
    return [*lines, "", f"Baseline: prod version {version} (`{uri}`)."]


def blessing_record(
    decision: Decision, metrics: Mapping[str, float], model_uri: str, split: str, task: str
) -> dict[str, Any]:
    """The blessing artifact's JSON: the task, the decision, its reasons and checks, and the metrics.

    The task's name travels with the metrics: a reader (the run report, the run's console) asks
    that task for its headline instead of guessing it from the metrics' names.
    """
    return {
        "task": task,
        "blessed": decision.blessed,
        "decision": "BLESSED" if decision.blessed else "NOT_BLESSED",
        "reasons": decision.reasons,
        "checks": decision.checks,
        "baseline": decision.baseline,
        "metrics": dict(metrics),
        "model_uri": model_uri,
        "split": split,
    }
