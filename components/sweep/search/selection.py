"""A search's trials weighed: the selection between rungs, the frontier, the pick and the savings.

Between rungs, :func:`select_next` ranks the rung's rows by the objective and promotes the best;
after the last, :func:`pick` chooses, :func:`pareto_frontier` gives quality against cost or time,
and :func:`savings` says what stopping early saved. Plain Python, no TensorFlow.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Optional, Union

from components.sweep.search.plan import SearchPlan, usd
from components.sweep.search.space import Objective, SearchError
from components.sweep.table import duration
from trainer import records

Rows = Sequence[Union["TrialRow", Mapping[str, Any]]]


# ---------------------------------------------------------------------------------------------
# Rows, ranking and selection
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TrialRow(records.Record):
    """One trial's figures after a rung: what the selection, the frontier and the pick read.

    Attributes:
        key: the trial's key.
        status: ``ok`` (trained to the rung's stop point), ``stopped`` (its training ended before
            it: its own schedule finished, or early stopping; more budget would not change it, so
            it is not promoted, but the pick and the frontier count it) or ``failed`` (never
            promoted nor picked; ``reason`` says why).
        quality: the search's metric; None: not scored.
        cost: dollars the trial has been billed so far, all its rungs together.
        seconds: billed seconds so far, all its rungs together.
        rung: the rung the figures are from.
        metrics: other metrics by name (a frontier of another metric).
        reason: why it failed.
    """

    _error = SearchError
    _what = "search row"
    _omit_empty = ("quality", "cost", "seconds", "rung", "metrics", "reason")

    key: str
    status: Literal["ok", "stopped", "failed"]
    quality: Optional[float] = None
    cost: Optional[float] = None
    seconds: Optional[float] = None
    rung: Optional[int] = None
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    reason: Optional[str] = None


def _rows(rows: Rows) -> list[TrialRow]:
    """Rows read (dicts or records), each trial once."""
    parsed = [r if isinstance(r, TrialRow) else TrialRow.from_dict(r, f"rows[{i}].") for i, r in enumerate(rows)]
    seen = collections.Counter(r.key for r in parsed)
    twice = sorted(k for k, n in seen.items() if n > 1)
    if twice:
        raise SearchError(f"rows: trial(s) {twice} given more than once; give each trial's latest row once")
    return parsed


def _plan_rows(plan: SearchPlan, rows: Rows) -> list[TrialRow]:
    parsed = _rows(rows)
    for row in parsed:
        plan.trial(row.key)
    return parsed


def _x(row: TrialRow, axis: str) -> float:
    value = getattr(row, axis)
    return math.inf if value is None else value


def _front(rows: Sequence[TrialRow], axis: str, good: Any) -> list[TrialRow]:
    """The rows no other row dominates (as good or better on both, better on one)."""

    def dominates(a: TrialRow, b: TrialRow) -> bool:
        ax, bx, ag, bg = _x(a, axis), _x(b, axis), good(a), good(b)
        return ax <= bx and ag >= bg and (ax < bx or ag > bg)

    return [r for r in rows if not any(dominates(o, r) for o in rows)]


def _layers(rows: Sequence[TrialRow], axis: str, good: Any) -> dict[str, int]:
    """Each row's Pareto layer: 0 for the frontier, 1 for the frontier without it, ...; no figure: last."""
    left, layers, layer = [r for r in rows if getattr(r, axis) is not None], {}, 0
    while left:
        front = {r.key for r in _front(left, axis, good)}
        layers.update(dict.fromkeys(front, layer))
        left, layer = [r for r in left if r.key not in front], layer + 1
    return {r.key: layers.get(r.key, len(rows)) for r in rows}


def _resolved(objective: Objective) -> tuple[str, bool]:
    if objective.metric is None or objective.higher_is_better is None:
        raise SearchError("objective: its metric and direction are unset; use the plan's (plan_search resolves them)")
    return objective.metric, objective.higher_is_better


def _goodness(higher_is_better: bool, value: Any = None) -> Any:
    """A row's quality turned so that more is better (``value`` reads it; default: the row's ``quality``)."""
    read = value or (lambda row: row.quality)
    return (lambda row: read(row)) if higher_is_better else (lambda row: -read(row))


def _limit(objective: Objective) -> float:
    """best_within's budget on its axis (dollars or seconds)."""
    limit = objective.dollars if objective.axis == "cost" else objective.seconds
    return math.inf if limit is None else limit


def _reaches(objective: Objective, row: TrialRow) -> bool:
    """Whether a row reaches cheapest_reaching's quality (in the metric's direction)."""
    target = objective.quality if objective.quality is not None else -math.inf
    return row.quality >= target if objective.higher_is_better else row.quality <= target


def rank(objective: Objective, rows: Rows) -> list[TrialRow]:
    """The scored rows (not failed, with a quality), best first by the objective.

    - ``best_within``: the rows within the budget first, by quality, then the others by quality;
    - ``cheapest_reaching``: the rows reaching the quality first, cheapest (or fastest) first, then
      the others by quality;
    - ``frontier``: the non-dominated rows (quality against cost or time) first, by quality, then
      each next layer by quality.

    Ties go to the cheaper (or faster) row, then to the smaller key: the order is the same every time.

    Raises:
        SearchError: a malformed row, a trial given twice, an objective whose metric is unset.
    """
    _, higher = _resolved(objective)
    scored = [r for r in _rows(rows) if r.status != "failed" and r.quality is not None]
    axis, good = objective.axis, _goodness(higher)
    if objective.kind == "best_within":
        limit = _limit(objective)
        return sorted(scored, key=lambda r: (_x(r, axis) > limit, -good(r), _x(r, axis), r.key))
    if objective.kind == "cheapest_reaching":

        def order(r: TrialRow) -> tuple[Any, ...]:
            if _reaches(objective, r):
                return (0, _x(r, axis), -good(r), r.key)
            return (1, -good(r), _x(r, axis), r.key)

        return sorted(scored, key=order)
    layers = _layers(scored, axis, good)
    return sorted(scored, key=lambda r: (layers[r.key], -good(r), _x(r, axis), r.key))


def select_next(plan: SearchPlan, rung: int, rows: Rows, spent: Optional[float] = None) -> list[str]:
    """The keys of the trials promoted from ``rung`` to the next, best first.

    The rung's ``ok`` rows ranked by the objective (:func:`rank`), as many as the next rung
    trains; failed and stopped trials are never promoted (a rung short of ok trials promotes
    fewer). With a spend cap, the promotions stop at the first the cap cannot afford (its next
    rung's budget at its price), so the search ends within the cap.

    Args:
        plan: the search's plan.
        rung: the rung that ran (0 for the first); not the last.
        rows: each trial's row after that rung (:class:`TrialRow` or its dict).
        spent: dollars the whole search has been billed so far; None: the rows' costs added up
            (which misses trials stopped at earlier rungs: pass it from the second rung on).

    Raises:
        SearchError: the last rung or one the plan lacks, a row of no trial of the plan, a trial
            given twice, a malformed row.
    """
    last = len(plan.rungs) - 1
    if not 0 <= rung < last:
        raise SearchError(
            f"select_next: rung {rung}; the selection runs after rungs 0 to {last - 1} (after the last rung, pick "
            "chooses)"
        )
    parsed = _plan_rows(plan, rows)
    ranked = [r.key for r in rank(plan.objective, parsed) if r.status == "ok"]
    chosen = ranked[: plan.rungs[rung + 1].trials]
    if plan.spend_cap is None:
        return chosen
    left = plan.spend_cap - (spent if spent is not None else sum(r.cost or 0.0 for r in parsed))
    added = plan.stops[rung + 1] - plan.stops[rung]
    kept = []
    for key in chosen:
        cost = (plan.trial(key).price_per_hour or 0.0) * added / 3600.0
        if cost > left:
            break
        left -= cost
        kept.append(key)
    return kept


# ---------------------------------------------------------------------------------------------
# The frontier, the pick, the savings
# ---------------------------------------------------------------------------------------------


def pareto_frontier(
    rows: Rows, x: str = "cost", metric: Optional[str] = None, higher_is_better: bool = True
) -> list[TrialRow]:
    """The rows no other row beats on both quality and ``x``, cheapest (or fastest) first.

    Args:
        rows: the trials' rows (failed ones and rows without the figures are left out).
        x: ``cost`` (dollars) or ``seconds`` (billed time).
        metric: a metric of the rows' ``metrics``; None: their ``quality`` (the search's metric).
        higher_is_better: the metric's direction.

    Raises:
        SearchError: an ``x`` other than cost or seconds, a malformed row.
    """
    if x not in ("cost", "seconds"):
        raise SearchError(f"pareto_frontier: x must be cost or seconds, got {x!r}")

    def value(row: TrialRow) -> Optional[float]:
        return row.quality if metric is None else row.metrics.get(metric)

    good = _goodness(higher_is_better, value)
    scored = [r for r in _rows(rows) if r.status != "failed" and value(r) is not None and getattr(r, x) is not None]
    return sorted(_front(scored, x, good), key=lambda r: (_x(r, x), -good(r), r.key))


@dataclasses.dataclass(frozen=True)
class Choice(records.Record):
    """The trial an objective picks, or why none.

    Attributes:
        key: the trial's key; None: no trial qualifies.
        reason: why this one, or why none, in words.
    """

    _error = SearchError
    _what = "search choice"
    _omit_empty = ("key",)

    key: Optional[str]
    reason: str


def _figure(row: TrialRow, axis: str) -> str:
    value = getattr(row, axis)
    if value is None:
        return "n/a"
    return usd(value) if axis == "cost" else duration(value)


def pick(objective: Objective, rows: Rows) -> Choice:
    """The trial the objective chooses among the rows (each trial's latest), or None with the reason.

    ``best_within``: the best quality within the budget; ``cheapest_reaching``: the cheapest (or
    fastest) trial reaching the quality; ``frontier``: the best quality (the frontier's far end).

    Raises:
        SearchError: a malformed row, a trial given twice, an objective whose metric is unset.
    """
    metric, higher = _resolved(objective)
    ranked, axis = rank(objective, rows), objective.axis
    if not ranked:
        return Choice(None, f"no trial finished with a {metric} to rank")
    best, good = ranked[0], _goodness(higher)
    figures = f"{metric} {best.quality:.4g} for {_figure(best, axis)}"
    if objective.kind == "best_within" and _x(best, axis) > _limit(objective):
        least = min(ranked, key=lambda r: (_x(r, axis), r.key))
        budget = f"${objective.dollars:g}" if axis == "cost" else objective.time
        return Choice(None, f"no trial within {budget}: the least was {least.key} at {_figure(least, axis)}")
    if objective.kind == "cheapest_reaching" and not _reaches(objective, best):
        top = min(ranked, key=lambda r: (-good(r), r.key))
        return Choice(
            None, f"no trial reached {metric} {objective.quality:g}; the best was {top.key} at {top.quality:.4g}"
        )
    if objective.kind == "frontier":
        return Choice(best.key, f"best {metric} on the {metric}/{axis} frontier: {best.key}, {figures}")
    return Choice(best.key, f"{objective.describe()}: {best.key}, {figures}")


@dataclasses.dataclass(frozen=True)
class Savings(records.Record):
    """What stopping trials early saved: billed time and dollars spent against the same trials trained to the end.

    Attributes:
        trials: the trials counted (those with a row).
        spent_s: billed seconds the search spent on them.
        full_s: billed seconds they would have taken trained to ``max_budget`` (a trial that failed
            or ended on its own counts as it went).
        spent_cost: dollars spent; None: a trial without a cost or a price.
        full_cost: dollars trained to the end; None likewise.
    """

    _error = SearchError
    _what = "search savings"
    _omit_empty = ("spent_cost", "full_cost")

    trials: int
    spent_s: float
    full_s: float
    spent_cost: Optional[float] = None
    full_cost: Optional[float] = None

    @property
    def saved_s(self) -> float:
        """Billed seconds saved."""
        return self.full_s - self.spent_s

    @property
    def saved_cost(self) -> Optional[float]:
        """Dollars saved; None: not priced."""
        return None if self.spent_cost is None or self.full_cost is None else self.full_cost - self.spent_cost

    @property
    def share(self) -> Optional[float]:
        """The share of the full billed time spent (0.4: 40%); None when nothing was."""
        return self.spent_s / self.full_s if self.full_s else None

    def line(self) -> str:
        """In one line: ``spent 1h 02min ($12.30) of 3h 10min ($40.00): 33% of the billed time ...``."""
        spent = duration(self.spent_s) + (f" ({usd(self.spent_cost)})" if self.spent_cost is not None else "")
        full = duration(self.full_s) + (f" ({usd(self.full_cost)})" if self.full_cost is not None else "")
        share = f": {self.share:.0%} of the billed time" if self.share is not None else ""
        return f"spent {spent} of {full}{share} the same {self.trials} trials would have taken trained to the end"


def _full(plan: SearchPlan, row: TrialRow, where: str) -> float:
    """The billed seconds of a row's trial trained to the end: what it spent and the budget it skipped."""
    if row.rung is None or not 0 <= row.rung < len(plan.rungs):
        raise SearchError(f"{where}.rung: {row.rung!r}; savings need the rung each row's figures are from")
    seconds = row.seconds or 0.0
    if row.status != "ok" or row.rung == len(plan.rungs) - 1:
        return seconds  # it went as far as it would have: failed, ended on its own, or trained to the end
    stop, top = plan.stops[row.rung], plan.stops[-1]
    # A time budget skips the seconds left to max_budget; a step budget, the steps at the trial's own pace.
    return seconds + (top - stop) if plan.unit == "seconds" else seconds * top / stop


def savings(rows: Rows, plan: SearchPlan) -> Savings:
    """Billed time and dollars the search spent on its trials, against the same trials trained to the end.

    Args:
        rows: each trial's latest row, with its ``rung``, ``seconds`` and ``cost`` so far.
        plan: the search's plan (its stop points and the trials' prices).

    Raises:
        SearchError: a row of no trial of the plan, without its rung, or given twice.
    """
    spent_s = full_s = 0.0
    spent_cost: Optional[float] = 0.0
    full_cost: Optional[float] = 0.0
    parsed = _plan_rows(plan, rows)
    for i, row in enumerate(parsed):
        full = _full(plan, row, f"rows[{i}]")
        seconds, price = row.seconds or 0.0, plan.trial(row.key).price_per_hour
        cost = row.cost if row.cost is not None else (None if price is None else seconds * price / 3600.0)
        spent_s, full_s = spent_s + seconds, full_s + full
        if cost is None or price is None or spent_cost is None or full_cost is None:
            spent_cost = full_cost = None
            continue
        spent_cost, full_cost = spent_cost + cost, full_cost + cost + (full - seconds) * price / 3600.0
    return Savings(len(parsed), round(spent_s, 3), round(full_s, 3), _rounded(spent_cost), _rounded(full_cost))


def _rounded(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value, 6)
