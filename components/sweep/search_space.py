"""A search's file: its space, its objective and its budgets, checked; and the trials drawn from it.

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

Everything here is checked without the task; :func:`dimensions` then checks the space against the
task (a dimension it does not have is an error naming the ones it has) and types every value
(ints stay ints, whatever kfp.local made of them). Plain Python, no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Optional, Union

import yaml

from components.sweep.grid import ACCELERATOR_KEYS, AcceleratorEntry, GridCell, GridError, as_int
from trainer import records, storage
from trainer.budget import BudgetError, is_cap, parse_cost_budget, parse_time_budget
from trainer.records import whole_int
from trainer.tasks.base import Task


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
# An accelerator of the space: what it runs on, and how many pods train together on it (a cluster
# is priced under its own name: ``v100-x5``).
ACCELERATOR_ENTRY_KEYS = (*ACCELERATOR_KEYS, "workers")
# What every trial shares (``fixed``): a grid cell's settings, less what names or repeats a cell.
FIXED_KEYS = tuple(f.name for f in dataclasses.fields(GridCell) if f.name not in ("key", "name", "repeat", "repeats"))
# Random draws retry a point already drawn this many times per trial before giving up.
_DRAWS_PER_TRIAL = 50


def _known(name: str) -> bool:
    return name in DIMENSIONS or (name.startswith(OPTION_PREFIX) and len(name) > len(OPTION_PREFIX))


def _number(where: str, value: Any) -> float:
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
    low, high = _number(f"{where}.low", spec["low"]), _number(f"{where}.high", spec["high"])
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


# ---------------------------------------------------------------------------------------------
# Dimensions, typed against the task
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Dimension:
    """One dimension of the space, its values typed.

    Attributes:
        name: the dimension (``image_size``, ``model_options.anchor_size``).
        values: a list's values (an accelerator as its checked grid cell keys); empty for a range.
        low: a range's low end.
        high: a range's high end.
        log: the range is drawn (and gridded) evenly in log space.
        integer: the range holds whole numbers.
        points: how many values grid sampling takes of the range; None: grid sampling refuses it.
    """

    name: str
    values: tuple[Any, ...] = ()
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    integer: bool = False
    points: Optional[int] = None

    def grid_values(self) -> tuple[Any, ...]:
        """The values grid sampling takes: the list, or ``points`` values spread evenly over the range.

        Raises:
            SearchError: a range without ``points``.
        """
        if self.values:
            return self.values
        if self.points is None:
            raise SearchError(
                f"search.space.{self.name}: grid sampling needs a list, or points: N in the range to take N values "
                "of it; or use sampling: random"
            )
        if self.points == 1:
            return (self._typed(self.low),)
        ends = (math.log(self.low), math.log(self.high)) if self.log else (self.low, self.high)
        steps = [ends[0] + i * (ends[1] - ends[0]) / (self.points - 1) for i in range(self.points)]
        spread = [self._typed(math.exp(s) if self.log else s) for s in steps]
        return tuple(dict.fromkeys(spread))  # whole numbers may repeat; each once, in order

    def draw(self, rng: random.Random) -> Any:
        """One value drawn at random (uniform over the list, the range or its log)."""
        if self.values:
            return self.values[rng.randrange(len(self.values))]
        if self.integer and not self.log:
            return rng.randint(int(self.low), int(self.high))
        if self.log:
            return self._typed(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))
        return self._typed(rng.uniform(self.low, self.high))

    def _typed(self, value: float) -> Union[int, float]:
        if self.integer:
            return min(int(self.high), max(int(self.low), int(round(value))))
        return float(f"{value:.4g}")  # four significant digits: readable names, and the same keys


def _option_kind(task: Task, option: str) -> Optional[type]:
    """``int`` or ``float`` when the task's option takes numbers (so a range may hold it); else None."""
    hint = typing.get_type_hints(task.options_type)[option]
    args = typing.get_args(hint) or (hint,)
    return float if float in args else int if int in args else None


def _check_against_task(name: str, task: Task) -> None:
    """A dimension the task does not have is an error naming the ones it has."""
    options = [f.name for f in dataclasses.fields(task.options_type) if f.name != "image_size"]
    if name == "image_size" and not task.accepts_image_size():
        raise SearchError(
            f"search.space.image_size: a {task.name} model trains at the dataset's image size (convert the data "
            f"at another size instead); {task.name}'s dimensions: {', '.join(_task_dimensions(task))}"
        )
    if name == OPTION_PREFIX + "image_size":
        raise SearchError("search.space.model_options.image_size: give it as the image_size dimension")
    option = name[len(OPTION_PREFIX) :] if name.startswith(OPTION_PREFIX) else None
    if option is not None and option not in options:
        raise SearchError(
            f"search.space.{name}: {task.name}'s model has no option {option!r}; its options: {', '.join(options)}"
        )


def _task_dimensions(task: Task) -> list[str]:
    names = [n for n in DIMENSIONS if n != "image_size" or task.accepts_image_size()]
    return names + [OPTION_PREFIX + f.name for f in dataclasses.fields(task.options_type) if f.name != "image_size"]


def _dimension(name: str, raw: Any, task: Task) -> Dimension:
    """One dimension typed: ints stay ints (kfp.local hands them over as floats), ranges by their type."""
    where = f"search.space.{name}"
    if name == "accelerator":
        return Dimension(name, tuple(_accelerator(f"{where}[{i}]", v) for i, v in enumerate(raw)))
    kind = int if name in INT_DIMENSIONS else float if name in FLOAT_DIMENSIONS else str if name == "model" else None
    if name.startswith(OPTION_PREFIX):
        kind = _option_kind(task, name[len(OPTION_PREFIX) :])
    if isinstance(raw, Mapping):
        if kind not in (int, float):
            raise SearchError(f"{where}: takes no range (its values are not numbers); give a list")
        integer = kind is int
        low, high = (_integer(f"{where}.{k}", raw[k]) if integer else float(raw[k]) for k in ("low", "high"))
        points = whole_int(raw.get("points"))
        return Dimension(name, low=low, high=high, log=bool(raw.get("log", False)), integer=integer, points=points)
    return Dimension(name, tuple(_typed_value(f"{where}[{i}]", v, kind) for i, v in enumerate(raw)))


def _accelerator(where: str, value: Any) -> dict[str, Any]:
    """An accelerator entry as a grid cell gives it (a CPU by its name alone), checked, its count a digit string."""
    entry = {"accelerator": value} if isinstance(value, str) else value
    if not isinstance(entry, Mapping) or not set(entry) <= set(ACCELERATOR_ENTRY_KEYS):
        raise SearchError(
            f"{where}: {value!r}; an accelerator is a CPU's name or a mapping of {', '.join(ACCELERATOR_ENTRY_KEYS)} "
            "as a grid cell gives it"
        )
    try:
        checked = AcceleratorEntry.of_cell(entry, where).to_dict()
        workers = {"workers": as_int(f"{where}.workers", entry["workers"])} if "workers" in entry else {}
    except GridError as err:
        raise SearchError(str(err)) from None
    return {**checked, **workers}


def _integer(where: str, value: Any) -> int:
    try:
        return as_int(where, value)
    except GridError as err:
        raise SearchError(str(err)) from None


def _typed_value(where: str, value: Any, kind: Optional[type]) -> Any:
    if kind is int:
        return _integer(where, value)
    if kind is float:
        return _number(where, value)
    if kind is str and not isinstance(value, str):
        raise SearchError(f"{where}: expected a name, got {value!r}")
    number = whole_int(value)
    return number if number is not None and not isinstance(value, bool) else value


def dimensions(spec: SearchSpec, task: Task) -> tuple[Dimension, ...]:
    """The space's dimensions typed against the task, sorted by name (the order of draws and grids).

    Raises:
        SearchError: a dimension the task does not have (``image_size`` where the task trains at the
            dataset's size, a model option its options type lacks), a range over a non-number, a
            value of the wrong type.
    """
    for name in spec.space:
        _check_against_task(str(name), task)
    return tuple(_dimension(str(name), spec.space[name], task) for name in sorted(spec.space))


# ---------------------------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------------------------


def grid_size(dims: Sequence[Dimension]) -> int:
    """How many points the cartesian product of the dimensions' grid values has."""
    return math.prod(len(d.grid_values()) for d in dims)


def sample(dims: Sequence[Dimension], sampling: str, trials: Optional[int], seed: int) -> list[dict[str, Any]]:
    """The trials' points (dimension -> value), the same for the same space, sampling, trials and seed.

    ``grid``: the product in order (the last dimension varying fastest); with fewer trials than
    points, a seeded subset of it kept in that order. ``random``: seeded draws, each point once.

    Raises:
        SearchError: more grid trials than the grid has points, or a space with fewer distinct
            points than random trials.
    """
    rng = random.Random(seed)
    names = [d.name for d in dims]
    if sampling == "grid":
        axes = [d.grid_values() for d in dims]
        size = math.prod(len(a) for a in axes)
        if trials is not None and trials > size:
            raise SearchError(f"search.trials: {trials}, but the grid has {size} points; give at most {size}")
        chosen = range(size) if trials is None else sorted(rng.sample(range(size), trials))
        return [dict(zip(names, _grid_point(axes, i), strict=True)) for i in chosen]
    points: dict[str, dict[str, Any]] = {}
    for _ in range(_DRAWS_PER_TRIAL * (trials or 0)):
        point = {d.name: d.draw(rng) for d in dims}
        points.setdefault(json.dumps(point, sort_keys=True), point)
        if len(points) == trials:
            return list(points.values())
    raise SearchError(
        f"search.trials: {trials} random trials, but the space has only {len(points)} distinct points; draw fewer "
        "trials, widen the space, or use sampling: grid"
    )


def _grid_point(axes: Sequence[Sequence[Any]], index: int) -> tuple[Any, ...]:
    """The product's point at ``index`` (the last axis varying fastest), without building the product."""
    values = []
    for axis in reversed(axes):
        index, at = divmod(index, len(axis))
        values.append(axis[at])
    return tuple(reversed(values))
