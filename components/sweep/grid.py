"""A grid of training runs: the cells a sweep fans out over, checked and expanded once.

A grid is a list of cell dicts (a pipeline parameter). :func:`plan_grid` validates every cell,
folds in the grid's defaults, expands ``repeats`` into one cell per repeat (each its own fan-out
task and its own cache entry) and gives each a stable ``key``: a hash of what the cell trains on,
so a re-run of the same grid finds the same keys (KFP's cache answers the cell, and the join finds
its row under the key). Shared by the ``sweep`` pipeline (cells) and ``gpu_vs_tpu`` (its
accelerator entries are the accelerator part of a cell). Plain Python, no TensorFlow.

Ints inside dicts arrive as floats under kfp.local (``{"epochs": 3}`` comes with ``3.0``): every
integer field is turned back here (a cell is a strict record, ``trainer.records``), and a float
that is not whole is an error.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Optional

from trainer import records
from trainer.records import whole_int


class GridError(ValueError):
    """A grid or one of its cells is malformed."""


# accelerator_type prefix -> the strategy the trainer must find (a demand: a TPU cell that silently
# fell back to CPU fails instead of reporting CPU numbers).
_STRATEGY_OF = (("cloud-tpus.google.com/", "tpu"), ("google.com/tpu", "tpu"), ("nvidia.com/gpu", "gpu"))


def _integer(value: Any) -> Optional[int]:
    """An int from an int, a whole float (kfp.local's dict contents) or a digit string; else None."""
    number = whole_int(value)
    if number is None and isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    return number


def as_int(where: str, value: Any) -> int:
    """An integer from an int, a whole float (kfp.local's dict contents) or a digit string."""
    number = _integer(value)
    if number is None:
        raise GridError(f"{where}: expected an integer, got {value!r}")
    return number


def _as_float(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GridError(f"{where}: expected a number, got {value!r}")
    return float(value)


def _opt_int(where: str, value: Any) -> Optional[int]:
    return None if value is None else as_int(where, value)


def _ints_back(value: Any) -> Any:
    """Whole floats back to ints inside model options (kfp.local turned them into floats)."""
    if isinstance(value, float) and whole_int(value) is not None:
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _ints_back(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints_back(v) for v in value]
    return value


def _options_back(value: Any) -> dict[str, Any]:
    """A cell's model options read back: ints inside them are ints again."""
    if not isinstance(value, Mapping):
        raise records.RecordError(f"expected a mapping, got {value!r}")
    return _ints_back(value)


def strategy_for(accelerator_type: str) -> str:
    """The strategy a cell's resource implies: ``tpu``, ``gpu``, or ``cpu`` for none."""
    if not accelerator_type:
        return "cpu"
    for prefix, strategy in _STRATEGY_OF:
        if accelerator_type.startswith(prefix):
            return strategy
    return "auto"


def _count_text(value: Any) -> str:
    """A resource count as the digit string the resource placeholder takes (from ``8``, ``8.0`` or ``"8"``)."""
    number = _integer(value)
    if number is None:
        raise records.RecordError(f"expected an integer, got {value!r}")
    return str(number)


# The keys of a cell that say what it runs on (AcceleratorEntry's).
ACCELERATOR_KEYS = ("accelerator", "accelerator_type", "accelerator_count", "strategy")


@dataclasses.dataclass(frozen=True)
class AcceleratorEntry(records.Record):
    """What a cell runs on: the name in tables (and the price table key), the pod's request.

    Attributes:
        accelerator: the name in tables and the price table key (``tpu-v3-8``, ``v100``, ``cpu-8``).
        accelerator_type: the pod's accelerator resource (``cloud-tpus.google.com/v3``,
            ``nvidia.com/gpu``, ``google.com/tpu``), empty for none.
        accelerator_count: how many, as the digit string the resource placeholder takes (read from
            a number too).
        strategy: ``tpu``/``gpu``/``cpu``/``auto`` for ``trainer.distribute.get_strategy``; empty
            for the one the resource implies (:func:`strategy_for`).
    """

    _error = GridError

    accelerator: str
    accelerator_type: str = ""
    accelerator_count: str = records.field(default="0", load=_count_text)
    strategy: Literal["", "auto", "tpu", "gpu", "cpu"] = ""

    def __post_init__(self) -> None:
        if not self.accelerator:
            raise GridError("'accelerator' (the name in tables and the price key) must not be empty")
        if bool(self.accelerator_type) != (int(self.accelerator_count) > 0):
            raise GridError(
                f"accelerator_type {self.accelerator_type!r} with accelerator_count {self.accelerator_count}: give "
                "both (e.g. cloud-tpus.google.com/v3 and 8) or neither (CPU)"
            )
        if not self.strategy:
            object.__setattr__(self, "strategy", strategy_for(self.accelerator_type))

    @classmethod
    def of_cell(cls, data: Mapping[str, Any], where: str) -> AcceleratorEntry:
        """The entry of a cell's (or an ``accelerators_to_try`` entry's) accelerator keys; None is unset."""
        return cls.from_dict({k: data[k] for k in ACCELERATOR_KEYS if data.get(k) is not None}, f"{where}.")


# The fields a cell may give; the grid's defaults fill the ones it leaves out.
_CELL_KEYS = frozenset(
    {
        "name",
        "accelerator",
        "accelerator_type",
        "accelerator_count",
        "strategy",
        "image_size",
        "epochs",
        "batch_size_per_replica",
        "global_batch_size",
        "steps_per_epoch",
        "learning_rate",
        "model",
        "model_options",
        "repeats",
        "seed",
        "workers",
    }
)


@dataclasses.dataclass(frozen=True)
class GridCell(records.Record):
    """One training run of a grid, every field resolved; its JSON leaves the fields that are None out.

    (kfp.local cannot pass a None inside a dict to a nested pipeline; a missing key reads back as None.)

    Attributes:
        key: a hash of everything the run depends on but the dataset (the row's file name).
        name: the cell's name in tables (repeats share it).
        accelerator: what it runs on (:class:`AcceleratorEntry`), flat.
        accelerator_type: the pod's accelerator resource, empty for none.
        accelerator_count: how many, a digit string.
        strategy: the trainer's accelerator demand.
        model: the model builder.
        image_size: the detector's input side (``model_options.image_size``); None for the model's.
        epochs: training epochs.
        batch_size_per_replica: examples per replica per step.
        global_batch_size: examples per step over all replicas; None for per replica x replicas.
        steps_per_epoch: steps per epoch; None for one pass over the training split.
        learning_rate: for a global batch of 128, scaled with the global batch by the trainer.
        model_options: the model builder's options (image_size folded in).
        repeat: 0-based repeat index.
        repeats: how many repeats the cell asked for.
        seed: the training seed (the cell's seed plus the repeat).
        workers: pods training together (MultiWorkerMirroredStrategy), each with the cell's
            accelerator request; 1 trains in the cell's own pod. The price key names the whole
            cluster (``v100-x5``: five V100 nodes).
    """

    _error = GridError
    _what = "grid cell"
    _omit_empty = ("image_size", "global_batch_size", "steps_per_epoch")

    key: str
    name: str
    accelerator: str
    accelerator_type: str
    accelerator_count: str
    strategy: str
    model: str
    image_size: Optional[int]
    epochs: int
    batch_size_per_replica: int
    global_batch_size: Optional[int]
    steps_per_epoch: Optional[int]
    learning_rate: float
    model_options: dict[str, Any] = records.field(load=_options_back)
    repeat: int
    repeats: int
    seed: int
    workers: int = 1

    @property
    def group(self) -> str:
        """The cell's identity without the repeat: repeats of one cell share it."""
        return self.name

    def train_fields(self) -> dict[str, Any]:
        """The TrainConfig fields this cell sets (``trainer.config.TrainConfig.from_dict``)."""
        options = dict(self.model_options)
        if self.image_size is not None:
            options["image_size"] = self.image_size
        return {
            "model": self.model,
            "epochs": self.epochs,
            "steps_per_epoch": self.steps_per_epoch,
            "batch_size_per_replica": self.batch_size_per_replica,
            "global_batch_size": self.global_batch_size,
            "learning_rate": self.learning_rate,
            "accelerator": self.strategy,
            "seed": self.seed,
            "model_options": options,
            "workers": self.workers,
        }


def _default_name(entry: AcceleratorEntry, image_size, epochs, batch, global_batch) -> str:
    parts = [entry.accelerator]
    if image_size is not None:
        parts.append(f"{image_size}px")
    parts.append(f"{epochs}ep")
    parts.append(f"gb{global_batch}" if global_batch is not None else f"b{batch}")
    return " ".join(parts)


def _key(fields: Mapping[str, Any], context: Mapping[str, Any]) -> str:
    blob = json.dumps({"cell": fields, "context": context}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def plan_grid(
    grid: Sequence[Mapping[str, Any]],
    defaults: Optional[Mapping[str, Any]] = None,
    context: Optional[Mapping[str, Any]] = None,
) -> list[GridCell]:
    """Validates a grid and expands it into one :class:`GridCell` per run.

    Args:
        grid: the cells; each gives ``accelerator`` (and for an accelerator, ``accelerator_type``
            and ``accelerator_count``) and any of ``name``, ``strategy``, ``image_size``,
            ``epochs``, ``batch_size_per_replica``, ``global_batch_size``, ``steps_per_epoch``,
            ``learning_rate``, ``model``, ``model_options``, ``repeats``, ``seed``, ``workers``.
        defaults: the values of those fields for cells that leave them out (the pipeline's
            parameters: model, epochs, ...).
        context: what else the runs depend on (the dataset's source and limit): part of each key,
            so two grids on different data never share rows.

    Returns:
        The cells in grid order, repeats next to each other.

    Raises:
        GridError: an empty grid, a cell that is not a mapping, an unknown field, a bad value, or two
            cells with the same name.
    """
    if not isinstance(grid, Sequence) or isinstance(grid, (str, bytes)) or not grid:
        raise GridError(f"grid: expected a non-empty list of cells (dicts), got {grid!r}")
    defaults = dict(defaults or {})
    unknown_defaults = sorted(set(defaults) - _CELL_KEYS)
    if unknown_defaults:
        raise GridError(f"grid defaults: unknown field(s) {unknown_defaults}; known: {sorted(_CELL_KEYS)}")
    cells: list[GridCell] = []
    seen: set[str] = set()
    for index, raw in enumerate(grid):
        where = f"grid cell {index}"
        name, repeats, fields = _resolve_cell(where, raw, defaults)
        if name in seen:
            raise GridError(f"{where}: the name {name!r} is used by an earlier cell; names must be unique")
        seen.add(name)
        for repeat in range(repeats):
            # Each repeat is its own run (its own seed, so its own key and cache entry).
            run = {**fields, "seed": fields["seed"] + repeat}
            # One worker is the default: left out of the key, so a one-pod cell keeps its key (and cache).
            keyed = {k: v for k, v in run.items() if not (k == "workers" and v == 1)}
            cells.append(GridCell(key=_key(keyed, context or {}), name=name, repeat=repeat, repeats=repeats, **run))
    return cells


def _resolve_cell(where: str, raw: Any, defaults: Mapping[str, Any]) -> tuple[str, int, dict[str, Any]]:
    """One cell checked, the defaults folded in: its name, repeats and GridCell fields (the base seed)."""
    if not isinstance(raw, Mapping):
        raise GridError(f"{where}: expected a mapping, got {raw!r}")
    unknown = sorted(set(raw) - _CELL_KEYS)
    if unknown:
        raise GridError(f"{where}: unknown field(s) {unknown}; a cell has {sorted(_CELL_KEYS)}")
    data = {**defaults, **{k: v for k, v in raw.items() if v is not None}}
    entry = AcceleratorEntry.of_cell(data, where)
    epochs = as_int(f"{where}.epochs", data.get("epochs", 3))
    batch = as_int(f"{where}.batch_size_per_replica", data.get("batch_size_per_replica", 128))
    global_batch = _opt_int(f"{where}.global_batch_size", data.get("global_batch_size"))
    repeats = as_int(f"{where}.repeats", data.get("repeats", 1))
    workers = as_int(f"{where}.workers", data.get("workers", 1))
    image_size, options = _image_size_and_options(where, data)
    if min(epochs, batch, repeats, workers) < 1 or (image_size is not None and image_size < 1):
        raise GridError(
            f"{where}: epochs ({epochs}), batch_size_per_replica ({batch}), repeats ({repeats}), workers "
            f"({workers}) and image_size ({image_size}) must be >= 1"
        )
    name = str(data.get("name") or _default_name(entry, image_size, epochs, batch, global_batch))
    fields = {
        "accelerator": entry.accelerator,
        "accelerator_type": entry.accelerator_type,
        "accelerator_count": entry.accelerator_count,
        "strategy": entry.strategy,
        "model": str(data.get("model", "mnist_cnn")),
        "image_size": image_size,
        "epochs": epochs,
        "batch_size_per_replica": batch,
        "global_batch_size": global_batch,
        "steps_per_epoch": _opt_int(f"{where}.steps_per_epoch", data.get("steps_per_epoch") or None),
        "learning_rate": _as_float(f"{where}.learning_rate", data.get("learning_rate", 1e-3)),
        "model_options": options,
        "seed": as_int(f"{where}.seed", data.get("seed", 0)),
        "workers": workers,
    }
    return name, repeats, fields


def _image_size_and_options(where: str, data: Mapping[str, Any]) -> tuple[Optional[int], dict[str, Any]]:
    """The cell's image size and its model options without it (given in either place, not both)."""
    image_size = _opt_int(f"{where}.image_size", data.get("image_size"))
    options = data.get("model_options") or {}
    if not isinstance(options, Mapping):
        raise GridError(f"{where}.model_options: expected a mapping, got {options!r}")
    options = _ints_back(dict(options))
    if "image_size" in options:
        # One place for the image size, so the table's column and the key see the same value.
        given = as_int(f"{where}.model_options.image_size", options.pop("image_size"))
        if image_size is not None and given != image_size:
            raise GridError(f"{where}: image_size {image_size} and model_options.image_size {given} differ; give one")
        image_size = given
    return image_size, options
