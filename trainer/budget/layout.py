"""The schedule a budget buys: evaluation intervals laid out over the steps that fit, and its clock.

A budget covers the whole train step as its pod or process lives: start-up (TensorFlow's import,
the data checks, building the model), the calibration (timing real steps once compiled), the
training with its evaluations, and the export. After the calibration :func:`lay_out` fills what
is left with evaluation intervals of whole steps: a budget fills the time, it is not only a cap.
The schedule is laid out over the planned steps once, and a run stopped at any step (the budget's
guard, early stopping, a search's rung) is a valid prefix of it.

Plain Python, no TensorFlow: the arithmetic is tested with a fake clock.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping
from typing import Any, Optional

from trainer import records
from trainer.budget.limits import Budget, BudgetError, duration

# Evaluations a budget is laid out in (fewer when the budget is short), and the fewest steps of one.
TARGET_EVALUATIONS = 10
MIN_STEPS_PER_EVALUATION = 10
# The evaluations take at most this share of the training's time (one at least, at the end).
EVALUATION_SHARE = 0.15
# The plan aims this far under the budget (the process's exit, the last checkpoint), and counts
# steps this much slower than timed (a noisy machine, a first interval tracing its validation): a
# schedule cut short by the guard ends before its learning rate has decayed.
MARGIN = 0.04
STEP_MARGIN = 1.15
# Intervals measured before the plan is laid out again, after each interval from then on, from the
# mean of the last this many (the first traces, fills caches; the machine's speed moves), and the
# margin on the measured interval then (smaller than STEP_MARGIN: the training's own intervals).
REPLAN_AFTER = 2
REPLAN_MARGIN = 1.05


@dataclasses.dataclass(frozen=True)
class Layout:
    """How a budget's training time is spent: evaluation intervals of whole steps.

    Attributes:
        evaluations: evaluation intervals (each ends with a validation).
        steps_per_evaluation: optimizer steps of one interval (a multiple of steps per execution).
    """

    evaluations: int
    steps_per_evaluation: int

    @property
    def steps(self) -> int:
        """The schedule's optimizer steps."""
        return self.evaluations * self.steps_per_evaluation

    def seconds(self, step_s: float, eval_s: float) -> float:
        """The predicted time of the intervals at the measured step and evaluation times."""
        return self.evaluations * (self.steps_per_evaluation * step_s + eval_s)


def minimum_interval_s(step_s: float, eval_s: float, steps_per_execution: int = 1) -> float:
    """The time of the shortest evaluation interval: ``MIN_STEPS_PER_EVALUATION`` steps and a validation."""
    steps = _round_up(MIN_STEPS_PER_EVALUATION, steps_per_execution)
    return steps * step_s + eval_s


def lay_out(
    available_s: float,
    step_s: float,
    eval_s: float,
    steps_per_execution: int = 1,
    target_evaluations: int = TARGET_EVALUATIONS,
) -> Layout:
    """The evaluation intervals that fill ``available_s`` seconds of training.

    ``target_evaluations`` intervals where each can hold ``MIN_STEPS_PER_EVALUATION`` steps and
    the evaluations take at most ``EVALUATION_SHARE`` of the time, fewer on a short budget (one
    at least); each interval as long as the time allows, in whole executions.

    Args:
        available_s: the seconds left for training and its evaluations.
        step_s: the measured seconds of one optimizer step.
        eval_s: the seconds of one evaluation (validation and the task's metric).
        steps_per_execution: an interval is a multiple of it.
        target_evaluations: the evaluations a long enough budget gets.

    Raises:
        BudgetError: not even one interval fits; the message names the time one needs.
    """
    if step_s <= 0 or eval_s < 0:
        raise ValueError(f"expected a step time > 0 and an evaluation time >= 0, got {step_s}, {eval_s}")
    shortest = minimum_interval_s(step_s, eval_s, steps_per_execution)
    affordable = int(EVALUATION_SHARE * available_s // eval_s) if eval_s > 0 else target_evaluations
    evaluations = min(target_evaluations, int(available_s // shortest), max(1, affordable))
    if evaluations < 1:
        raise BudgetError(
            f"the budget leaves {max(available_s, 0.0):.1f}s for training, less than one evaluation interval "
            f"({_round_up(MIN_STEPS_PER_EVALUATION, steps_per_execution)} steps at {step_s:.3g}s and a validation of "
            f"{eval_s:.2g}s: {shortest:.1f}s)"
        )
    per_eval = int((available_s / evaluations - eval_s) // step_s)
    per_eval -= per_eval % steps_per_execution
    return Layout(evaluations, per_eval)


def within(layout: Layout, steps: int, steps_per_execution: int = 1) -> Layout:
    """The layout shrunk to about ``steps`` steps (a cap whose task's own schedule fits), its
    evaluations kept where each still holds ``MIN_STEPS_PER_EVALUATION`` steps.
    """
    evaluations = max(1, min(layout.evaluations, steps // max(MIN_STEPS_PER_EVALUATION, steps_per_execution)))
    per_eval = max(steps_per_execution, steps // evaluations // steps_per_execution * steps_per_execution)
    return Layout(evaluations, per_eval)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


@dataclasses.dataclass(frozen=True)
class BudgetPlan(records.Record):
    """What a budget bought, and why: recorded in ``training.json`` (``budget``) and the model card.

    Attributes:
        limit: which budget holds, in words (``time_budget 2m``, ``cost_budget $0.50 at ...``).
        budget_s: the seconds the train step may take.
        spent_before_s: seconds spent by earlier processes of this training (a resumed run).
        startup_s: seconds from the process's start to the calibration (imports, checks, build).
        calibration_s: seconds the calibration took (its steps are thrown away).
        step_s: the measured seconds of one optimizer step.
        eval_s: the estimated seconds of one evaluation.
        export_s: the seconds kept for the export.
        steps: the schedule's optimizer steps.
        evaluations: evaluation intervals.
        steps_per_evaluation: steps of one interval.
        predicted_s: the train step's predicted seconds in all.
        price_key: the price table's key of the step's accelerator; None: no price known.
        price_per_hour: its $/hour; None: no price known.
        predicted_cost: the predicted cost of the train step in US dollars; None: no price known.
        own_steps: a cap's (``<=5m``) own schedule, the most a stretched plan may lay out; None: no cap.
        replanned_from: the steps planned at the calibration, when the training's own intervals
            laid the plan out again (faster or slower than the calibration's steps with their
            margin); None: the calibration's plan held.
        extra: keys this code does not know (written by a newer version).
    """

    _mode = records.FORWARD_COMPATIBLE
    _what = "training.json budget"

    limit: str
    budget_s: float
    spent_before_s: float
    startup_s: float
    calibration_s: float
    step_s: float
    eval_s: float
    export_s: float
    steps: int
    evaluations: int
    steps_per_evaluation: int
    predicted_s: float
    price_key: Optional[str] = None
    price_per_hour: Optional[float] = None
    predicted_cost: Optional[float] = None
    own_steps: Optional[int] = None
    replanned_from: Optional[int] = None
    extra: Mapping[str, Any] = records.extra_field()

    def headline(self) -> str:
        """What the budget bought, in words a person checks before it is spent: the steps, the time, the money."""
        dollars, cost = self.predicted_cost, ""
        if dollars is not None:
            cost = f", ~${dollars:.2f}" if dollars >= 0.1 else f", ~${dollars:.2g}"
            cost += f" at {self.price_key}"
        return (
            f"{self.limit} buys {self.steps:,} steps ({self.evaluations} evaluations) at "
            f"{self.step_s * 1000:.0f} ms/step: ~{duration(self.predicted_s)} in all{cost}"
        )

    def line(self) -> str:
        """The plan in one line (the log, the model card)."""
        cost = f", ${self.predicted_cost:.4f} at {self.price_key}" if self.predicted_cost is not None else ""
        resumed = f"; {self.spent_before_s:.0f}s spent before a restart" if self.spent_before_s else ""
        if self.replanned_from:
            resumed += f"; laid out again from {self.replanned_from} steps as the intervals ran"
        return (
            f"budget {self.limit}: {self.steps} steps ({self.evaluations} evaluations x {self.steps_per_evaluation}) "
            f"at {self.step_s * 1000:.1f} ms/step measured, evaluation ~{self.eval_s:.1f}s, "
            f"export ~{self.export_s:.0f}s; "
            f"predicted {self.predicted_s:.0f}s{cost} (start-up {self.startup_s:.0f}s, calibration "
            f"{self.calibration_s:.1f}s){resumed}"
        )


def plan(
    budget: Budget,
    *,
    elapsed_s: float,
    calibration_s: float,
    step_s: float,
    eval_s: float,
    export_s: float,
    steps_per_execution: int = 1,
    spent_before_s: float = 0.0,
    own_steps: Optional[int] = None,
    own_evaluations: Optional[int] = None,
) -> BudgetPlan:
    """Lays a budget out over the steps that fit once the calibration measured them.

    Args:
        budget: the run's budget (``limit_s`` must not be None).
        elapsed_s: seconds of this process so far, the calibration included.
        calibration_s: the calibration's share of ``elapsed_s``.
        step_s: the measured seconds of one step.
        eval_s: the estimated seconds of one evaluation.
        export_s: the seconds to keep for the export.
        steps_per_execution: intervals are multiples of it.
        spent_before_s: seconds spent by earlier processes of this training.
        own_steps: the run's own schedule (the task's fitted one, or the configured epochs); a cap
            (``<=5m``) lays out these steps where they fit, fewer where they do not. None: the
            budget is filled.
        own_evaluations: the evaluations of that schedule (the configured epochs, each
            ``own_steps / own_evaluations`` steps): where they fit in the cap too, the cap keeps
            them as they are. None: the cap lays its own evaluations out over ``own_steps``.

    Raises:
        BudgetError: the budget cannot buy one evaluation interval (naming the least budget that can).
    """
    limit = budget.limit_s
    if limit is None:
        raise ValueError("no budget to plan")
    usable = limit * (1 - MARGIN)
    available = usable - spent_before_s - elapsed_s - export_s
    try:
        layout = lay_out(available, step_s * STEP_MARGIN, eval_s, steps_per_execution)
    except BudgetError as err:
        interval = minimum_interval_s(step_s * STEP_MARGIN, eval_s, steps_per_execution)
        least = (spent_before_s + elapsed_s + export_s + interval) / (1 - MARGIN)
        raise BudgetError(
            f"{budget.describe()} cannot buy one evaluation interval: {err}; start-up and calibration took "
            f"{elapsed_s:.0f}s and the export needs ~{export_s:.0f}s. Give at least {math.ceil(least)}s"
        ) from None
    if budget.cap and own_steps is not None and own_steps < layout.steps:
        own = Layout(own_evaluations, own_steps // own_evaluations) if own_evaluations else None
        if own is not None and own.seconds(step_s * STEP_MARGIN, eval_s) <= available:
            layout = own  # the configured epochs, exactly: a prefix of it is a prefix of the run asked for
        else:
            layout = within(layout, own_steps, steps_per_execution)
    predicted = spent_before_s + elapsed_s + layout.seconds(step_s * STEP_MARGIN, eval_s) + export_s
    return BudgetPlan(
        limit=budget.describe(),
        budget_s=round(limit, 3),
        spent_before_s=round(spent_before_s, 3),
        startup_s=round(elapsed_s - calibration_s, 3),
        calibration_s=round(calibration_s, 3),
        step_s=step_s,
        eval_s=round(eval_s, 3),
        export_s=round(export_s, 3),
        steps=layout.steps,
        evaluations=layout.evaluations,
        steps_per_evaluation=layout.steps_per_evaluation,
        predicted_s=round(predicted, 3),
        price_key=budget.price_key,
        price_per_hour=budget.price_per_hour,
        predicted_cost=None if budget.cost(predicted) is None else round(budget.cost(predicted), 6),
        own_steps=own_steps if budget.cap else None,
    )


def replanned(
    plan: BudgetPlan, *, done: int, interval_s: float, left_s: float, steps_per_execution: int = 1
) -> BudgetPlan:
    """The plan laid out again from the training's own intervals: more intervals of the same
    length where they ran faster than the calibration's steps with their margin predicted, fewer
    where they ran slower, and the last one as long as what is left holds.

    The plan is laid out from a few steps timed during the calibration, counted 15% slower
    (``STEP_MARGIN``); the training's own steps run with its callbacks and evaluations around them,
    and on a busy or a quiet machine they can land either side of that: a sixth of a budget left
    unused, or the guard stopping the schedule before its learning rate has decayed. After each of
    the ``done`` intervals run, the mean ``interval_s`` of the last ones (steps and evaluation, as
    they ran) says how many fit in ``left_s`` (the budget's seconds left, less the margin and the
    export): at least one more, never past a cap's own schedule. The last interval takes the
    steps the rest of that time holds at the intervals' own step time (from one execution to just
    under two intervals): whole intervals alone left up to one unused at the end, a sixth of a
    two-minute budget. The schedule's length follows (``schedules.set_total_steps``); the
    training's last epoch runs to ``steps``.

    Args:
        plan: the plan being trained.
        done: the intervals finished.
        interval_s: the mean seconds of the last ones (``REPLAN_AFTER``).
        left_s: the budget's seconds left now.
        steps_per_execution: the last interval is a multiple of it.
    """
    if done >= plan.evaluations:
        return plan
    per_eval, execution = plan.steps_per_evaluation, steps_per_execution
    usable = left_s - plan.budget_s * MARGIN - plan.export_s
    whole = max(int(usable // (interval_s * REPLAN_MARGIN)), 1)
    step_s = max(interval_s - plan.eval_s, 0.0) / per_eval or plan.step_s  # as the intervals ran
    left_for_last = usable - (whole - 1) * interval_s * REPLAN_MARGIN - plan.eval_s
    last = int(left_for_last // (step_s * REPLAN_MARGIN)) // execution * execution
    last = min(max(last, execution), 2 * per_eval - execution)
    steps = (done + whole - 1) * per_eval + last
    if plan.own_steps is not None:
        steps = min(steps, max(plan.own_steps // execution * execution, done * per_eval + execution))
    # The last epoch holds what is over whole intervals (under two intervals; one alone may be shorter).
    evaluations = done + max((steps - done * per_eval) // per_eval, 1)
    if steps == plan.steps and evaluations == plan.evaluations:
        return plan
    final = steps - (evaluations - 1) * per_eval
    later = (evaluations - done - 1) * interval_s + final * step_s + plan.eval_s
    predicted = plan.budget_s - left_s + later + plan.export_s
    cost = None if plan.price_per_hour is None else round(plan.price_per_hour * predicted / 3600, 6)
    return dataclasses.replace(
        plan,
        steps=steps,
        evaluations=evaluations,
        predicted_s=round(predicted, 3),
        predicted_cost=cost,
        replanned_from=plan.replanned_from or plan.steps,
    )


def process_started_at() -> float:
    """When this process started, in ``time.time()`` seconds (Linux: from ``/proc``; else now).

    The budget counts the whole step, TensorFlow's import included, which happens before any of
    this code runs.
    """
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of stat(5), after pid and comm
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        import os

        return boot + start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


class Deadline:
    """The budget's clock: seconds left until the budget ends, for a process that started at ``started_at``.

    Args:
        budget_s: the seconds the whole training may take.
        started_at: this process's start (``time.time()`` seconds).
        spent_before_s: seconds spent by earlier processes of this training.
        clock: ``time.time`` (tests pass a fake one).
    """

    def __init__(self, budget_s: float, started_at: float, spent_before_s: float = 0.0, clock=time.time) -> None:
        self.budget_s, self.started_at, self.spent_before_s, self.clock = budget_s, started_at, spent_before_s, clock

    def spent_s(self) -> float:
        """Seconds spent so far, earlier processes included."""
        return self.spent_before_s + self.clock() - self.started_at

    def left_s(self) -> float:
        """Seconds left (negative once over)."""
        return self.budget_s - self.spent_s()

    def with_limit(self, limit_s: float) -> Deadline:
        """Another limit on the same clock: the same start, the time spent before counted alike
        (a rung's ``stop_at`` inside the budget).
        """
        return type(self)(limit_s, self.started_at, self.spent_before_s, self.clock)


def budget_line(budget: Mapping[str, Any]) -> str:
    """A recorded budget in one line: what held, the steps, the measured step, predicted and actual time and cost."""
    actual = budget.get("actual_s")
    cost = budget.get("actual_cost") if actual is not None else budget.get("predicted_cost")
    priced = f", ${cost:.4f} at {budget.get('price_key')}" if cost is not None else ""
    return (
        f"{budget.get('limit')}: {budget.get('steps')} steps in {budget.get('evaluations')} evaluation intervals at "
        f"{1000 * float(budget.get('step_s') or 0):.1f} ms/step measured; "
        f"predicted {float(budget.get('predicted_s') or 0):.0f}s, took {'n/a' if actual is None else f'{actual:.0f}s'}"
        f"{priced}"
    )


def stopping_line(stopping: Mapping[str, Any]) -> str:
    """Where a training ended, in one line: the step, why, and the best evaluation exported."""
    reason = stopping.get("reason", "completed")
    line = f"ended at step {stopping.get('step')} of {stopping.get('planned_steps')} ({reason})"
    if stopping.get("best_step") is not None:
        best = float(stopping["best"])
        line += f"; best {stopping.get('monitor')} {best:.4f} at step {stopping['best_step']} (exported)"
    patience = stopping.get("patience")
    return line + (f"; patience {patience} evaluations" if patience else "; early stopping off")
