"""A search's file: its space, its objective and its budgets, checked without the task.

A search file (YAML, or the same mapping as a pipeline parameter) names a space of training
settings, how many trials to draw from it and how (``grid``: the cartesian product, ``random``:
seeded draws), the rungs of successive halving (``rungs``, ``eta``) and each trial's budget at the
first and the last rung, the objective, and a spend cap::

    space:
      accelerator: [{accelerator: tpu-v3-8, accelerator_type: cloud-tpus.google.com/v3, accelerator_count: 8}]
      image_size: [256, 384, 512, 640]      # a list
      learning_rate: {low: 1e-4, high: 1e-2, log: true}   # a log range
      epochs: {low: 4, high: 10, points: 3}  # a range; grid sampling takes `points` of it
    trials: 12
    sampling: random
    rungs: 3
    eta: 3
    max_budget: 10m                          # or a number of optimizer steps
    objective: {kind: best_within, cost: 40}
    spend_cap: 150

Everything here is checked without the task; :func:`components.sweep.search.sampling.dimensions`
then checks the space against the task (a dimension it does not have is an error naming the ones
it has) and types every value. Plain Python, no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Optional, Union

import yaml

from components.sweep.grid import GridCell
from trainer import records, storage
from trainer.budget.limits import BudgetError, is_cap, parse_cost_budget, parse_time_budget
from trainer.records import whole_int


class SearchError(ValueError):
    """A search file, its plan, or the rows given to its selection are wrong; the message says what to change."""


OPTION_PREFIX = "model_options."
# Dimensions that are training settings of a grid cell, by the type of their values.
INT_DIMENSIONS = ("image_size", "epochs", "steps_per_epoch", "batch_size_per_replica", "global_batch_size")
FLOAT_DIMENSIONS = ("learning_rate",)
CHOICE_DIMENSIONS = ("accelerator", "model")
DIMENSIONS = (*CHOICE_DIMENSIONS, *INT_DIMENSIONS, *FLOAT_DIMENSIONS)
# The dimensions that set a trial's own schedule: with them a time budget is a cap, not filled.
SCHEDULE_DIMENSIONS = ("epochs", "steps_per_epoch")
RANGE_KEYS = ("low", "high", "log", "points")
# What every trial shares (``fixed``): a grid cell's settings, less what names or repeats a cell.
FIXED_KEYS = tuple(f.name for f in dataclasses.fields(GridCell) if f.name not in ("key", "name", "repeat", "repeats"))


def _known(name: str) -> bool:
    return name in DIMENSIONS or (name.startswith(OPTION_PREFIX) and len(name) > len(OPTION_PREFIX))


def as_number(where: str, value: Any) -> float:
    """A finite number (not a bool) as a float.

    Raises:
        SearchError: anything else.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SearchError(f"{where}: expected a number, got {value!r}")
    return float(value)


def _check_range(where: str, spec: Mapping[str, Any]) -> None:
    """A range's own rules: known keys, numbers, low <= high, a log range above 0, points >= 1."""
    unknown = sorted(set(spec) - set(RANGE_KEYS))
    if unknown or "low" not in spec or "high" not in spec:
        raise SearchError(
            f"{where}: a range is {{low, high}}, with log: true for a log range and points: N for grid "
            f"sampling; got the keys {sorted(spec)}"
        )
    low, high = as_number(f"{where}.low", spec["low"]), as_number(f"{where}.high", spec["high"])
    if low > high:
        raise SearchError(f"{where}: low {spec['low']} is above high {spec['high']}; swap them")
    if not isinstance(spec.get("log", False), bool):
        raise SearchError(f"{where}.log: expected true or false, got {spec['log']!r}")
    if spec.get("log") and low <= 0:
        raise SearchError(f"{where}: a log range needs low > 0, got {spec['low']}; give a positive low or drop log")
    if "points" in spec and (whole_int(spec["points"]) is None or whole_int(spec["points"]) < 1):
        raise SearchError(f"{where}.points: expected a whole number >= 1, got {spec['points']!r}")


def check_space(space: Any) -> None:
    """Checks a space's shape without the task: known names, non-empty lists, sound ranges.

    Raises:
        SearchError: an empty space, an unknown dimension, an empty list, a bad range.
    """
    if not isinstance(space, Mapping) or not space:
        raise SearchError(
            f"search.space: expected a non-empty mapping of dimension -> list or range, got {space!r}; dimensions: "
            f"{', '.join(DIMENSIONS)}, {OPTION_PREFIX}<option>"
        )
    for name, values in space.items():
        where = f"search.space.{name}"
        if not _known(str(name)):
            raise SearchError(
                f"{where}: unknown dimension; known: {', '.join(DIMENSIONS)} and {OPTION_PREFIX}<option> (an "
                "option of the task's model)"
            )
        if isinstance(values, Mapping):
            if name in CHOICE_DIMENSIONS:
                raise SearchError(f"{where}: {name} takes a list of values, not a range")
            _check_range(where, values)
        elif not isinstance(values, list) or not values:
            raise SearchError(f"{where}: expected a non-empty list or a range {{low, high}}, got {values!r}")


def parse_budget(value: Any, where: str) -> tuple[str, Union[int, float]]:
    """A trial's budget: ``("seconds", s)`` from a duration (``30s``, ``10m``), ``("steps", n)`` from a number.

    Raises:
        SearchError: a cap (``<=``), a number with a unit other than s, m, h, or steps below 1.
    """
    steps = whole_int(value)
    text = value.strip().lower() if isinstance(value, str) else ""
    if text.endswith("steps") and text[: -len("steps")].strip().isdigit():
        steps = int(text[: -len("steps")])
    if steps is not None:
        if steps < 1:
            raise SearchError(f"{where}: {value!r} steps; give at least 1 step, or a duration such as 30s")
        return "steps", steps
    if not isinstance(value, str):
        raise SearchError(f"{where}: expected a duration (30s, 10m, 2h) or a whole number of steps, got {value!r}")
    if is_cap(value):
        raise SearchError(
            f"{where}: {value!r} is a cap; a search budget is filled (give {value.strip()[2:].strip()}), and a "
            "trial keeps its own schedule when epochs is one of the space's dimensions"
        )
    try:
        return "seconds", parse_time_budget(value, where)
    except BudgetError as err:
        raise SearchError(f"{err} (or a whole number of optimizer steps)") from None


@dataclasses.dataclass(frozen=True)
class Objective(records.Record):
    """What the search looks for, and how it ranks its trials between rungs.

    Attributes:
        kind: ``best_within`` (the best quality within a cost or a time budget),
            ``cheapest_reaching`` (the cheapest trial reaching a quality) or ``frontier`` (the
            quality/cost Pareto frontier; its best quality is the pick).
        cost: best_within's budget in US dollars (``40``, ``$40``).
        time: best_within's budget as billed time (``2h``).
        quality: cheapest_reaching's target value of the metric.
        x: what cheap means for cheapest_reaching and frontier: ``cost`` (dollars) or ``seconds``
            (billed time).
        metric: the quality metric; planning sets it (the search's ``metric``, else the task's
            first quality metric).
        higher_is_better: the metric's direction; planning sets it from the task.
    """

    _error = SearchError
    _what = "search objective"
    _omit_empty = ("cost", "time", "quality", "metric", "higher_is_better")

    kind: Literal["best_within", "cheapest_reaching", "frontier"]
    cost: Optional[Union[float, str]] = None
    time: Optional[str] = None
    quality: Optional[float] = None
    x: Literal["cost", "seconds"] = "cost"
    metric: Optional[str] = None
    higher_is_better: Optional[bool] = None

    def __post_init__(self) -> None:
        given = {k for k in ("cost", "time", "quality") if getattr(self, k) is not None}
        if self.kind == "best_within" and len(given & {"cost", "time"}) != 1:
            raise SearchError("objective best_within needs one budget: cost (US dollars, 40) or time (2h)")
        if self.kind == "cheapest_reaching" and self.quality is None:
            raise SearchError("objective cheapest_reaching needs quality: the value of the metric to reach")
        takes = {"best_within": {"cost", "time"}, "cheapest_reaching": {"quality"}, "frontier": set()}[self.kind]
        if given - takes:
            raise SearchError(
                f"objective {self.kind} takes no {', '.join(sorted(given - takes))}; drop it or change kind"
            )
        try:
            _ = self.dollars, self.seconds
        except BudgetError as err:
            raise SearchError(str(err)) from None

    @property
    def dollars(self) -> Optional[float]:
        """best_within's cost budget in dollars; None: none."""
        return parse_cost_budget(self.cost, "objective.cost") if self.cost is not None else None

    @property
    def seconds(self) -> Optional[float]:
        """best_within's time budget in seconds; None: none."""
        return parse_time_budget(self.time, "objective.time") if self.time is not None else None

    @property
    def axis(self) -> str:
        """The row figure the objective weighs quality against: ``cost`` or ``seconds``."""
        if self.kind == "best_within":
            return "seconds" if self.time is not None else "cost"
        return self.x

    @property
    def is_priced(self) -> bool:
        """Whether ranking needs every trial's price (it weighs quality against dollars)."""
        return self.axis == "cost"

    def describe(self) -> str:
        """The objective in words: ``best ap50 within $40``, ``cheapest reaching ap50 >= 0.7``."""
        metric = self.metric or "quality"
        if self.kind == "best_within":
            budget = f"${self.dollars:g}" if self.time is None else self.time
            return f"best {metric} within {budget}"
        if self.kind == "cheapest_reaching":
            sign = ">=" if self.higher_is_better is not False else "<="
            return f"{'cheapest' if self.x == 'cost' else 'fastest'} reaching {metric} {sign} {self.quality:g}"
        return f"the {metric} / {self.x} frontier"


def _objective(value: Any) -> Objective:
    """The objective from its mapping, or from its kind alone (``frontier``)."""
    if isinstance(value, Objective):
        return value
    return Objective.from_dict({"kind": value} if isinstance(value, str) else value, "search.objective.")


def _fixed(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise records.RecordError(f"expected a mapping of grid cell settings, got {value!r}")
    return dict(value)


@dataclasses.dataclass(frozen=True)
class SearchSpec(records.Record):
    """A search file: the space, the sampling, the rungs, the budgets, the objective and the cap.

    Attributes:
        space: dimension -> a list of values, or a range ``{low, high}`` (``log: true`` for a log
            range; ``points: N`` gives grid sampling N values of it). Dimensions: ``accelerator``
            (entries as the sweep's grid cells give them, or a CPU's name), ``model``,
            ``image_size``, ``epochs``, ``steps_per_epoch``, ``batch_size_per_replica``,
            ``global_batch_size``, ``learning_rate`` and ``model_options.<option>``.
        max_budget: each trial's budget at the last rung: billed time (``10m``) or optimizer steps
            (``2000``). Every trial's schedule is laid out once for it.
        min_budget: the budget at the first rung; None: ``max_budget / eta^(rungs-1)``.
        trials: how many trials; None with grid sampling: the whole product.
        seed: the random draws' seed (and the subset of a grid larger than ``trials``).
        sampling: ``random`` (seeded draws) or ``grid`` (the cartesian product).
        rungs: rungs of successive halving (1: every trial to max_budget).
        eta: each rung keeps 1/eta of the trials and gives them eta times the budget; >= 2.
        objective: what the search looks for (:class:`Objective`, or its kind alone).
        metric: the quality metric; None: the task's first quality metric.
        spend_cap: the most the whole search may cost, US dollars; None: no cap.
        task: the task the file is written for; None: the run's.
        fixed: settings every trial shares (a grid cell's: ``model``, ``model_options``,
            ``batch_size_per_replica``, ``accelerator``, ...).
    """

    _error = SearchError
    _what = "search"
    _omit_empty = ("min_budget", "trials", "metric", "spend_cap", "task", "fixed")

    space: dict[str, Any]
    max_budget: Union[int, str]
    min_budget: Optional[Union[int, str]] = None
    trials: Optional[int] = None
    seed: int = 0
    sampling: Literal["grid", "random"] = "random"
    rungs: int = 3
    eta: int = 3
    objective: Objective = records.field(default=Objective(kind="frontier"), load=_objective)
    metric: Optional[str] = None
    spend_cap: Optional[Union[float, str]] = None
    task: Optional[str] = None
    fixed: dict[str, Any] = records.field(default_factory=dict, load=_fixed)

    def __post_init__(self) -> None:
        check_space(self.space)
        if self.rungs < 1:
            raise SearchError(f"search.rungs: {self.rungs}; give 1 or more (1: every trial to max_budget)")
        if self.eta < 2:
            raise SearchError(f"search.eta: {self.eta}; give 2 or more (each rung keeps 1/eta of the trials)")
        if self.trials is not None and self.trials < 1:
            raise SearchError(f"search.trials: {self.trials}; give 1 or more")
        if self.sampling == "random" and self.trials is None:
            raise SearchError("search.trials: random sampling needs the number of trials to draw")
        units = {parse_budget(b, f"search.{n}")[0] for n, b in self.budgets().items() if b is not None}
        if len(units) > 1:
            raise SearchError("search.min_budget and max_budget: give both as durations (30s, 10m) or both as steps")
        if self.spend_cap is not None:
            self.dollars_cap()
        if self.metric and self.objective.metric and self.metric != self.objective.metric:
            raise SearchError(f"search.metric {self.metric!r} and objective.metric {self.objective.metric!r}: give one")
        self._check_fixed()

    def _check_fixed(self) -> None:
        unknown = sorted(set(self.fixed) - set(FIXED_KEYS))
        if unknown:
            raise SearchError(
                f"search.fixed: unknown setting(s) {unknown}; a trial's settings: {', '.join(FIXED_KEYS)}"
            )
        options = self.fixed.get("model_options") or {}
        if not isinstance(options, Mapping):
            raise SearchError(f"search.fixed.model_options: expected a mapping, got {options!r}")
        shared = sorted({*self.fixed, *(OPTION_PREFIX + str(k) for k in options)} & set(self.space))
        if "accelerator" in self.space and {"accelerator_type", "accelerator_count", "strategy"} & set(self.fixed):
            shared.append("accelerator")
        if shared:
            raise SearchError(f"search: {shared} given in both space and fixed; give each in one of them")

    def budgets(self) -> dict[str, Any]:
        """The budgets as written: ``{"min_budget": ..., "max_budget": ...}``."""
        return {"min_budget": self.min_budget, "max_budget": self.max_budget}

    def dollars_cap(self) -> Optional[float]:
        """The spend cap in dollars; None: no cap.

        Raises:
            SearchError: not an amount above 0.
        """
        try:
            return parse_cost_budget(self.spend_cap, "search.spend_cap")
        except BudgetError as err:
            raise SearchError(str(err)) from None

    @classmethod
    def from_yaml(cls, text_or_path: Union[str, Path]) -> SearchSpec:
        """The search from YAML text, or from a ``.yaml``/``.yml`` file (a local path or gs://).

        Raises:
            SearchError: the YAML is not a mapping, or the search is wrong.
        """
        text = str(text_or_path)
        if isinstance(text_or_path, Path) or ("\n" not in text and text.endswith((".yaml", ".yml"))):
            text = storage.read_text(text)
        data = yaml.safe_load(text)
        if not isinstance(data, Mapping):
            raise SearchError(f"search file: expected a mapping (space, max_budget, ...), got {type(data).__name__}")
        return cls.from_dict(data)
