"""KFP components: the experiment grid (plan, one cell, the tables) and the notebook's GPU-vs-TPU sweep on it.

Thin adapters over ``components.sweep.run`` (the step's logic) and the grid/cell/table modules.
"""

from typing import Optional

from kfp.dsl import HTML, Dataset, Input, Markdown, Metrics, Model, Output

from components.images import project_component


@project_component
def plan_notebook_sweep(
    accelerators: list,
    batch_sizes: list,
    epochs: int,
    steps_per_epoch: int,
    model: str,
) -> list:
    """Checks the notebook's sweep and expands it into one grid cell per accelerator x batch size.

    Args:
        accelerators: entries ``{accelerator, accelerator_type, accelerator_count, strategy}``.
        batch_sizes: global batch sizes.
        epochs: epochs per cell, >= 2 (the first, compiling, one is excluded).
        steps_per_epoch: steps per epoch; 0 for one pass over the training split.
        model: the model builder (mnist_cnn is the notebook's CNN).

    Returns:
        The cells as dicts (``GridCell.to_dict``), the fan-out's items.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()
    from components.sweep.notebook import plan_notebook_cells

    return [c.to_dict() for c in plan_notebook_cells(accelerators, batch_sizes, epochs, steps_per_epoch, model)]


@project_component
def time_training_cell(dataset: Input[Dataset], cell: dict) -> dict:
    """Trains one cell with the trainer and times its epochs, the first (compiling) one excluded.

    Args:
        dataset: the converted dataset (its train split is trained on).
        cell: the cell (``GridCell.to_dict``, from plan_notebook_sweep).

    Returns:
        ``{"accelerator": ..., "results": [one result]}`` (``SweepRun.to_dict``) for the join step.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.sweep.grid import GridCell
    from components.sweep.notebook import run_notebook_cell

    return run_notebook_cell(dataset.path, GridCell.from_dict(cell)).to_dict()


@project_component
def join_sweeps(sweeps: list, report: Output[Markdown], chart: Output[HTML]):
    """Renders the notebook's two tables (epoch time, step time per example) and their charts.

    Args:
        sweeps: the outputs of ``time_training_cell`` (``dsl.Collected`` over the fan-out).
        report: the Markdown tables.
        chart: an HTML page with grouped bar charts (inline SVG).
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.sweep.notebook import render_sweep_html, render_sweep_markdown

    with open(report.path, "w", encoding="utf-8") as f:
        f.write(render_sweep_markdown(sweeps))
    with open(chart.path, "w", encoding="utf-8") as f:
        f.write(render_sweep_html(sweeps))


@project_component
def plan_training_grid(
    grid: list,
    model: str,
    model_options: dict,
    epochs: int,
    steps_per_epoch: int,
    batch_size_per_replica: int,
    learning_rate: float,
    source: str,
    limit_per_split: int,
) -> list:
    """Checks the grid and expands it into one cell per run (repeats apart), each with its key.

    Args:
        grid: the cells (``components.sweep.grid.plan_grid``).
        model: the model builder of cells that name none.
        model_options: its options for cells that give none.
        epochs: for cells that give none.
        steps_per_epoch: for cells that give none; 0 for one pass over the training split.
        batch_size_per_replica: for cells that give none.
        learning_rate: for cells that give none (for a global batch of 128).
        source: the dataset's source (part of each cell's key).
        limit_per_split: the dataset's limit (part of each cell's key).

    Returns:
        The cells as dicts (``GridCell.to_dict``), the fan-out's items.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.sweep.run import plan_cells

    settings = {
        "model": model,
        "model_options": model_options,
        "epochs": epochs,
        "steps_per_epoch": steps_per_epoch,
        "batch_size_per_replica": batch_size_per_replica,
        "learning_rate": learning_rate,
        "source": source,
        "limit_per_split": limit_per_split,
    }
    return [c.to_dict() for c in plan_cells(grid, settings)]


@project_component
def train_grid_cell(
    dataset: Input[Dataset],
    cell: dict,
    model: Output[Model],
    metrics: Output[Metrics],
    rows_root: str = "",
    pipeline_root: str = "",
) -> dict:
    """Trains and evaluates one grid cell; succeeds with ``status: failed`` when the run fails.

    Args:
        dataset: the converted dataset (one for the whole grid: every cell scores the same test split).
        cell: the cell (``GridCell.to_dict``, from plan_training_grid).
        model: the trained model folder.
        metrics: the cell's figures: fit/billed seconds, examples/s and the test metrics.
        rows_root: where the cell's row is written while it runs (local path or gs://); empty for
            ``<pipeline_root>/sweep-rows``.
        pipeline_root: pass ``dsl.PIPELINE_ROOT_PLACEHOLDER``.

    Returns:
        The row (``CellResult.to_dict``).
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.artifacts import checkpoint_uri
    from components.sweep.cell import resolve_rows_root
    from components.sweep.run import run_one_cell

    result = run_one_cell(
        (dataset.path, dataset.uri),
        (model.path, model.uri),
        cell,
        resolve_rows_root(rows_root, pipeline_root),
        checkpoint_uri(model.uri),
    )
    model.metadata.update({"status": result.status, "cell": result.cell.name})
    for name, value in {"fit_s": result.fit_s, "billed_s": result.billed_s, **result.metrics}.items():
        if value is not None:
            metrics.log_metric(name, value)
    return result.to_dict()


@project_component
def join_training_grid(
    grid: list,
    model: str,
    model_options: dict,
    epochs: int,
    steps_per_epoch: int,
    batch_size_per_replica: int,
    learning_rate: float,
    source: str,
    limit_per_split: int,
    report: Output[Markdown],
    chart: Output[HTML],
    rows_root: str = "",
    pipeline_root: str = "",
    price_table: Optional[str] = None,
) -> dict:
    """Builds the grid's tables from the rows the cells wrote, whichever cells finished.

    It runs as the pipeline's exit task: after every cell, failed tasks included. It plans the
    grid again (the same pure function, so the same keys) and reads each cell's row; a cell
    without one, or still ``running``, is a failed row.

    Args:
        grid: the pipeline's grid.
        model: the model builder of cells that name none (the same values as plan_training_grid).
        model_options: its options for cells that give none.
        epochs: for cells that give none.
        steps_per_epoch: for cells that give none; 0 for one pass over the training split.
        batch_size_per_replica: for cells that give none.
        learning_rate: for cells that give none (for a global batch of 128).
        source: the dataset's source (part of each cell's key).
        limit_per_split: the dataset's limit (part of each cell's key).
        report: the Markdown tables.
        chart: the HTML page: tables and the quality-against-time chart.
        rows_root: where the cells wrote their rows; empty for ``<pipeline_root>/sweep-rows``.
        pipeline_root: pass ``dsl.PIPELINE_ROOT_PLACEHOLDER``.
        price_table: a YAML price table over the defaults (a path in the container).

    Returns:
        ``best_quality``, ``fastest``, ``cheapest`` (cell names), ``cells``, ``failed``.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.sweep.cell import resolve_rows_root
    from components.sweep.run import join_grid, plan_cells

    settings = {
        "model": model,
        "model_options": model_options,
        "epochs": epochs,
        "steps_per_epoch": steps_per_epoch,
        "batch_size_per_replica": batch_size_per_replica,
        "learning_rate": learning_rate,
        "source": source,
        "limit_per_split": limit_per_split,
    }
    tables = join_grid(plan_cells(grid, settings), resolve_rows_root(rows_root, pipeline_root), price_table)
    with open(report.path, "w", encoding="utf-8") as f:
        f.write(tables.markdown)
    with open(chart.path, "w", encoding="utf-8") as f:
        f.write(tables.html)
    return tables.best
