"""A search's results for people: every trial, the frontiers of quality against cost and time, the pick.

Markdown for the Kubeflow UI, an HTML page on the one page shell (``components.pages``) with the
frontier charts (``components.charts.frontier_chart``).
"""

from __future__ import annotations

from typing import Any

from components import charts, markdown, pages
from components.sweep.search.folder import TrialResult
from components.sweep.search.plan import usd
from components.sweep.search.run import SearchOutcome
from components.sweep.table import duration

HEADS = ["trial", "rung reached", "status", "why", "steps", "billed", "of which start-up", "cost", "quality"]


def _cells(o: SearchOutcome, r: TrialResult) -> list[str]:
    steps = "" if r.steps is None else f"{r.steps:,}" + (f" of {r.planned_steps:,}" if r.planned_steps else "")
    quality = "" if r.quality is None else f"{r.quality:.4f}"
    if r.status == "ok" and r.rung == len(o.plan.rungs) - 1:
        why = "promoted to the end" + (f" ({r.reason})" if r.reason else "")
    else:
        why = r.reason or "not promoted"
    return [o.plan.trial(r.key).name, str(r.rung), r.status, why, steps, duration(r.seconds),
            duration(r.startup_s), usd(r.cost), quality]  # fmt: skip


def _ordered(o: SearchOutcome) -> list[TrialResult]:
    """Trials by rung reached (furthest first), then quality (best first)."""
    sign = -1.0 if o.plan.objective.higher_is_better else 1.0
    return sorted(o.results, key=lambda r: (-r.rung, r.quality is None, sign * (r.quality or 0.0)))


def summary_lines(o: SearchOutcome) -> list[str]:
    """The pick, the savings, the notes: the page's and the report's first lines."""
    chosen = o.choice.get("key")
    lines = [f"Objective: {o.plan.objective.describe()}; metric {o.plan.objective.metric} on the test split."]
    if chosen:
        lines.append(f"Pick: {o.plan.trial(chosen).name} ({o.choice.get('reason', '')}).")
    else:
        lines.append(f"No pick: {o.choice.get('reason', '')}.")
    saved = o.saved
    if saved.get("line"):
        lines.append(saved["line"])
    return lines + [f"Note: {n}." for n in o.notes]


def render_markdown(o: SearchOutcome) -> str:
    """Every trial in one table, the frontiers named, the pick and the savings."""
    lines = ["# Search", "", *summary_lines(o), ""]
    lines += markdown.table(HEADS, [_cells(o, r) for r in _ordered(o)], "lrllrrrrr")
    for axis, keys in (("cost", o.frontier_cost), ("billed time", o.frontier_time)):
        names = ", ".join(o.plan.trial(k).name for k in keys) or "none"
        lines += ["", f"Frontier of quality against {axis}: {names}."]
    return "\n".join(lines) + "\n"


def render_html(o: SearchOutcome) -> str:
    """The page: the summary, the two frontier charts, every trial."""
    blocks: list[Any] = [pages.fragment("{% for l in lines %}<p>{{ l }}</p>{% endfor %}", lines=summary_lines(o))]
    scored = [r for r in o.results if r.quality is not None]
    names = {r.key: o.plan.trial(r.key).label for r in scored}
    chosen = names.get(o.choice.get("key") or "")
    metric = o.plan.objective.metric
    for axis, keys, label in (("cost", o.frontier_cost, "cost ($)"), ("seconds", o.frontier_time, "billed seconds")):
        if not scored:
            break
        points = {names[r.key]: (getattr(r, axis), r.quality) for r in scored}
        front = [names[k] for k in keys if k in names]
        chart = charts.frontier_chart(
            points, front, title=f"{metric} against {label}", x_label=label, y_label=metric, chosen=chosen
        )
        blocks.append(pages.Markup(chart))
    ordered = _ordered(o)
    classes = ["best" if r.key == o.choice.get("key") else "failed" if r.status == "failed" else "" for r in ordered]
    blocks.append(pages.table(HEADS, [_cells(o, r) for r in ordered], left=4, classes=classes))
    return pages.page("Search", blocks, pages.GRID_CSS)
