"""A cost-aware search's plan: successive halving over a search file's trials, planned and priced before it runs.

:func:`plan_search` draws the trials (:mod:`components.sweep.search.trials`: each a grid cell with
its own key, so the grid's cell task trains it and the grid's tables price it), plans the rungs of
synchronous successive halving (the form of ASHA and Hyperband): rung ``r`` keeps
``ceil(n / eta^r)`` trials and trains each to a budget of ``min_budget * eta^r``, the last rung's
being ``max_budget``. A trial's schedule is laid out once, for ``max_budget``; a rung stops it at a
prefix (its budget, in seconds or in steps), and a promoted trial continues from its own
checkpoints, so a rung's budget is the trial's total so far. The plan prices its worst case (every
promoted trial trained to its rung's budget, the priciest promoted) and the whole grid (every trial
to ``max_budget``) from the price table, and every bad input is an error here, before any
accelerator is asked for; :func:`describe_plan` is the dry run. Plain Python, no TensorFlow.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Optional, Union

from components.sweep.search.sampling import dimensions, sample
from components.sweep.search.space import SCHEDULE_DIMENSIONS, Objective, SearchError, SearchSpec, parse_budget
from components.sweep.search.trials import Trial, build_trials
from components.sweep.table import duration
from trainer import records
from trainer.budget.limits import MIN_BUDGET_S
from trainer.tasks import TaskError, get_task
from trainer.tasks.base import Task


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
# The task and the objective
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
            model_options, epochs, ...; ``components.sweep.config.SweepConfig``).
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
    trials, unpriced = build_trials(
        spec, task, points, defaults or {}, {**(context or {}), "search": search}, price_table
    )
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


# ---------------------------------------------------------------------------------------------
# The dry run
# ---------------------------------------------------------------------------------------------


def usd(value: float) -> str:
    """Dollars to the cent, or to two significant digits under a dollar (a local trial's $0.00031)."""
    return f"${value:.2f}" if value >= 1 or value == 0 else f"${value:.2g}"


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
