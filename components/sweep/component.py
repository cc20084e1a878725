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
    from components.sweep.config import SweepConfig
    from components.sweep.run import plan_cells

    settings = SweepConfig(
        model=model,
        source=source,
        model_options=model_options,
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        batch_size_per_replica=batch_size_per_replica,
        learning_rate=learning_rate,
        limit_per_split=limit_per_split,
    )
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
    from components.sweep.config import SweepConfig
    from components.sweep.run import join_grid, plan_cells

    settings = SweepConfig(
        model=model,
        source=source,
        model_options=model_options,
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        batch_size_per_replica=batch_size_per_replica,
        learning_rate=learning_rate,
        limit_per_split=limit_per_split,
    )
    tables = join_grid(plan_cells(grid, settings), resolve_rows_root(rows_root, pipeline_root), price_table)
    with open(report.path, "w", encoding="utf-8") as f:
        f.write(tables.markdown)
    with open(chart.path, "w", encoding="utf-8") as f:
        f.write(tables.html)
    return tables.best


@project_component
def plan_search(
    search: dict,
    model: str,
    model_options: dict,
    batch_size_per_replica: int,
    learning_rate: float,
    source: str,
    limit_per_split: int,
    rows_root: str = "",
    pipeline_root: str = "",
    price_table: Optional[str] = None,
    rungs: int = 3,
) -> list:
    """Plans a search (its trials, rungs and worst-case cost) before any accelerator is asked for.

    Args:
        search: the search file's mapping (docs/sweep.md, "Search").
        model: the model builder of trials that name none.
        model_options: its options for trials that give none.
        batch_size_per_replica: for trials that give none.
        learning_rate: for trials that give none (for a global batch of 128).
        source: the dataset's source (part of each trial's key).
        limit_per_split: the dataset's limit (part of each trial's key).
        rows_root: where searches keep their trials; empty for ``<pipeline_root>/sweep-rows``.
        pipeline_root: pass ``dsl.PIPELINE_ROOT_PLACEHOLDER``.
        price_table: a YAML price table over the defaults (a path in the container).
        rungs: the rungs the pipeline was compiled with (the file must ask for as many).

    Returns:
        The first rung's trials, the fan-out's items.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.sweep.cell import resolve_rows_root
    from components.sweep.search.folder import plan_and_record, search_settings
    from components.sweep.search.plan import describe_plan
    from components.sweep.search.run import fan_out_items

    defaults, context = search_settings(
        model, model_options, batch_size_per_replica, learning_rate, source, limit_per_split
    )
    root = resolve_rows_root(rows_root, pipeline_root)
    plan, folder = plan_and_record(search, defaults, context, root, price_table or None, rungs)
    print(describe_plan(plan), flush=True)
    return fan_out_items(plan, folder, [t.key for t in plan.trials])


@project_component
def train_search_trial(dataset: Input[Dataset], trial: dict, rung: int, model: Output[Model]) -> dict:
    """Trains one trial to the rung's stop from its own checkpoints and scores it; succeeds when it fails.

    Args:
        dataset: the converted dataset (one for the whole search: every trial scores the same test split).
        trial: the trial (``key``, ``folder``: from the plan or the selection).
        rung: the rung (0 for the first).
        model: the model this rung exports (the last rung's is the trial's trained model).

    Returns:
        The trial's row after this rung (``TrialResult.to_dict``) and its ``folder``.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.sweep.search.run import run_trial
    from trainer.budget.layout import process_started_at

    result = run_trial(
        (dataset.path, dataset.uri), (model.path, model.uri), trial["folder"], trial["key"], int(rung),
        process_started_at(),
    )  # fmt: skip
    model.metadata.update({"status": result.status, "trial": result.key, "rung": result.rung})
    print(
        f"trial {result.key} rung {result.rung}: {result.status}"
        + (f", quality {result.quality:.4f}" if result.quality is not None else "")
        + (f" ({result.reason})" if result.reason else ""),
        flush=True,
    )
    return {**result.to_dict(), "folder": trial["folder"]}


@project_component
def select_search_rung(rows: list, rung: int) -> list:
    """Ranks a rung's trials by the objective and promotes the best 1/eta to the next rung.

    It reads the rows the trials wrote (a trial without one is not promoted).

    Args:
        rows: the rung's trial outputs (``dsl.Collected``): they name the search's folder.
        rung: the rung that ran.

    Returns:
        The next rung's trials, the fan-out's items (empty when none is promoted).
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.sweep.search.run import select

    folders = sorted({r["folder"] for r in rows})
    if not folders:
        print(f"rung {int(rung)}: no trial finished; nothing to promote", flush=True)
        return []
    chosen = select(folders[0], int(rung))
    print(f"rung {int(rung)}: {len(chosen)} trial(s) promoted: {', '.join(t['key'] for t in chosen)}", flush=True)
    return chosen


@project_component
def join_search(
    search: dict,
    model: str,
    model_options: dict,
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
    """The search's table, frontiers, pick and savings from the rows its trials wrote (the exit task).

    It plans the search again (the same pure function, so the same folder) and reads every trial's
    latest row, so it runs whichever rungs finished.

    Args:
        search: the search file's mapping (as plan_search).
        model: as plan_search.
        model_options: as plan_search.
        batch_size_per_replica: as plan_search.
        learning_rate: as plan_search.
        source: as plan_search.
        limit_per_split: as plan_search.
        report: the Markdown table and frontiers.
        chart: the HTML page with the frontier charts.
        rows_root: as plan_search.
        pipeline_root: pass ``dsl.PIPELINE_ROOT_PLACEHOLDER``.
        price_table: as plan_search.

    Returns:
        ``search.json``'s content: the pick (its settings in ``best.yaml`` beside it), the frontiers,
        the savings, every trial.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.sweep.cell import resolve_rows_root
    from components.sweep.search.folder import plan_and_record, search_settings
    from components.sweep.search.page import render_html, render_markdown
    from components.sweep.search.run import join, record

    defaults, context = search_settings(
        model, model_options, batch_size_per_replica, learning_rate, source, limit_per_split
    )
    _, folder = plan_and_record(
        search, defaults, context, resolve_rows_root(rows_root, pipeline_root), price_table or None
    )
    outcome = join(folder)
    with open(report.path, "w", encoding="utf-8") as f:
        f.write(render_markdown(outcome))
    with open(chart.path, "w", encoding="utf-8") as f:
        f.write(render_html(outcome))
    for line in outcome.notes:
        print(f"note: {line}", flush=True)
    return {"folder": folder, **record(outcome)}
