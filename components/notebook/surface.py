"""The notebook step's surface (components/surface.py): ``run_notebook`` takes its own parameters."""

from components.notebook.component import run_notebook
from components.surface import Surface

# A user's notebook may download from a hub, and runs up to its timeout_s.
SURFACES = (Surface(run_notebook, hub_secret=True, long_running=True),)
