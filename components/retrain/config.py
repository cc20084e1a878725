"""The retrain step's configuration: which served model, which source, which budget.

Imports neither TensorFlow nor kfp: the command line's ``--help`` stays instant.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import ClassVar, Optional

from trainer.budget.limits import BudgetError, Limits
from trainer.config import ConfigBase

# The stages whose model a retraining starts from and compares with, in that order.
BASE_STAGES = ("prod", "staging")
COST_PREFIX = "$"
# How far a blessed candidate may go on its own, in the stages' order.
PROMOTE_TO = ("demo", "staging", "prod")


def split_budget(retrain_budget: str) -> tuple[str, str]:
    """``(time_budget, cost_budget)`` of the train step from a retrain budget (``10m``; ``$2.50`` or ``2.50``)."""
    text = retrain_budget.strip()
    if text.startswith(COST_PREFIX):
        return "auto", text[len(COST_PREFIX) :].strip()
    if re.fullmatch(r"\d+(\.\d*)?|\.\d+", text):  # a number without a unit: dollars (a time has one)
        return "auto", text
    return text or "auto", "auto"


@dataclasses.dataclass(frozen=True)
class RetrainConfig(ConfigBase):
    """One decision of a scheduled retraining (docs/retraining.md).

    Attributes:
        served_model_name: the model name the stages serve (``classifier``, ``detector``): the task,
            the model and the data it was trained on are that model's.
        source: the images to look at: a folder, ``gs://`` prefix, CSV/JSONL list, COCO file, any
            source the convert step reads; None: the source prod's (else staging's) model was
            trained on.
        stages_root: the stage store; None: ``<pipeline root>/stages``.
        drift: a ``drift.json`` (or the folder holding them: the latest by name) of the served
            model's traffic; None: the newest under ``<stages root>/prod/drift/<model name>/``, if any.
        retrain_budget: what the retraining's train step may spend: a time (``10m``, ``2h``) or
            US dollars at its accelerator's price (``2.50`` or ``$2.50``).
        value_thresholds: the gate's metric -> bound; empty: the served model's task's defaults.
        change_thresholds: the gate's largest change against prod per metric; empty: the task's
            defaults (classification: ``{accuracy: -0.01}``).
        promote_to: how far a blessed candidate goes on its own: ``demo`` (the default: staging
            and prod stay manual, the promote pipeline), ``staging``, or ``prod`` (through staging).
    """

    _section: ClassVar[str] = "retrain."

    served_model_name: str = "classifier"
    source: Optional[str] = None
    stages_root: Optional[str] = None
    drift: Optional[str] = None
    retrain_budget: str = "10m"
    value_thresholds: Mapping[str, float] = dataclasses.field(default_factory=dict)
    change_thresholds: Mapping[str, float] = dataclasses.field(default_factory=dict)
    promote_to: str = "demo"

    def validate(self) -> None:
        if not self.served_model_name or "/" in self.served_model_name:
            self._fail(
                "served_model_name", f"give the name a stage serves (classifier), got {self.served_model_name!r}"
            )
        if self.promote_to not in PROMOTE_TO:
            self._fail(
                "promote_to", f"expected one of {list(PROMOTE_TO)} (how far a candidate goes), got {self.promote_to!r}"
            )
        time_budget, cost_budget = split_budget(self.retrain_budget)
        if time_budget == "auto" and cost_budget == "auto":
            self._fail("retrain_budget", "is empty; give a time (10m, 2h) or dollars ($2.50): a retraining is budgeted")
        if time_budget.startswith("<="):
            self._fail("retrain_budget", f"give a plain budget (10m), not a cap ({self.retrain_budget!r})")
        try:
            # The accelerator's price is known to the train step only: any price reads the text here.
            Limits.parse(time_budget, cost_budget, price=lambda: (None, 1.0), section="retrain.")
        except BudgetError as err:
            why = str(err).split(": ", 1)[-1]
            self._fail("retrain_budget", f"{why}; a retraining needs at least one evaluation interval")
