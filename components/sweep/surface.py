"""The sweep step's surface (components/surface.py): its components take the grid's and the search's own parameters."""

from components.surface import Surface
from components.sweep.component import (
    join_search,
    join_sweeps,
    join_training_grid,
    plan_notebook_sweep,
    plan_search,
    plan_training_grid,
    select_search_rung,
    time_training_cell,
    train_grid_cell,
    train_search_trial,
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
        plan_search,
        train_search_trial,
        select_search_rung,
        join_search,
    )
)
