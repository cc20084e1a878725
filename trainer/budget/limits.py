"""A training's limits as the run form writes them, read once into one typed value.

The run form gives them as text: ``time_budget`` is ``auto`` (none) or a duration ``90s``, ``10m``,
``2h`` (``<=5m``: a cap over the run's own schedule); ``cost_budget`` is ``auto`` or US dollars
(``2.50``), turned into time at the price of the step's accelerator (``trainer.budget.pricing``);
the tighter of the two holds. ``patience`` is ``auto``, a number of evaluations or ``off``.
``stop_at`` (``auto``, a duration or ``<n> steps``) stops one process of a training at that point
of its time or schedule without changing the schedule: a search's rung, continued later from the
checkpoints by a process with a later stop.

:meth:`Limits.parse` reads the four once (``trainer.config.TrainConfig`` does, when it is made),
with every rule between them; everything after reads the :class:`Limits` value, never the text.
The parsers stay public for other files' budgets (a search's rungs and objective).

Plain Python, no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from typing import Any, Optional, Union

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
# Early stopping's ``auto`` patience: this share of the run's evaluations, at least MIN_PATIENCE.
PATIENCE_SHARE = 1 / 3
MIN_PATIENCE = 3
AUTO_FROM_EVALUATIONS = 2 * MIN_PATIENCE
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
            return f"cost_budget ${self.dollars:g} at {self.price_key} (${self.price_per_hour:g}/h): {duration(cost)}"
        return f"time_budget {CAP if self.cap else ''}{duration(self.seconds or 0.0)}"

    def cost(self, seconds: float) -> Optional[float]:
        """What ``seconds`` of the step cost at its price; None when no price is known."""
        return None if self.price_per_hour is None else seconds * self.price_per_hour / 3600.0


def duration(seconds: float) -> str:
    """Seconds as a person reads a budget: ``90s``, ``7.5m``, ``7.1h``, ``unlimited``."""
    if math.isinf(seconds):
        return "unlimited"
    if seconds >= 3600:
        return f"{seconds / 3600:.2g}h"
    if seconds >= 120:
        return f"{seconds / 60:.3g}m"
    return f"{seconds:.0f}s"


@dataclasses.dataclass(frozen=True)
class Stop:
    """Where one process of a training stops: a step of its schedule, or a point of its time.

    Two stops are equal when they stop at the same point, whatever their spelling (``60s``, ``1m``).

    Attributes:
        steps: the optimizer step (``120 steps``); None: a point of the time.
        seconds: the seconds of the training's time (``60s``); None: a step.
    """

    steps: Optional[int] = None
    seconds: Optional[float] = None

    @classmethod
    def parse(cls, value: Any, name: str = "train.stop_at") -> Optional[Stop]:
        """The stop a ``stop_at`` text writes, or None for ``auto``/empty.

        Raises:
            BudgetError: what :func:`parse_stop_step` and :func:`parse_stop_at` refuse.
        """
        step = parse_stop_step(value, name)
        if step is not None:
            return cls(steps=step)
        seconds = parse_stop_at(value, name)
        return None if seconds is None else cls(seconds=seconds)


# What prices a cost budget: (the price key, its $/hour), or a ValueError naming why there is none.
Pricer = Callable[[], tuple[Optional[str], Optional[float]]]


@dataclasses.dataclass(frozen=True)
class Limits:
    """A training's limits, read once from ``time_budget``, ``cost_budget``, ``patience`` and ``stop_at``.

    Attributes:
        budget: the time and money the train step may spend, priced; ``budget.limit_s`` is None
            without a budget.
        patience: early stopping's patience: a number of evaluations, ``AUTO``, or None (off).
        stop: where this process stops (a search's rung); None: at the end of the schedule.
    """

    budget: Budget = Budget()
    patience: Patience = AUTO
    stop: Optional[Stop] = None

    @property
    def budgeted(self) -> bool:
        """Whether a time or cost budget is set (the schedule is then laid out to fill it)."""
        return self.budget.seconds is not None or self.budget.dollars is not None

    @property
    def stop_s(self) -> Optional[float]:
        """The seconds of the training's time at which this process stops; None: none, or a step."""
        return self.stop.seconds if self.stop is not None else None

    @property
    def stop_step(self) -> Optional[int]:
        """The optimizer step at which this process stops; None: none, or a time."""
        return self.stop.steps if self.stop is not None else None

    @classmethod
    def parse(
        cls,
        time_budget: Any = AUTO,
        cost_budget: Any = AUTO,
        patience: Any = AUTO,
        stop_at: Any = AUTO,
        *,
        price: Optional[Pricer] = None,
        section: str = "train.",
    ) -> Limits:
        """Reads the four texts, and checks the rules between them.

        Args:
            time_budget: ``auto``, a duration (``10m``) or a cap (``<=5m``).
            cost_budget: ``auto`` or US dollars (``2.50``).
            patience: ``auto``, a number of evaluations, or ``off``.
            stop_at: ``auto``, a duration inside ``time_budget``, or ``<n> steps``.
            price: prices the step's accelerator (asked only with a budget); None: unpriced.
            section: the fields' prefix in messages.

        Raises:
            BudgetError: a text that cannot be read; a cost budget without a price, or on free
                hardware with no time budget; a ``stop_at`` time without a time budget, or past it.
        """
        seconds = parse_time_budget(time_budget, f"{section}time_budget")
        dollars = parse_cost_budget(cost_budget, f"{section}cost_budget")
        budget = Budget(seconds, dollars, cap=is_cap(time_budget))
        if budget.seconds is not None or dollars is not None:
            budget = _priced(budget, price, section)
        stop = Stop.parse(stop_at, f"{section}stop_at")
        if stop is not None and stop.seconds is not None:
            _check_stop(stop_at, stop.seconds, time_budget, seconds, section)
        return cls(budget, parse_patience(patience, f"{section}patience"), stop)


def _priced(budget: Budget, price: Optional[Pricer], section: str) -> Budget:
    """The budget with its accelerator's price; a cost budget that cannot be priced is refused."""
    key = per_hour = None
    try:
        key, per_hour = price() if price is not None else (None, None)
    except ValueError as err:
        if budget.dollars is not None:
            raise BudgetError(f"{section}cost_budget: {err}") from None
    if budget.dollars is not None and budget.seconds is None and not per_hour:
        raise BudgetError(
            f"{section}cost_budget: {key} costs nothing in the price table, so ${budget.dollars:g} sets no limit; "
            f"give a time_budget, or price it in a table of your own ({section}price_table)"
        )
    return dataclasses.replace(budget, price_key=key, price_per_hour=per_hour)


def _check_stop(stop_at: Any, stop_s: float, time_budget: Any, budget_s: Optional[float], section: str) -> None:
    """A stop in time needs the whole training's time budget, and stops inside it."""
    if budget_s is None:
        raise BudgetError(
            f"{section}stop_at: {stop_at!r} stops a training at a point of its time budget's schedule, but "
            f"time_budget is {time_budget!r}; give the whole training's time_budget (such as 10m, or <=10m a cap "
            "over its own schedule), or set stop_at to auto"
        )
    if stop_s > budget_s:
        raise BudgetError(
            f"{section}stop_at: {stop_at!r} ({stop_s:g}s) is past the time budget ({time_budget}: {budget_s:g}s), "
            f"where the training ends anyway; give a stop_at of at most {budget_s:g}s, or auto to train to the end"
        )
