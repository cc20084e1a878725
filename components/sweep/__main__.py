r"""Command line: ``python -m components.sweep {grid,search,notebook,join} ...`` (no Kubeflow needed).

grid       the experiment grid on this machine, one cell after the other: every cell of a YAML
           grid file trained and scored on the dataset's test split, rows under --rows-root,
           then the tables: report.md, chart.html, best.json.
search     a search file's successive halving on this machine, one trial after the other (or
           --dry-run: its plan, priced): report.md, chart.html, search.json, best.yaml.
notebook   the GPU-vs-TPU notebook's training sweep on this machine: sweep.json, report.md, chart.html.
join       joins sweep.json files (one per accelerator) into the notebook's two tables:
           report.md, chart.html.

Examples::

    python -m components.sweep grid --grid grid.yaml --dataset data/shapes --output-dir out/grid
    python -m components.sweep search --search search.yaml --dataset data/fmnist --output-dir out/search
    python -m components.sweep notebook --dataset data/fmnist --output-dir out/sweep-cpu \
        --name cpu --batch-sizes 256 512 1024 --epochs 3
    python -m components.sweep join out/sweep-*/sweep.json --output-dir out/sweep
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from components.cli import EXIT_OK, add_config_flags, check_folder, fail, flags_to_fields, read_json_file, write_files
from trainer.config import ConfigError, TrainConfig
from trainer.runtime import configure_tensorflow_env

GRID_SETTINGS = ("model", "epochs", "steps_per_epoch", "batch_size_per_replica", "learning_rate")
DATASET_HINT = "give the folder the convert step wrote (dataset.json inside)"


def _grid_parser(sub: argparse._SubParsersAction) -> None:
    g = sub.add_parser("grid", help="train and score every cell of a grid file here, then its tables")
    g.add_argument("--grid", required=True, help="a YAML list of cells (docs/sweep.md)")
    g.add_argument("--dataset", required=True, help="the dataset folder every cell trains on and is scored on")
    g.add_argument("--output-dir", required=True, help="where report.md, chart.html, best.json and models/ go")
    g.add_argument("--rows-root", help="where the cells' rows go (default <output-dir>/rows)")
    # TrainConfig's flags, for the cells that give none of these settings.
    add_config_flags(g, TrainConfig, include=GRID_SETTINGS)
    g.add_argument("--price-table", help="a YAML price table over the defaults")


def _search_parser(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("search", help="a search by successive halving here, one trial after the other")
    s.add_argument("--search", required=True, help="a search file (docs/sweep.md, 'Search')")
    s.add_argument("--dataset", required=True, help="the dataset folder every trial trains on and is scored on")
    s.add_argument("--output-dir", required=True, help="where report.md, chart.html, search.json and models/ go")
    s.add_argument(
        "--rows-root", help="where the search keeps its plan, checkpoints and rows (default <output-dir>/rows)"
    )
    s.add_argument("--dry-run", action="store_true", help="print the plan, priced, and train nothing")
    add_config_flags(s, TrainConfig, include=("model", "batch_size_per_replica", "learning_rate"))
    s.add_argument("--price-table", help="a YAML price table over the defaults")


def _notebook_parser(sub: argparse._SubParsersAction) -> None:
    sw = sub.add_parser("notebook", help="the notebook's training sweep: epoch and step time per batch size")
    sw.add_argument("--dataset", required=True, help="the dataset folder (its train split is trained on)")
    sw.add_argument("--output-dir", required=True, help="where sweep.json, report.md and chart.html are written")
    sw.add_argument("--name", default="cpu", help="the name this machine is reported under (tpu-v2-8, gpu-1, cpu)")
    sw.add_argument("--batch-sizes", type=int, nargs="+", default=[256, 512, 1024], help="global batch sizes")
    sw.add_argument("--strategy", default="auto", choices=["auto", "tpu", "gpu", "cpu"], help="what to run on")
    # epochs per batch size must be >= 2 (the first is excluded from the timings).
    add_config_flags(sw, TrainConfig, include=("model", "epochs", "steps_per_epoch"))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m components.sweep",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit status: 0 done, 2 bad input (one 'error: ...' line).",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="{grid,search,notebook,join}")
    _grid_parser(sub)
    _search_parser(sub)
    _notebook_parser(sub)
    join = sub.add_parser("join", help="join sweep.json files into the notebook's tables and charts")
    join.add_argument("files", nargs="+", help="sweep.json files of 'notebook'")
    join.add_argument("--output-dir", required=True, help="where report.md and chart.html are written")
    return p


def _read_grid(path: str) -> list:
    try:
        return yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file; give a YAML list of cells (docs/sweep.md)") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path} is not YAML ({err}); give a YAML list of cells") from None


def _grid(args: argparse.Namespace) -> int:
    check_folder(args.dataset, "dataset folder", DATASET_HINT)
    from components.sweep.config import SweepConfig
    from components.sweep.run import join_grid, plan_cells, run_one_cell

    train = _train_settings(args)
    settings = SweepConfig(
        **{k: train[k] for k in GRID_SETTINGS if k != "steps_per_epoch"},
        steps_per_epoch=train["steps_per_epoch"] or 0,  # the grid's stand-in for one pass
        source=os.path.abspath(args.dataset),
    )
    cells = plan_cells(_read_grid(args.grid), settings)
    rows_root = args.rows_root or os.path.join(args.output_dir, "rows")
    for cell in cells:
        model_dir = os.path.join(args.output_dir, "models", f"{cell.key}")
        result = run_one_cell((args.dataset, args.dataset), (model_dir, model_dir), cell.to_dict(), rows_root)
        print(f"{cell.name} (repeat {cell.repeat + 1} of {cell.repeats}): {result.reason or result.status}")
    tables = join_grid(cells, rows_root, args.price_table)
    paths = write_files(
        args.output_dir, {"report.md": tables.markdown, "chart.html": tables.html, "best.json": tables.best}
    )
    print(f"{tables.best['cells']} cells, {tables.best['failed']} failed; best quality {tables.best['best_quality']}")
    print("wrote: " + ", ".join(paths))
    return EXIT_OK


def _search(args: argparse.Namespace) -> int:
    check_folder(args.dataset, "dataset folder", DATASET_HINT)
    from components.sweep.search.folder import plan_and_record, search_settings
    from components.sweep.search.page import render_html, render_markdown
    from components.sweep.search.plan import describe_plan
    from components.sweep.search.run import record, run_here
    from trainer.tfrecords import load_dataset_info

    try:
        spec = yaml.safe_load(Path(args.search).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{args.search}: no such file; give a search file (docs/sweep.md, 'Search')") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{args.search} is not YAML ({' '.join(str(err).split())})") from None
    train = _train_settings(args)
    defaults, context = search_settings(
        train["model"], {}, train["batch_size_per_replica"], train["learning_rate"], os.path.abspath(args.dataset), 0
    )
    rows_root = args.rows_root or os.path.join(args.output_dir, "rows")
    task = load_dataset_info(args.dataset).task
    plan, folder = plan_and_record(spec or {}, defaults, context, rows_root, args.price_table, task_name=task)
    print(describe_plan(plan))
    if args.dry_run:
        return EXIT_OK
    outcome = run_here(folder, args.dataset, os.path.join(args.output_dir, "models"))
    paths = write_files(
        args.output_dir,
        {"report.md": render_markdown(outcome), "chart.html": render_html(outcome), "search.json": record(outcome)},
    )
    print(f"the pick's settings: {folder}/best.yaml" if outcome.choice.get("key") else "no pick")
    print("wrote: " + ", ".join(paths))
    return EXIT_OK


def _train_settings(args: argparse.Namespace) -> dict:
    """TrainConfig's fields, the flags given over the defaults (checked as the train step checks them)."""
    return TrainConfig.from_dict({k: v for k, v in flags_to_fields(args).items() if v is not None}).to_dict()


def _notebook(args: argparse.Namespace) -> int:
    check_folder(args.dataset, "dataset folder", DATASET_HINT)
    from components.sweep.notebook import render_sweep_html, render_sweep_markdown
    from components.sweep.run import run_notebook_sweep
    from trainer.distribute import AcceleratorNotFoundError
    from trainer.tasks import TaskError  # any task's "cannot build or train this model" error

    train = _train_settings(args)
    try:
        run = run_notebook_sweep(
            args.dataset, args.name, args.batch_sizes, train["epochs"], train["steps_per_epoch"], args.strategy,
            train["model"],
        )  # fmt: skip
    except (TaskError, AcceleratorNotFoundError) as err:
        return fail(err)
    files = {
        "sweep.json": run.to_dict(),
        "report.md": render_sweep_markdown([run]),
        "chart.html": render_sweep_html([run]),
    }
    paths = write_files(args.output_dir, files)
    for r in run.results:
        print(
            f"{run.accelerator}, batch {r.batch_size} on {r.accelerator}: epoch {r.epoch_time_s:.2f} s, "
            f"{r.step_time_per_example_us:.1f} us per example (first epoch excluded)"
        )
    print("wrote: " + ", ".join(paths))
    return EXIT_OK


def _join(args: argparse.Namespace) -> int:
    from components.sweep.notebook import render_sweep_html, render_sweep_markdown

    data = [read_json_file(f, "sweep.json files of 'notebook'") for f in args.files]
    paths = write_files(
        args.output_dir, {"report.md": render_sweep_markdown(data), "chart.html": render_sweep_html(data)}
    )
    print(f"{len(data)} training sweeps joined")
    print("wrote: " + ", ".join(paths))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Parses the arguments and runs the sub-command.

    Returns:
        The exit status: 0 done, 2 bad input (flags, grid, price table, dataset, sweep files).
    """
    args = _parser().parse_args(argv)
    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.sweep.grid import GridError
    from components.sweep.search.space import SearchError
    from trainer.benchmark import BenchmarkError
    from trainer.budget.pricing import PriceTableError
    from trainer.tfrecords import DatasetError

    command = {"grid": _grid, "search": _search, "notebook": _notebook, "join": _join}[args.command]
    try:
        return command(args)
    except (ConfigError, GridError, SearchError, PriceTableError, BenchmarkError, DatasetError) as err:
        return fail(err)


if __name__ == "__main__":
    sys.exit(main())
