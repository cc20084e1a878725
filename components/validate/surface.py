"""The validate step's surface (components/surface.py): its component against ``ValidateConfig``."""

from components.surface import StepOutputs, Surface
from components.validate.component import validate_dataset
from components.validate.config import ValidateConfig


def headline(out: StepOutputs) -> str:
    """``passed: 0 errors, 1 warning`` (the findings by severity)."""
    m = out.metadata("statistics")
    verdict = "passed" if m.get("passed", True) else "FAILED"
    return f"{verdict}: {m.get('errors', 0):.0f} errors, {m.get('warns', 0):.0f} warnings"


SURFACES = (
    Surface(
        validate_dataset,
        ValidateConfig,
        step_only=frozenset({"stages_root", "pipeline_root", "served_model_name"}),
        headline=headline,
        record="validate",
    ),
)
