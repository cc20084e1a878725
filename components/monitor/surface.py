"""The monitor step's surface (components/surface.py): ``monitor_stages`` against ``MonitorConfig``."""

from components.monitor.component import fail_if_broken, monitor_stages
from components.serving.config import MonitorConfig
from components.surface import Surface

SURFACES = (
    Surface(
        monitor_stages, MonitorConfig, step_only=frozenset({"pipeline_root"}), own_default=frozenset({"stages_root"})
    ),
    Surface(fail_if_broken),
)
