"""A search space's dimensions typed against the task, and the trials' points drawn from them.

:func:`dimensions` checks the space against the task (a dimension it does not have is an error
naming the ones it has) and types every value (ints stay ints, whatever kfp.local made of them);
:func:`sample` draws the trials' points: the grid's product, or seeded random draws. Plain Python,
no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

from components.sweep.grid import ACCELERATOR_KEYS, AcceleratorEntry, GridError, as_int
from components.sweep.search.space import (
    DIMENSIONS,
    FLOAT_DIMENSIONS,
    INT_DIMENSIONS,
    OPTION_PREFIX,
    SearchError,
    SearchSpec,
    as_number,
)
from trainer.records import whole_int
from trainer.tasks.base import Task

# An accelerator of the space: what it runs on, and how many pods train together on it (a cluster
# is priced under its own name: ``v100-x5``).
ACCELERATOR_ENTRY_KEYS = (*ACCELERATOR_KEYS, "workers")
# Random draws retry a point already drawn this many times per trial before giving up.
_DRAWS_PER_TRIAL = 50

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
        return as_number(where, value)
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
