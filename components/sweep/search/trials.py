"""A search's trials: each point of the space a checked grid cell with its own key and its price.

Each trial is a grid cell (the pipeline's defaults, the file's fixed settings, then the point), so
the grid's cell task trains it and the grid's tables price it; a setting the task refuses is a
planning error here, not a failed trial later. Plain Python, no TensorFlow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from components.sweep.grid import GridCell, GridError, _options_back, plan_grid
from components.sweep.search.space import OPTION_PREFIX, SearchError, SearchSpec
from trainer import records
from trainer.budget.pricing import PriceTableError, load_price_table, price_in, price_key
from trainer.tasks.base import Task


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
    (``trainer.budget.pricing.price_key``; no accelerator is ``cpu-<this machine's CPUs>``). A cluster of
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


def build_trials(
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
