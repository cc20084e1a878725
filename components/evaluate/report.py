"""The parts of the evaluation report every task shares (Markdown head, the blessing artifact's JSON).

Each task's own report is its renderers' (``components/evaluate/renderers/<task>.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

from components import markdown
from components.evaluate.gate import Decision
from trainer.slices import SliceRow

# The slice table shows at most this many slices, worst first (the whole table is in slices.json).
SLICES_SHOWN = 25


def slice_metric_names(rows: Sequence[SliceRow]) -> list[str]:
    """The metrics the slices were scored by, in the order the task gives them."""
    names: list[str] = []
    for row in rows:
        names += [m for m in row.metrics if m not in names]
    return names


def slice_cells(rows: Sequence[SliceRow]) -> tuple[list[str], list[list[str]]]:
    """The slice table's heads and cells (the first :data:`SLICES_SHOWN` rows, in their order)."""
    names = slice_metric_names(rows)
    cells = [
        [r.key, f"{r.count:,}", *[fmt(r.metrics.get(m)) for m in names], "" if r.scored else "too few to score"]
        for r in rows[:SLICES_SHOWN]
    ]
    return ["slice", "examples", *names, "note"], cells


def slice_lines(rows: Sequence[SliceRow]) -> list[str]:
    """The report's slice section: the table, worst first; nothing when the task scored no slices."""
    if not rows:
        return []
    heads, cells = slice_cells(rows)
    more = len(rows) - SLICES_SHOWN
    tail = ["", f"{more} more slice(s) in slices.json."] if more > 0 else []
    return ["", "## Slices, worst first", "", *markdown.table(heads, cells, "l" + "r" * (len(heads) - 2) + "l"), *tail]


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
        "checks": [check.to_dict() for check in decision.checks],
        "baseline": decision.baseline,
        "metrics": dict(metrics),
        "model_uri": model_uri,
        "split": split,
    }
