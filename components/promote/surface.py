"""The promote step's surface (components/surface.py): its components against ``PromoteConfig``."""

from components.promote.component import promote_model, promote_version, rollback_stage
from components.serving.config import PromoteConfig
from components.surface import StepOutputs, Surface


def headline(out: StepOutputs) -> str:
    """``<stage> serves version N`` (``as <format>`` for a portable format, ``already served`` when it
    changed nothing, ``contract replaced`` when it replaced what the stage served under the name:
    ``allow_contract_change``).
    """
    r = out.metadata("report")
    form = r.get("serving_format")
    same = f" as {form}" if form and form != "saved_model" else ""
    same += " (already served)" if r.get("no_op") else ""
    same += " (contract replaced)" if r.get("contract_change") else ""
    return f"{r.get('stage', '?')} serves version {r.get('version', out.parameters.get('Output', '?'))}{same}"


_PROMOTE = {
    "config": PromoteConfig,
    "step_only": frozenset({"pipeline_root", "run_id", "source_stage", "version"}),
    "own_default": frozenset({"stages_root"}),  # "": <pipeline root>/stages
}
SURFACES = (
    Surface(promote_model, headline=headline, **_PROMOTE),
    Surface(rollback_stage, **_PROMOTE),
    Surface(promote_version, **_PROMOTE),
)
