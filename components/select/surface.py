"""The select step's surface (components/surface.py): its component against ``SelectConfig``."""

from components.select.component import select_images
from components.select.config import SelectConfig
from components.surface import StepOutputs, Surface


def headline(out: StepOutputs) -> str:
    """``picked 100 of 5,000 images by margin (120 already labelled)``."""
    r = out.parameters.get("Output") or {}
    labelled = f" ({r.get('labelled', 0):,.0f} already labelled)" if r.get("labelled") else ""
    return f"picked {r.get('picked', 0):,.0f} of {r.get('pool', 0):,.0f} images by {r.get('strategy', '?')}{labelled}"


SURFACES = (Surface(select_images, SelectConfig, step_only=frozenset({"pipeline_root"}), headline=headline),)
