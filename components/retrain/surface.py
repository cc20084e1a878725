"""The retrain step's surface (components/surface.py): its component against ``RetrainConfig``."""

from components.retrain.component import decide_retrain
from components.retrain.config import RetrainConfig
from components.surface import StepOutputs, Surface


def headline(out: StepOutputs) -> str:
    """The decision's reason: ``nothing to do: ... and no drift alarm``."""
    return str(out.parameters.get("reason") or out.metadata("decision").get("reason") or "")


SURFACES = (Surface(decide_retrain, RetrainConfig, step_only=frozenset({"pipeline_root"}), headline=headline),)
