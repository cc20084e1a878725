"""The report step's surface (components/surface.py): ``build_report`` reads no config section."""

from components.report.component import build_report
from components.surface import StepOutputs, Surface


def headline(out: StepOutputs) -> str:
    """``report.html, N KiB``."""
    return f"report.html, {out.metadata('report').get('bytes', 0) / 1024:,.0f} KiB"


SURFACES = (
    Surface(
        build_report,
        step_only=frozenset({"benchmark", "validation", "stages_root", "pipeline_root", "run_id", "title"}),
        headline=headline,
    ),
)
