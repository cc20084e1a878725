"""Budgets of a training: the time and money it may spend, and the schedule laid out to fill them.

The run form gives them as text: ``time_budget`` is ``auto`` (none) or a duration ``90s``, ``10m``,
``2h``; ``cost_budget`` is ``auto`` or US dollars (``2.50``), turned into time at the price of the
step's accelerator (``trainer.pricing.price_of``); the tighter of the two holds. ``patience`` is
``auto``, a number of evaluations or ``off``. ``stop_at`` (``auto``, a duration or ``<n> steps``)
stops one process of a training at that point of its time or schedule without changing the
schedule: a search's rung, continued later from the checkpoints by a process with a later stop.

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
import re
import time
from collections.abc import Mapping
from typing import Any, Optional, Union

from trainer import records

AUTO = "auto"
OFF = "off"
CAP = "<="
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(s|m|h)")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_STEPS = re.compile(r"(\d+)\s*steps?")
# Below this no training step can even start (TensorFlow's import alone takes about 6 s).
MIN_BUDGET_S = 30.0
# The longest a run-time budget (and a notebook step's timeout) may ask for: a week. The compiled
# pipelines' deadline on those steps is longer (pipelines/platform.py), so a budget never meets it.
MAX_BUDGET_S = 7 * 24 * 3600.0
# Evaluations a budget is laid out in (fewer when the budget is short), and the fewest steps of one.
TARGET_EVALUATIONS = 10
MIN_STEPS_PER_EVALUATION = 10
# The evaluations take at most this share of the training's time (one at least, at the end).
EVALUATION_SHARE = 0.15
# Early stopping's ``auto`` patience: this share of the run's evaluations, at least MIN_PATIENCE.
PATIENCE_SHARE = 1 / 3
MIN_PATIENCE = 3
AUTO_FROM_EVALUATIONS = 2 * MIN_PATIENCE
# The plan aims this far under the budget (the process's exit, the last checkpoint), and counts
# steps this much slower than timed (a noisy machine, a first interval tracing its validation): a
# schedule cut short by the guard ends before its learning rate has decayed.
MARGIN = 0.04
STEP_MARGIN = 1.15
# Why the budget's guard ended a training (``training.json``'s ``stopping.reason``): the budget
# spent, or this process's ``stop_at`` reached (a search's rung; a later process goes on).
BUDGET_SPENT = "budget"
RUNG_STOP = "rung stop"


class BudgetError(ValueError):
    """A budget or patience that cannot be read, or a budget that cannot buy one evaluation interval."""


def _text(value: Any) -> str:
    return str(value).strip().lower() if value is not None else AUTO


def is_set(value: Any) -> bool:
    """Whether a ``time_budget`` or ``cost_budget`` value asks for a budget (not ``auto`` or empty)."""
    return _text(value) not in (AUTO, "")


def is_cap(value: Any) -> bool:
    """Whether a time budget is written as a cap, ``<=5m``: at most that long, the task's own
    schedule where it fits (a local run's default), rather than a budget the schedule fills.
    """
    return _text(value).startswith(CAP)


def parse_time_budget(value: Any, name: str = "train.time_budget", *, cap: bool = True) -> Optional[float]:
    """Seconds of a time budget (``90s``, ``10m``, ``2h``, ``1.5h``; ``<=5m`` a cap), or None for ``auto``/empty.

    Args:
        value: the text (a number is read as text: it lacks its unit).
        name: the field, for the message.
        cap: whether the message offers the cap form (``<=10m``); the caller refuses a cap itself.

    Raises:
        BudgetError: no unit, a unit other than s, m, h, a value <= 0, under ``MIN_BUDGET_S`` or
            over ``MAX_BUDGET_S``.
    """
    text = _text(value).removeprefix(CAP).strip()
    if text in (AUTO, ""):
        return None
    match = _DURATION.fullmatch(text)
    if not match:
        hint = " (a number needs its unit)" if re.fullmatch(r"[-+]?[\d.]+", text) else ""
        capped = " (<=10m: at most, the task's own schedule where it fits)" if cap else ""
        raise BudgetError(
            f"{name}: {value!r} is not a duration{hint}; give a positive number with s, m or h, such as 90s, 10m "
            f"or 2h{capped}, or auto for none"
        )
    seconds = float(match[1]) * _UNITS[match[2]]
    if seconds < MIN_BUDGET_S:
        raise BudgetError(
            f"{name}: {value!r} is under {MIN_BUDGET_S:.0f}s, the least a train step needs to start, train one "
            f"evaluation interval and export; give at least {MIN_BUDGET_S:.0f}s, or auto for none"
        )
    if seconds > MAX_BUDGET_S:
        raise BudgetError(
            f"{name}: {value!r} is over {MAX_BUDGET_S / 3600:.0f}h, the longest a step may run before the "
            f"pipeline's deadline on it; give at most {MAX_BUDGET_S / 3600:.0f}h, or auto for none"
        )
    return seconds


def parse_stop_at(value: Any, name: str = "train.stop_at") -> Optional[float]:
    """Seconds of a stop in a training's time (``60s``, ``2m``), or None for ``auto``/empty.

    Raises:
        BudgetError: a cap (``<=1m``: a stop is a point in time, not a budget), or what
            :func:`parse_time_budget` refuses.
    """
    if is_cap(value):
        raise BudgetError(
            f"{name}: {value!r} is a cap, but a stop is a point in the training's time: give a duration such as "
            f"60s or 2m (without {CAP}), or auto for none"
        )
    try:
        return parse_time_budget(value, name, cap=False)
    except BudgetError as err:
        raise BudgetError(f"{err}; a stop may also be a step of the schedule, such as 120 steps") from None


def parse_stop_step(value: Any, name: str = "train.stop_at") -> Optional[int]:
    """The optimizer step of a stop written in steps (``120 steps``), or None for any other form.

    Raises:
        BudgetError: ``0 steps``.
    """
    match = _STEPS.fullmatch(_text(value))
    if not match:
        return None
    if int(match[1]) < 1:
        raise BudgetError(f"{name}: {value!r} stops before the first step; give at least 1 step, or auto for none")
    return int(match[1])


def parse_stop(value: Any, name: str = "train.stop_at") -> Optional[tuple[str, float]]:
    """A stop as ``("steps", n)`` or ``("seconds", s)``, or None for ``auto``: two stops compare equal
    when they stop at the same point, whatever their spelling (``60s``, ``1m``).

    Raises:
        BudgetError: what :func:`parse_stop_step` and :func:`parse_stop_at` refuse.
    """
    step = parse_stop_step(value, name)
    if step is not None:
        return ("steps", step)
    seconds = parse_stop_at(value, name)
    return None if seconds is None else ("seconds", seconds)


def parse_cost_budget(value: Any, name: str = "train.cost_budget") -> Optional[float]:
    """US dollars of a cost budget (``2.50``, ``$2.50``), or None for ``auto``/empty.

    Raises:
        BudgetError: not a number, or a number <= 0.
    """
    text = _text(value).lstrip("$").strip()
    if text in (AUTO, ""):
        return None
    try:
        dollars = float(text)
    except ValueError:
        dollars = math.nan
    if not math.isfinite(dollars) or dollars <= 0:
        raise BudgetError(f"{name}: {value!r} is not an amount; give US dollars above 0 such as 2.50, or auto for none")
    return dollars


Patience = Union[int, str, None]  # a number of evaluations, AUTO, or None (off)


def parse_patience(value: Any, name: str = "train.patience") -> Patience:
    """``auto``, a whole number of evaluations >= 1, or None for ``off``.

    Raises:
        BudgetError: anything else (``-2``, ``0``, ``abc``).
    """
    text = _text(value)
    if text in (AUTO, ""):
        return AUTO
    if text == OFF:
        return None
    if re.fullmatch(r"\d+", text) and int(text) >= 1:
        return int(text)
    raise BudgetError(
        f"{name}: {value!r} is not a patience; give auto, a whole number of evaluations >= 1 (such as 3), or off"
    )


def resolve_patience(patience: Patience, evaluations: int) -> Optional[int]:
    """The evaluations without improvement that stop a run: ``auto`` is a third of the run's, at
    least 3, and off for a run of fewer than ``AUTO_FROM_EVALUATIONS`` (it could stop only at its
    very end, and the task's scoring each evaluation would cost more than it could save).

    None: early stopping is off.
    """
    if patience == AUTO:
        if evaluations < AUTO_FROM_EVALUATIONS:
            return None
        return max(MIN_PATIENCE, math.ceil(PATIENCE_SHARE * evaluations))
    return patience  # type: ignore[return-value]


@dataclasses.dataclass(frozen=True)
class Budget:
    """A run's budget: its time and its money, and the price that turns one into the other.

    Attributes:
        seconds: the time budget; None: none.
        dollars: the cost budget; None: none.
        price_key: the price table's key of the step's accelerator (with a cost budget).
        price_per_hour: its $/hour, the host's share included (with a cost budget).
        cap: the time budget is a cap: the task's own schedule where it fits in it.
    """

    seconds: Optional[float] = None
    dollars: Optional[float] = None
    price_key: Optional[str] = None
    price_per_hour: Optional[float] = None
    cap: bool = False

    @property
    def limit_s(self) -> Optional[float]:
        """The seconds the run may take: the tighter of the time and the cost budget; None: no budget."""
        limits = [s for s in (self.seconds, self._cost_seconds()) if s is not None]
        return min(limits) if limits else None

    def _cost_seconds(self) -> Optional[float]:
        if self.dollars is None:
            return None
        if not self.price_per_hour:
            return math.inf  # free hardware: money sets no limit
        return self.dollars / self.price_per_hour * 3600.0

    def describe(self) -> str:
        """Which budget holds, in words: ``time_budget 2m`` or ``cost_budget $0.50 at tpu-v3-8 ($8.19/h): 220s``."""
        cost = self._cost_seconds()
        if cost is not None and (self.seconds is None or cost < self.seconds):
            return f"cost_budget ${self.dollars:g} at {self.price_key} (${self.price_per_hour:g}/h): {_duration(cost)}"
        return f"time_budget {CAP if self.cap else ''}{_duration(self.seconds or 0.0)}"

    def cost(self, seconds: float) -> Optional[float]:
        """What ``seconds`` of the step cost at its price; None when no price is known."""
        return None if self.price_per_hour is None else seconds * self.price_per_hour / 3600.0


def _duration(seconds: float) -> str:
    if math.isinf(seconds):
        return "unlimited"
    if seconds >= 3600:
        return f"{seconds / 3600:.2g}h"
    if seconds >= 120:
        return f"{seconds / 60:.3g}m"
    return f"{seconds:.0f}s"


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
    extra: Mapping[str, Any] = records.extra_field()

    def line(self) -> str:
        """The plan in one line (the log, the console, the model card)."""
        cost = f", ${self.predicted_cost:.4f} at {self.price_key}" if self.predicted_cost is not None else ""
        resumed = f"; {self.spent_before_s:.0f}s spent before a restart" if self.spent_before_s else ""
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
