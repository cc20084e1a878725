"""The notebook step's surface (components/surface.py): ``run_notebook`` takes its own parameters."""

from components.notebook.component import run_notebook
from components.surface import Surface

SURFACES = (Surface(run_notebook),)
