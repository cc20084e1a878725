"""A cost-aware search: successive halving over a search file's trials, planned and priced before it runs.

:func:`plan_search` draws the trials (each a grid cell with its own key, so the grid's cell task
trains it and the grid's tables price it), plans the rungs of synchronous successive halving (the
form of ASHA and Hyperband): rung ``r`` keeps ``ceil(n / eta^r)`` trials and trains each to a budget
of ``min_budget * eta^r``, the last rung's being ``max_budget``. A trial's schedule is laid out once,
for ``max_budget``; a rung stops it at a prefix (its budget, in seconds or in steps), and a promoted
trial continues from its own checkpoints, so a rung's budget is the trial's total so far. The plan
prices its worst case (every promoted trial trained to its rung's budget, the priciest promoted)
and the whole grid (every trial to ``max_budget``) from the price table, and every bad input is an
error here, before any accelerator is asked for.

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

from components.sweep.grid import GridCell, GridError, _options_back, plan_grid
from components.sweep.search_space import (
    OPTION_PREFIX,
    SCHEDULE_DIMENSIONS,
    Objective,
    SearchError,
    SearchSpec,
    dimensions,
    parse_budget,
    sample,
)
from components.sweep.table import duration
from trainer import records
from trainer.budget import MIN_BUDGET_S
from trainer.pricing import PriceTableError, load_price_table, price_in, price_key
from trainer.tasks import TaskError, get_task
from trainer.tasks.base import Task

__all__ = [
    "Choice",
    "Objective",
    "Rung",
    "SearchError",
    "SearchPlan",
    "SearchSpec",
    "Savings",
    "Trial",
    "TrialRow",
    "describe_plan",
    "pareto_frontier",
    "pick",
    "plan_search",
    "rank",
    "rung_sizes",
    "rung_stops",
    "savings",
    "select_next",
]

Rows = Sequence[Union["TrialRow", Mapping[str, Any]]]


@dataclasses.dataclass(frozen=True)
class Trial(records.Record):
    """One trial of a search: its settings, the grid cell that trains it, and its price.

    Attributes:
        key: the cell's key: a hash of what it trains on and the search's budget (stable: the same
            search file gives the same keys; its checkpoints and rows are found under it).
        index: its place in the draw.
        settings: the values the space gave it (an accelerator by its name).
        cell: what it trains: the grid cell (its fixed settings and the pipeline's defaults folded in).
        price_key: the price table's key of its accelerator.
        price_per_hour: $/hour with the host's share; None: the price table has none.
    """

    _error = SearchError
    _what = "search trial"
    _omit_empty = ("price_per_hour",)

    key: str
    index: int
    settings: dict[str, Any] = records.field(load=_options_back)
    cell: GridCell
    price_key: str
    price_per_hour: Optional[float] = None

    @property
    def name(self) -> str:
        """Its name in tables (``t03 tpu-v3-8 epochs=7 image_size=384``)."""
        return self.cell.name

    @property
    def label(self) -> str:
        """Its short name on charts (``t03``): the table beside it gives the settings."""
        return f"t{self.index:02d}"


@dataclasses.dataclass(frozen=True)
class Rung(records.Record):
    """One rung of successive halving.

    Attributes:
        index: 0 for the first.
        trials: how many trials train in it.
        stop_s: where it stops each trial, in billed seconds of the trial so far (time budgets).
        stop_steps: where it stops each trial, in optimizer steps (step budgets).
        worst_case_cost: the most its training adds, in dollars (its trials on the priciest
            accelerators); None: not priced.
        worst_case_s: the accelerator seconds it adds at most; None with step budgets.
    """

    _error = SearchError
    _what = "search rung"
    _omit_empty = ("stop_s", "stop_steps", "worst_case_cost", "worst_case_s")

    index: int
    trials: int
    stop_s: Optional[float] = None
    stop_steps: Optional[int] = None
    worst_case_cost: Optional[float] = None
    worst_case_s: Optional[float] = None

    @property
    def stop(self) -> Union[int, float]:
        """The stop point: seconds or steps."""
        return self.stop_s if self.stop_s is not None else (self.stop_steps or 0)


@dataclasses.dataclass(frozen=True)
class SearchPlan(records.Record):
    """A planned search: its trials, its rungs and what they cost at most.

    Attributes:
        spec: the search file.
        task: the task's name.
        objective: the objective with its metric and direction resolved from the task.
        unit: the budgets' unit, ``seconds`` or ``steps``.
        trials: the trials, in draw order.
        rungs: the rungs, first to last.
        spend_cap: the whole search's cap in dollars; None: none.
        worst_case_cost: every promoted trial trained to its rung's budget, the priciest promoted,
            in dollars; None: not priced (step budgets, or an accelerator without a price).
        worst_case_s: the accelerator seconds of that worst case; None with step budgets.
        grid_cost: every trial trained to ``max_budget``, in dollars; None: not priced.
        grid_s: the accelerator seconds of that; None with step budgets.
        unpriced: accelerator -> why the price table gives it no price.
    """

    _error = SearchError
    _what = "search plan"
    _omit_empty = ("spend_cap", "worst_case_cost", "worst_case_s", "grid_cost", "grid_s", "unpriced")

    spec: SearchSpec
    task: str
    objective: Objective
    unit: Literal["seconds", "steps"]
    trials: tuple[Trial, ...]
    rungs: tuple[Rung, ...]
    spend_cap: Optional[float] = None
    worst_case_cost: Optional[float] = None
    worst_case_s: Optional[float] = None
    grid_cost: Optional[float] = None
    grid_s: Optional[float] = None
    unpriced: dict[str, str] = dataclasses.field(default_factory=dict)

    def trial(self, key: str) -> Trial:
        """The trial with this key.

        Raises:
            SearchError: no trial of this search has it.
        """
        for trial in self.trials:
            if trial.key == key:
                return trial
        raise SearchError(f"no trial of this search has the key {key!r}; rows must come from the plan's trials")

    @property
    def stops(self) -> tuple[Union[int, float], ...]:
        """Each rung's stop point, first to last (the last is ``max_budget``)."""
        return tuple(r.stop for r in self.rungs)

    @property
    def own_schedule(self) -> bool:
        """Whether trials keep their own schedule (epochs is searched or fixed) under a time cap."""
        return bool(_own_schedule(self.spec))

    @property
    def time_budget(self) -> Optional[str]:
        """Each trial's ``TrainConfig.time_budget``: ``600s`` filled, ``<=600s`` a cap over its own
        schedule; None with step budgets.
        """
        if self.unit != "seconds":
            return None
        return f"{'<=' if self.own_schedule else ''}{self.stops[-1]:g}s"


# ---------------------------------------------------------------------------------------------
# Rungs
# ---------------------------------------------------------------------------------------------


def _own_schedule(spec: SearchSpec) -> list[str]:
    """The schedule settings the file gives (searched or fixed): with them a trial keeps its own schedule."""
    return sorted(n for n in SCHEDULE_DIMENSIONS if n in spec.space or n in spec.fixed)


def rung_sizes(trials: int, rungs: int, eta: int) -> tuple[int, ...]:
    """How many trials each rung trains: ``ceil(trials / eta^r)``, every rung smaller than the last.

    Raises:
        SearchError: a rung that would not shrink (more rungs than the trials allow).
    """
    sizes = tuple(-(-trials // eta**r) for r in range(rungs))
    if any(later >= earlier for earlier, later in zip(sizes, sizes[1:], strict=False)):
        most = sizes.index(1) + 1
        raise SearchError(
            f"search.rungs: {rungs} rungs of {trials} trials with eta {eta} would not shrink at every rung "
            f"({', '.join(map(str, sizes))} trials); give rungs <= {most}, or at least {eta ** (rungs - 2) + 1} trials"
        )
    return sizes


def _amount(value: Union[int, float], unit: str) -> str:
    return f"{value} steps" if unit == "steps" else duration(value)


def _writable(value: Union[int, float], unit: str) -> str:
    """A budget as a search file takes it (``66.67s``, ``300 steps``): what an error suggests."""
    return f"{int(value)} steps" if unit == "steps" else f"{value:.4g}s"


def rung_stops(
    unit: str, min_budget: Optional[Union[int, float]], max_budget: Union[int, float], rungs: int, eta: int
) -> tuple[Union[int, float], ...]:
    """Each rung's budget per trial: ``min_budget * eta^r``, the last one ``max_budget``.

    Args:
        unit: ``seconds`` or ``steps``.
        min_budget: the first rung's; None: ``max_budget / eta^(rungs-1)`` (whole steps, rounded down).
        max_budget: the last rung's.
        rungs: how many rungs.
        eta: the factor between rungs.

    Raises:
        SearchError: budgets that disagree with rungs and eta (the message gives the values that
            agree), a first rung of no step, or one too short for a train step to start.
    """
    factor = eta ** (rungs - 1)
    if min_budget is None:
        stops = [max_budget / eta**k if unit == "seconds" else max_budget // eta**k for k in range(rungs - 1, -1, -1)]
    else:
        expected = min_budget * factor
        if (abs(expected - max_budget) > 0.01 * max_budget) if unit == "seconds" else expected != max_budget:
            raise SearchError(
                f"search.min_budget {_writable(min_budget, unit)} x eta^(rungs-1) ({eta}^{rungs - 1}) is "
                f"{_writable(expected, unit)}, but max_budget is {_writable(max_budget, unit)}: set min_budget to "
                f"{_writable(max_budget / factor, unit)} or max_budget to {_writable(expected, unit)}, change rungs "
                "or eta, or leave min_budget out"
            )
        stops = [min_budget * eta**r for r in range(rungs - 1)] + [max_budget]
    if unit == "steps" and stops[0] < 1:
        raise SearchError(
            f"search.max_budget {max_budget} steps over {rungs} rungs with eta {eta} leaves the first rung no step; "
            f"give max_budget >= {factor} steps, or fewer rungs"
        )
    if unit == "seconds" and stops[0] < MIN_BUDGET_S - 1e-9:
        raise SearchError(
            f"search: the first rung's budget, {stops[0]:.1f}s, is under {MIN_BUDGET_S:.0f}s, the least a train step "
            f"needs to start; give max_budget >= {MIN_BUDGET_S * factor:.0f}s, or fewer rungs, or a smaller eta"
        )
    return tuple(stops)


def _budgets(spec: SearchSpec) -> tuple[str, tuple[Union[int, float], ...]]:
    """The budgets' unit and each rung's stop point."""
    unit, top = parse_budget(spec.max_budget, "search.max_budget")
    first = parse_budget(spec.min_budget, "search.min_budget")[1] if spec.min_budget is not None else None
    schedule = _own_schedule(spec)
    if unit == "steps" and schedule:
        raise SearchError(
            f"search: budgets in steps set each trial's length, so {', '.join(schedule)} cannot be given too; give "
            "the budgets as durations (10m) to search over epochs"
        )
    return unit, rung_stops(unit, first, top, spec.rungs, spec.eta)


# ---------------------------------------------------------------------------------------------
# Trials
# ---------------------------------------------------------------------------------------------


def _task(spec: SearchSpec, task_name: Optional[str]) -> Task:
    if task_name and spec.task and task_name != spec.task:
        raise SearchError(
            f"the search file is written for task {spec.task!r}, and this run's task is {task_name!r}: use a search "
            f"file for {task_name!r}, or drop task from it"
        )
    try:
        return get_task(task_name or spec.task)
    except TaskError as err:
        raise SearchError(f"search.task: {err}") from None


def _objective(spec: SearchSpec, task: Task) -> Objective:
    """The objective with the metric (the search's, else the task's first quality metric) and its direction."""
    metric = spec.metric or spec.objective.metric or next(iter(task.quality_metrics), None)
    names = [m.name for m in task.metrics]
    if metric not in names:
        raise SearchError(
            f"search.metric: task {task.name!r} reports no metric {metric!r}; its metrics: {', '.join(names)} "
            f"(quality metrics: {', '.join(task.quality_metrics) or 'none'})"
        )
    higher = task.directions()[metric]
    if spec.objective.higher_is_better not in (None, higher):
        raise SearchError(
            f"search.objective.higher_is_better: {metric} is better {'higher' if higher else 'lower'} (the task says "
            "so); drop higher_is_better"
        )
    return dataclasses.replace(spec.objective, metric=metric, higher_is_better=higher)


def _value_text(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _cell(spec: SearchSpec, point: Mapping[str, Any], index: int, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The grid cell of one point: the pipeline's defaults, the file's fixed settings, then the point."""
    cell = {k: v for k, v in spec.fixed.items() if k != "model_options"}
    options = {**(defaults.get("model_options") or {}), **(spec.fixed.get("model_options") or {})}
    for name, value in point.items():
        if name == "accelerator":
            cell.update(value)
        elif name.startswith(OPTION_PREFIX):
            options[name[len(OPTION_PREFIX) :]] = value
        else:
            cell[name] = value
    accelerator = cell.get("accelerator") or defaults.get("accelerator")
    if not accelerator:
        raise SearchError("search: no accelerator; give space.accelerator (a list of entries) or fixed.accelerator")
    shown = [f"{n.removeprefix(OPTION_PREFIX)}={_value_text(v)}" for n, v in point.items() if n != "accelerator"]
    return {**cell, "model_options": options, "name": " ".join([f"t{index:02d}", str(accelerator), *shown])}


def _check_trial(task: Task, cell: GridCell) -> None:
    """A trial's settings the task refuses are a planning error, not a failed trial later."""
    if cell.image_size is not None and not task.accepts_image_size():
        raise SearchError(
            f"search trial {cell.name}: image_size applies to tasks that resize their input; a {task.name} model "
            "trains at the dataset's image size"
        )
    try:
        task.parse_options(cell.train_fields()["model_options"])
    except ValueError as err:  # TaskError, or the options' own checks
        raise SearchError(f"search trial {cell.name}: {err}") from None


def _price(cell: GridCell, table: Mapping[str, Any]) -> tuple[str, Optional[float], str]:
    """(price key, $/hour or None, why none) of a trial's accelerator.

    A trial in one pod is priced as the train step prices itself: its resource request's key
    (``trainer.pricing.price_key``; no accelerator is ``cpu-<this machine's CPUs>``). A cluster of
    worker pods is priced under its accelerator's name (``v100-x5``), as the sweep's tables price it.
    """
    cluster = cell.workers > 1 and cell.accelerator in table
    key = cell.accelerator if cluster else price_key(cell.accelerator_type, int(cell.accelerator_count or 0))
    try:
        per_hour = price_in(table, key)
    except PriceTableError as err:  # a host the table lacks
        return key, None, str(err)
    if per_hour is None:
        problem = (
            f"the price table has no {key!r} ({cell.accelerator}: {cell.accelerator_type or 'no accelerator'} x "
            f"{cell.accelerator_count}); add it to a price table of your own (the search's price_table) or search "
            f"other accelerators; it knows {', '.join(sorted(table))}"
        )
        return key, None, problem
    return key, per_hour, ""


def _trials(
    spec: SearchSpec,
    task: Task,
    points: Sequence[Mapping[str, Any]],
    defaults: Mapping[str, Any],
    context: Mapping[str, Any],
    price_table: Optional[str],
) -> tuple[tuple[Trial, ...], dict[str, str]]:
    """The trials of the points, each a checked grid cell with its key and price; and the unpriced accelerators."""
    try:
        cells = plan_grid([_cell(spec, p, i, defaults) for i, p in enumerate(points)], defaults, context)
    except GridError as err:
        raise SearchError(f"search: a trial's settings are not a training the sweep can run: {err}") from None
    try:
        table = load_price_table(price_table)
    except PriceTableError as err:
        raise SearchError(f"search price_table: {err}") from None
    trials, unpriced = [], {}
    for index, (point, cell) in enumerate(zip(points, cells, strict=True)):
        _check_trial(task, cell)
        key, price, problem = _price(cell, table)
        if price is None:
            unpriced[cell.accelerator] = problem
        settings = {n: v["accelerator"] if n == "accelerator" else v for n, v in point.items()}
        trials.append(Trial(cell.key, index, settings, cell, key, price))
    return tuple(trials), unpriced


# ---------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------


def _rungs(trials: Sequence[Trial], sizes: Sequence[int], stops: Sequence[Any], unit: str) -> tuple[Rung, ...]:
    """The rungs with what each adds at most: its trials on the priciest accelerators, for the budget it adds."""
    prices = sorted((t.price_per_hour for t in trials if t.price_per_hour is not None), reverse=True)
    priced = unit == "seconds" and len(prices) == len(trials)
    rungs, before = [], 0
    for index, (size, stop) in enumerate(zip(sizes, stops, strict=True)):
        added, before = stop - before, stop
        if unit == "steps":
            rungs.append(Rung(index, size, stop_steps=int(stop)))
            continue
        cost = round(sum(prices[:size]) * added / 3600.0, 6) if priced else None
        rungs.append(Rung(index, size, stop_s=float(stop), worst_case_cost=cost, worst_case_s=size * added))
    return tuple(rungs)


def _totals(trials: Sequence[Trial], rungs: Sequence[Rung], top: float, unit: str) -> dict[str, Optional[float]]:
    """The worst case (the rungs' sum) and the whole grid (every trial to ``max_budget``), in dollars and seconds."""
    if unit == "steps":
        return {}
    costs = [r.worst_case_cost for r in rungs]
    priced = all(c is not None for c in costs)
    return {
        "worst_case_cost": round(sum(c or 0.0 for c in costs), 6) if priced else None,
        "worst_case_s": sum(r.worst_case_s or 0.0 for r in rungs),
        "grid_cost": round(sum(t.price_per_hour or 0.0 for t in trials) * top / 3600.0, 6) if priced else None,
        "grid_s": len(trials) * top,
    }


def _check_prices(spec: SearchSpec, objective: Objective, unit: str, unpriced: Mapping[str, str]) -> None:
    needs = [f"the objective ({objective.describe()})"] if objective.is_priced else []
    needs += ["spend_cap"] if spec.spend_cap is not None else []
    if unpriced and needs:
        problem = unpriced[min(unpriced)]
        raise SearchError(f"search: {' and '.join(needs)} weighs dollars, and {problem}")
    if unit == "steps" and spec.spend_cap is not None:
        raise SearchError(
            "search.spend_cap: budgets in steps cannot be priced before the trials run (their step time is not known "
            "yet); give min_budget/max_budget as durations (30s, 10m), or drop spend_cap"
        )


def plan_search(
    spec: SearchSpec,
    task_name: Optional[str] = None,
    price_table: Optional[str] = None,
    *,
    defaults: Optional[Mapping[str, Any]] = None,
    context: Optional[Mapping[str, Any]] = None,
) -> SearchPlan:
    """Plans a search: its trials drawn and checked against the task, its rungs, their worst-case cost.

    Args:
        spec: the search file.
        task_name: the run's task; None: the file's (``task``), else the default task.
        price_table: a YAML price table over the defaults; None for the defaults.
        defaults: grid cell settings for trials that leave them out (the pipeline's model,
            model_options, epochs, ...; :func:`components.sweep.grid.grid_settings`).
        context: what else the trials depend on (the dataset's source and limit), part of their keys.

    Returns:
        The plan; the same for the same file, task, price table, defaults and context.

    Raises:
        SearchError: anything wrong with the file for this task and price table: an empty space, a
            range whose low is above its high, an unknown dimension or one the task does not have,
            more rungs than the trials allow, eta < 2, budgets that disagree with rungs and eta, a
            metric the task does not report, a cost objective or spend cap with an accelerator the
            price table lacks, a spend cap below the first rung.
    """
    task = _task(spec, task_name)
    objective = _objective(spec, task)
    dims = dimensions(spec, task)
    unit, stops = _budgets(spec)
    points = sample(dims, spec.sampling, spec.trials, spec.seed)
    sizes = rung_sizes(len(points), spec.rungs, spec.eta)
    # The budget is part of each key: a trial's schedule is laid out for it.
    search = {"unit": unit, "max_budget": stops[-1], "own_schedule": bool(_own_schedule(spec))}
    trials, unpriced = _trials(spec, task, points, defaults or {}, {**(context or {}), "search": search}, price_table)
    _check_prices(spec, objective, unit, unpriced)
    rungs = _rungs(trials, sizes, stops, unit)
    plan = SearchPlan(
        spec=spec,
        task=task.name,
        objective=objective,
        unit=unit,
        trials=trials,
        rungs=rungs,
        spend_cap=spec.dollars_cap(),
        unpriced=unpriced,
        **_totals(trials, rungs, stops[-1], unit),
    )
    first = rungs[0].worst_case_cost
    if plan.spend_cap is not None and first is not None and plan.spend_cap < first:
        raise SearchError(
            f"search.spend_cap ${plan.spend_cap:g} is below the first rung alone: {len(trials)} trials x "
            f"{_amount(stops[0], unit)} at their accelerators' prices cost ${first:.2f}; raise spend_cap to at least "
            f"${first:.2f}, or draw fewer trials, or give a smaller max_budget"
        )
    return plan


def _trial_price(trial: Trial) -> str:
    return f"{trial.price_key} ${trial.price_per_hour:.2f}/h" if trial.price_per_hour is not None else "no price"


def _priciest(plan: SearchPlan, size: int) -> str:
    """The accelerators of the ``size`` priciest trials (the worst case's promotions): ``3 x tpu-v3-8``."""
    ordered = sorted(plan.trials, key=lambda t: (-(t.price_per_hour or 0.0), t.index))[:size]
    counts = collections.Counter(t.price_key for t in ordered)
    return ", ".join(f"{n} x {key}" for key, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _rung_line(plan: SearchPlan, rung: Rung) -> str:
    who = "every trial" if rung.index == 0 else f"the best {rung.trials} of rung {rung.index - 1}"
    line = f"Rung {rung.index}: {who} ({rung.trials} trials) to {_amount(rung.stop, plan.unit)} each"
    if rung.worst_case_cost is not None:
        line += f"; adds at most {usd(rung.worst_case_cost)} ({duration(rung.worst_case_s)} of accelerator time)"
        line += f", worst case {_priciest(plan, rung.trials)}" if rung.index else ""
    return line


def _totals_line(plan: SearchPlan) -> str:
    top = _amount(plan.stops[-1], plan.unit)
    if plan.worst_case_cost is None or plan.grid_cost is None:
        why = "budgets in steps are priced once the trials have run" if plan.unit == "steps" else ""
        why = why or "no price for " + ", ".join(sorted(plan.unpriced))
        return f"Worst case: not priced ({why}); the whole grid is {len(plan.trials)} trials to {top}."
    cap = f" Spend cap: {usd(plan.spend_cap)}." if plan.spend_cap is not None else ""
    return (
        f"Worst case: {usd(plan.worst_case_cost)} ({duration(plan.worst_case_s)} of accelerator time): every promoted "
        f"trial trained to its rung's budget, the priciest promoted. The whole grid, every trial to {top}: "
        f"{usd(plan.grid_cost)} ({duration(plan.grid_s)}).{cap}"
    )


def describe_plan(plan: SearchPlan) -> str:
    """The dry run: each rung's trials and budget, and the worst-case cost against the whole grid's.

    Rung 0 lists every trial (its settings, key and price); a later rung's trials are the best of
    the one before, known once it ran, and the worst case assumes the priciest.
    """
    spec, objective = plan.spec, plan.objective
    direction = "higher" if objective.higher_is_better else "lower"
    schedule = " (a cap over each trial's own schedule)" if plan.own_schedule and plan.unit == "seconds" else ""
    lines = [
        f"Search plan: {len(plan.trials)} {plan.task} trials ({spec.sampling} sampling, seed {spec.seed}), "
        f"{len(plan.rungs)} rungs, eta {spec.eta}; objective: {objective.describe()} ({direction} is better).",
        f"Each trial's schedule is laid out once for {_amount(plan.stops[-1], plan.unit)}{schedule}; the rungs stop "
        f"it at {', '.join(_amount(s, plan.unit) for s in plan.stops)}.",
    ]
    for rung in plan.rungs:
        lines.append(_rung_line(plan, rung))
        lines += [f"  {t.name}  [{t.key}]  {_trial_price(t)}" for t in plan.trials] if rung.index == 0 else []
    lines.append(_totals_line(plan))
    return "\n".join(lines)


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


def usd(value: float) -> str:
    """Dollars to the cent, or to two significant digits under a dollar (a local trial's $0.00031)."""
    return f"${value:.2f}" if value >= 1 or value == 0 else f"${value:.2g}"


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
