"""The sweep step's surface (components/surface.py): its components take the grid's own parameters."""

from components.surface import Surface
from components.sweep.component import (
    join_sweeps,
    join_training_grid,
    plan_notebook_sweep,
    plan_training_grid,
    time_training_cell,
    train_grid_cell,
)

SURFACES = tuple(
    Surface(c)
    for c in (
        plan_notebook_sweep,
        time_training_cell,
        join_sweeps,
        plan_training_grid,
        train_grid_cell,
        join_training_grid,
    )
)
