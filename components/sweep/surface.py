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
from components.sweep.config import SweepConfig

# The components that train: a hub's weights, and a budget's time, as the train step's.
TRAINING = (time_training_cell, train_grid_cell, train_search_trial)

# The grid's plan and join repeat SweepConfig's fields (``sweep:`` in a whole-run file).
GRID = {
    plan_training_grid: frozenset({"grid"}),
    join_training_grid: frozenset({"grid", "report", "chart", "rows_root", "pipeline_root", "price_table"}),
}

SURFACES = tuple(
    Surface(
        c,
        SweepConfig if c in GRID else None,
        step_only=GRID.get(c, frozenset()),
        hub_secret=c in TRAINING,
        long_running=c in TRAINING,
    )
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
