"""The evaluate step's surface (components/surface.py): ``evaluate_model`` against ``EvaluateConfig``."""

from components.evaluate.component import evaluate_model
from components.surface import StepOutputs, Surface
from trainer.config import EvaluateConfig
from trainer.tasks import task_types


def headline(out: StepOutputs) -> str:
    """The task's headline metric, then the gate's first reason."""
    blessing = out.metadata("blessing")
    task_type = task_types().get(blessing.get("task") or out.task or "")
    label, value = task_type.headline(out.metadata("metrics")) if task_type is not None else ("", None)
    score = f"{label.removeprefix('test ')} {value:.4f}, " if value is not None else ""
    reasons = blessing.get("reasons", [])
    return score + (reasons[0] if reasons else f"blessed: {out.parameters.get('Output')}")


SURFACES = (
    Surface(
        evaluate_model,
        EvaluateConfig,
        step_only=frozenset({"stages_root", "pipeline_root", "served_model_name"}),
        headline=headline,
        record="evaluate",
    ),
)
