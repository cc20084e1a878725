"""The sweep step's settings: the training grid's defaults for cells that give none, and its data.

One record where the grid's plan, its join, the command line and the pipeline spelled the same
dict three times; the plan and the join must compute the same cell keys from it.
No TensorFlow, no kfp.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

from trainer.configbase import ConfigBase


@dataclasses.dataclass(frozen=True)
class SweepConfig(ConfigBase):
    """The training grid's settings (``sweep:`` in a whole-run file).

    Attributes:
        model: the model builder of cells that name none.
        source: the dataset converted once for every cell (part of each cell's key).
        model_options: the model's options for cells that give none.
        epochs: epochs for cells that give none.
        steps_per_epoch: steps per epoch for cells that give none; 0 for one pass.
        batch_size_per_replica: for cells that give none.
        learning_rate: for a global batch of 128 (the trainer scales it with the global batch).
        limit_per_split: keep at most this many images per split; 0 keeps all (part of each key).
    """

    _section: ClassVar[str] = "sweep."

    model: str
    source: str
    model_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    epochs: int = 3
    steps_per_epoch: int = 0
    batch_size_per_replica: int = 128
    learning_rate: float = 1e-3
    limit_per_split: int = 0

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The settings' names: a pipeline passes its parameters of these names on as they are."""
        return tuple(f.name for f in dataclasses.fields(cls))

    def grid_defaults(self) -> dict[str, Any]:
        """The values of a cell's fields for cells that leave them out."""
        names = ("model", "epochs", "steps_per_epoch", "batch_size_per_replica", "learning_rate")
        return {**{n: getattr(self, n) for n in names}, "model_options": dict(self.model_options)}

    def key_context(self) -> dict[str, Any]:
        """What else the cells depend on (the data): part of each key, so two grids on other data share no rows."""
        return {"source": self.source, "limit_per_split": self.limit_per_split}
