"""The export step's surface (components/surface.py): ``export_model`` against ``ExportConfig``."""

from components.export.component import export_model
from components.export.config import ExportConfig
from components.surface import StepOutputs, Surface


def headline(out: StepOutputs) -> str:
    """The formats that passed, then one line per format (passed or refused, the figure, images per dollar)."""
    from trainer.export.formats import ExportRow, line

    record = out.parameters.get("Output") or {}
    rows = [ExportRow.from_dict(r) for r in record.get("rows", [])]
    if not rows:
        return record.get("note") or "no export"
    passed = record.get("passed") or []
    each = [f"   {line(r, record['headline'])}" for r in rows if r.status != "baseline"]
    return "\n".join([f"passed: {', '.join(passed) or 'none'} (best images per dollar first)", *each])


SURFACES = (Surface(export_model, ExportConfig, step_only=frozenset({"blessed"}), headline=headline),)
