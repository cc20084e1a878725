"""Runs the end-to-end pipeline on this machine with kfp.local (``make run``) and prints a summary.

The very pipeline that ``make compile`` writes for Kubeflow runs here, each step in a subprocess of
this Python (``SubprocessRunner(use_venv=False)``: no container, no cluster, no cloud account).
The console stays short (pipelines/tools/console.py: a line per step, progress, a failing step's log
tail); each step's whole log goes to ``<run folder>/logs/<task>.log``, and the run ends with the
run report, ``<run folder>/report.html`` (also ``<pipeline root>/latest/report.html``).

``--config run.yaml`` and ``--set 'epochs=20 model_options.image_size=128'`` (``make run CONFIG=...
SET=...``) set any parameter of the task's pipeline's run form (``pipelines/tools/params.py``); the
knobs (``--data``, ``--limit``, ``--epochs``, ...) are shorthands for some of them. The parameters
that differ from the run form's defaults are printed and recorded (``<run folder>/parameters.json``
and the report's Parameters section).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional, TextIO

from pipelines.tools import params
from pipelines.tools.container import ContainerError
from pipelines.tools.params import Layer, ParameterError, RunParameters
from pipelines.tools.runner import Finished, RunError, execute, headline
from trainer.budget import limits, pricing

# The task -> the module of its pipeline (``NAME`` and ``pipeline``); the pipelines know the
# tasks, the tasks know no pipeline. A task without its own runs the generic flow with its run form.
TASK_PIPELINES = {"classification": "pipelines.end_to_end", "detection": "pipelines.detection"}


def task_pipeline(task: str) -> Any:
    """The pipeline ``make run TASK=<task>`` runs: an object with ``NAME`` and ``pipeline``.

    A registered task without a pipeline module of its own (an ``LTP_EXTENSIONS`` task) gets the
    main flow with its own run form (``pipelines.flow.pipeline``), named after it.
    """
    import importlib
    import types

    if task in TASK_PIPELINES:
        return importlib.import_module(TASK_PIPELINES[task])
    from pipelines import flow

    name = task.replace("_", "-")
    built = flow.pipeline(task, name=name, description=f"The {task} task's run of the main flow.", summary="Runs it.")
    return types.SimpleNamespace(NAME=name, pipeline=built)


def check_source(source: str) -> None:
    """Fails fast, before any step runs, when ``source`` cannot be a dataset.

    The convert step would fail the same way, but deep in a subprocess's log; scanning the source
    here (file names only, no image is read) gives the user one line instead.
    """
    from components.image_input import sources

    if sources.is_builtin(source):
        return
    try:
        sources.open_source(source)
    except sources.SourceError as err:
        raise RunError(str(err)) from None


def task_outputs(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Task folder name -> {artifact name: metadata, 'parameters': {...}} from executor outputs."""
    result: dict[str, dict[str, Any]] = {}
    for out in sorted(run_dir.glob("*/executor_output.json")):
        data = json.loads(out.read_text())
        entry: dict[str, Any] = {"parameters": data.get("parameterValues", {})}
        for name, artifacts in data.get("artifacts", {}).items():
            items = artifacts.get("artifacts", [])
            if items:
                entry[name] = items[0].get("metadata", {})
        result[out.parent.name] = entry
    return result


def summarize(
    run_dir: Path, stages_root: Path, model_name: str, seconds: Optional[float] = None, task: str = "classification"
) -> str:
    """A few lines for the person at the terminal: where things are and how they went."""
    from components.serving import stages

    outputs = task_outputs(run_dir)

    def metric(task_prefix: str, artifact: str, key: str) -> Any:
        for task, entry in outputs.items():
            if task.startswith(task_prefix) and key in entry.get(artifact, {}):
                return entry[artifact][key]
        return None

    def fmt(value: Any, spec: str) -> str:
        return "n/a" if value is None else format(value, spec)

    took = "" if seconds is None else f" in {seconds:.0f} s"
    from trainer.tasks import get_task

    the_task = get_task(task)
    labels = [(f"test {the_task.metric(key).title}", key) for key in the_task.run_defaults.headline]
    scores = "   ".join(
        f"{label + ':':20s}{fmt(metric('evaluate', 'metrics', key), '.4f')}" if i == 0 else
        f"{label}: {fmt(metric('evaluate', 'metrics', key), '.4f')}"
        for i, (label, key) in enumerate(labels)
    )  # fmt: skip
    lines = [
        f"== lean-tpu-pipelines: local run finished{took} ==",
        f"artifacts:          {run_dir}",
        f"{scores}   (blessed: {metric('evaluate', 'parameters', 'Output')})",
        f"training:           {fmt(metric('train', 'metrics', 'images_per_sec'), ',.0f')} images/s",
        f"inference:          {fmt(metric('benchmark', 'metrics', 'images_per_sec'), ',.0f')} images/s in-process, "
        f"{fmt(metric('benchmark', 'metrics', 'http_images_per_sec'), ',.0f')} images/s over REST "
        "(local Python server)",
        f"stages ({stages_root}):",
    ]
    for stage in stages.STAGES:
        # A stage serves several models side by side: list each (this run's first).
        served = stages.StageRegistry(str(stages_root)).served_models(stage)
        names = sorted(served, key=lambda name: (name != model_name, name))
        text = ", ".join(f"{n} version {served[n].version} (run {served[n].run or '?'})" for n in names)
        lines.append(f"  {stage:8s}          {text or 'nothing yet'}")
    lines.append("look at them:       make serve   (each stage's URL and Prometheus metrics page; Ctrl-C stops)")
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class LocalRun:
    """What a local run left.

    Attributes:
        ok: every step that ran succeeded.
        run_dir: the run folder (kfp.local's, or one made for the logs when no step wrote any).
        report: the run report, ``<run_dir>/report.html``.
        printed: how many lines the console printed.
    """

    ok: bool
    run_dir: Path
    report: Path
    printed: int


def _link_latest(root: Path, run_dir: Path) -> Path:
    """Points ``<root>/latest`` at the run folder (a relative symlink; a copy where links fail)."""
    latest = root / "latest"
    if latest.is_symlink() or latest.is_file():
        latest.unlink()
    elif latest.is_dir():
        shutil.rmtree(latest)
    try:
        latest.symlink_to(os.path.relpath(run_dir, root), target_is_directory=True)
    except OSError:  # a file system without symlinks: a copy of the report and logs
        latest.mkdir()
        shutil.copy2(run_dir / "report.html", latest / "report.html")
        if (run_dir / "logs").is_dir():
            shutil.copytree(run_dir / "logs", latest / "logs")
    return latest


def _report(
    done: Finished,
    stages_root: Path,
    name: str,
    root: Path,
    summary: Callable[[], str],
    parameters: Optional[RunParameters] = None,
) -> list[str]:
    """Writes the run report (and the parameters' record) into the run folder, links ``latest``;
    returns make run's last lines (after the failure, when a step failed).

    ``summary`` gives the lines printed after a successful run (before the report's path).
    """
    from components.report.local import PARAMETERS_FILE, inputs_from_run_dir
    from components.report.run import write_report

    folder, console = done.folder, done.console
    if parameters is not None:
        (folder / PARAMETERS_FILE).write_text(json.dumps(parameters.to_dict(), indent=2) + "\n")
    report = folder / "report.html"
    inputs = inputs_from_run_dir(folder, str(stages_root), console.records(relative_to=folder), done.failure,
                                 title=f"{name}: run report")  # fmt: skip
    size = write_report(inputs, str(report))
    latest = _link_latest(root, folder)
    return [
        *([summary()] if done.failure is None else []),
        f"report:             {report} ({size / 1024:,.0f} KiB; also {latest / 'report.html'})",
        f"logs:               {console.log_dir}/ (make run VERBOSE=1 prints them as they run)",
    ]


RUNNERS = ("subprocess", "container")


@contextlib.contextmanager
def kfp_runner(kind: str, root: Path, data: Sequence[str] = ()) -> Iterator[Any]:
    """kfp.local's runner of a kind: None (the runner's default, this Python) or the container runner, its engine up.

    Raises:
        ValueError: an unknown kind.
        pipelines.tools.container.ContainerError: no engine, or no image.
    """
    if kind not in RUNNERS:
        raise ValueError(f"runner: unknown {kind!r}; expected one of {', '.join(RUNNERS)}")
    if kind == "subprocess":
        yield None
        return
    from pipelines.tools import container

    root.mkdir(parents=True, exist_ok=True)
    with container.engine() as host:
        before = os.environ.get("DOCKER_HOST")
        if host:
            os.environ["DOCKER_HOST"] = host
        try:
            yield container.runner(str(root), data)
        finally:
            if before is None:
                os.environ.pop("DOCKER_HOST", None)
            else:
                os.environ["DOCKER_HOST"] = before


def run_pipeline(
    pipeline_kwargs: dict[str, Any],
    root: Path,
    stages_root: Path,
    model_name: str = "classifier",
    verbose: bool = False,
    out: Optional[TextIO] = None,
    tty: Optional[bool] = None,
    task: str = "classification",
    parameters: Optional[RunParameters] = None,
    runner: str = "subprocess",
) -> LocalRun:
    """Runs the task's pipeline once under kfp.local behind the quiet console, then the report.

    Args:
        pipeline_kwargs: the pipeline's arguments (``stages_root`` is set from ``stages_root``).
        root: the pipeline root (``local_outputs``).
        stages_root: the stage store.
        model_name: the served model's name (the summary's stage lines).
        verbose: pass kfp.local's whole output through as well (``make run VERBOSE=1``).
        out: where the console prints; None means ``sys.stdout``.
        tty: draw live bars; None asks ``out``.
        task: the task whose pipeline runs (:func:`task_pipeline`: ``classification`` the
            end_to_end pipeline, ``detection`` the detection pipeline).
        parameters: the run's parameters with their defaults and origins: printed (those that
            differ from the run form's defaults) and recorded in the report; None for neither.
        runner: ``subprocess`` (the steps in this Python) or ``container`` (each step in the
            project image, as a cluster runs it: ``pipelines/tools/container.py``).

    Returns:
        Whether it succeeded, the run folder, the report's path and the console's line count.
    """
    end_to_end = task_pipeline(task)
    root = root.resolve()
    t0 = time.monotonic()
    pretty = ", ".join(f"{k}={v}" for k, v in pipeline_kwargs.items() if k in ("source", "limit_per_split", "epochs"))
    lines = [f"lean-tpu-pipelines: the {end_to_end.NAME} pipeline under kfp.local ({pretty})"]
    if parameters is not None:
        lines.append(f"parameters:         {parameters.describe()}")
        lines += [f"budget:             {line}" for line in [budget_line(parameters.values)] if line]

    def closing(done: Finished) -> list[str]:
        return _report(
            done, stages_root, end_to_end.NAME, root,
            lambda: summarize(done.folder, stages_root, model_name, time.monotonic() - t0, task), parameters,
        )  # fmt: skip

    with kfp_runner(runner, root, [str(pipeline_kwargs.get("source") or "")]) as chosen:
        done = execute(
            end_to_end.pipeline, end_to_end.NAME, {**pipeline_kwargs, "stages_root": str(stages_root)}, root,
            out=out or sys.stdout, tty=tty, verbose=verbose, first_lines=lines,
            headline=lambda run_dir, step: headline(run_dir, step, task), runner=chosen, closing=closing,
        )  # fmt: skip
    return LocalRun(done.failure is None, done.folder, done.folder / "report.html", done.console.printed)


# A budget longer than this on a laptop is worth a word before it is spent.
LONG_BUDGET_S = 3600.0


def budget_line(values: Mapping[str, Any]) -> Optional[str]:
    """What the train step's budget buys, in one line said before anything runs; None: no budget.

    A cost budget is time at the step's price (``cost_budget 0.5`` on this laptop's ``cpu-2`` is
    about seven hours): the user sees that at once, not once training has started. ``make run``
    does not ask for a confirmation: it runs unattended (CI, scripts) and its schedule is printed
    again, laid out, before the first step.
    """
    try:
        parsed = limits.Limits.parse(
            values.get("time_budget"),
            values.get("cost_budget"),
            price=lambda: pricing.price_of(
                values.get("accelerator_type") or "", int(values.get("accelerator_count") or 0)
            ),
        )
    except limits.BudgetError:
        return None  # the train step's own check says what is wrong, one line
    seconds = parsed.budget.limit_s
    if seconds is None:
        return None
    if parsed.budget.cap:
        line = f"{parsed.budget.describe()}: at most that, the task's own schedule where it fits"
    else:
        line = f"{parsed.budget.describe()} of the train step, its schedule laid out to fill it once a step is timed"
    if seconds > LONG_BUDGET_S:
        line += "; to stop sooner give BUDGET=10m (SET='time_budget=10m')"
    return line


# make run's shorthands: (argument, run-form parameter, the Makefile variable that sets it).
SHORTHANDS = (
    ("data", "source", "DATA"),
    ("limit", "limit_per_split", "LIMIT"),
    ("epochs", "epochs", "EPOCHS"),
    ("steps_per_epoch", "steps_per_epoch", "STEPS"),
    ("budget", "time_budget", "BUDGET"),
    ("benchmark_images", "benchmark_images", "--benchmark-images"),
    ("model_name", "served_model_name", "--model-name"),
    ("to_prod", "promote_to_prod", "PROD"),
)


def local_defaults(task: str) -> Layer:
    """What ``make run`` sets where the run form has other defaults: the task's quick run."""
    from trainer.tasks import get_task

    quick = get_task(task).run_defaults
    values = {
        "source": quick.data,
        "limit_per_split": quick.limit,
        "epochs": quick.epochs,
        "served_model_name": quick.served_model_name,
        **LOCAL,
        "time_budget": quick.time_budget,
    }
    if limits.is_set(quick.time_budget):
        values["epochs"] = 0  # the budget lays the schedule out
    return Layer("make run", values)


# What a local run gets over the run form's (a cluster's) defaults, whatever the task: the step
# runs on this machine's CPUs (priced as cpu-<cores>), and a shorter inference benchmark whose
# rounds stop once they agree within 5% (3 at most).
LOCAL = {
    "accelerator_type": "",
    "accelerator_count": 0,
    "benchmark_images": 1024,
    "benchmark_target_spread": 0.05,
}


def _budget_or_epochs(resolved: RunParameters) -> RunParameters:
    """One schedule: a budget and explicit epochs (or steps per epoch) are exclusive.

    Epochs the user gave (``EPOCHS``, ``CONFIG``, ``SET``) win over make run's own time budget,
    which is dropped; a budget the user gave wins over epochs left at a default, which become 0
    (the budget lays the schedule out). Both given by the user is the train step's error.
    """
    values, origins = resolved.values, resolved.origins
    local = ("default", "make run")
    mine = any(origins.get(k, "default") not in local for k in ("epochs", "steps_per_epoch"))
    if mine and origins.get("time_budget") == "make run":
        values["time_budget"], origins["time_budget"] = "auto", "epochs given"
    budgeted = limits.is_set(values.get("time_budget")) or limits.is_set(values.get("cost_budget"))
    if budgeted and values.get("epochs") and origins.get("epochs", "default") in local:
        values["epochs"], origins["epochs"] = 0, "the budget"
    return resolved


def run_parameters(args: argparse.Namespace) -> RunParameters:
    """The run's parameters: the form's defaults, make run's, ``CONFIG``, the shorthands, ``SET``.

    Raises:
        ParameterError: an unknown name, a wrong type, a value a step refuses (one line each).
    """
    module = task_pipeline(args.task)
    layers = [local_defaults(args.task)]
    if args.config:
        layers.append(params.read_config(args.config))
    for attr, name, origin in SHORTHANDS:
        if getattr(args, attr) is not None:
            layers.append(Layer(origin, {name: getattr(args, attr)}))
    layers.append(params.parse_set(" ".join(args.set or []), "SET"))
    resolved = _budget_or_epochs(params.resolve(params.run_form(module.pipeline), layers, module.NAME))
    params.check_steps(module.pipeline, resolved.values, args.task)
    return resolved


def run(args: argparse.Namespace) -> LocalRun:
    """Runs the pipeline once with the command line's settings (the task's defaults where unset).

    Raises:
        ParameterError: the parameters are wrong (nothing ran).
        RunError: the source cannot be a dataset (nothing ran).
    """
    resolved = run_parameters(args)
    values = dict(resolved.values)
    check_source(values["source"])
    root = Path(args.pipeline_root).resolve()
    stages_root = Path(values.pop("stages_root") or root / "stages")
    model_name = values["served_model_name"]
    return run_pipeline(
        values, root, stages_root, model_name, verbose=args.verbose, task=args.task, parameters=resolved,
        runner=args.runner,
    )  # fmt: skip


def _yes_no(text: str) -> bool:
    """``true`` or ``false`` (``make run PROD=...``)."""
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() == "true"


def _parser() -> argparse.ArgumentParser:
    from trainer.tasks import task_names

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=task_names(), default="classification")
    parser.add_argument(
        "--config", help="a YAML file of run-form parameters (the Kubeflow UI's names and types; dotted names allowed)"
    )
    parser.add_argument(
        "--set", action="append", metavar="NAME=VALUE ...",
        help="parameters over --config and the flags below, e.g. 'epochs=20 model_options.image_size=128'",
    )  # fmt: skip
    parser.add_argument(
        "--data", help="image folder, manifest, COCO JSON, or a built-in: fashion-mnist, digits (classification), "
        "shapes (detection); default: the task's built-in"
    )  # fmt: skip
    parser.add_argument("--limit", type=int, help="images per split, 0 = all; default 20000 (detection: all)")
    parser.add_argument("--epochs", type=int, help="default 3 (detection: 0, a schedule in steps fitted to the data)")
    parser.add_argument("--steps-per-epoch", type=int, help="0 = one pass over the training split (the default)")
    parser.add_argument("--budget", help="the train step's time_budget: 90s, 10m, 2h, or auto for none")
    parser.add_argument(
        "--benchmark-images", type=int, help="images the benchmark times (default 1024 here, 3200 in the run form)"
    )
    parser.add_argument("--model-name", help="the served name; default classifier (detection: detector)")
    parser.add_argument("--pipeline-root", default="local_outputs")
    parser.add_argument("--to-prod", action="store_const", const=True, help="promote to prod after staging passed")
    parser.add_argument(
        "--prod", dest="to_prod", type=_yes_no, metavar="true|false", help="promote_to_prod, as make run PROD=..."
    )
    parser.add_argument("--verbose", action="store_true", help="also print kfp.local's whole output as it comes")
    parser.add_argument(
        "--runner", choices=RUNNERS, default="subprocess",
        help="subprocess: the steps in this Python; container: each step in the project image (make images), "
        "through Docker or Podman, as a cluster runs it",
    )  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (``make run``)."""
    args = _parser().parse_args(argv)
    try:
        result = run(args)
    except ParameterError as err:
        for line in err.problems:
            print(f"error: {line}", file=sys.stderr)
        return 2
    except RunError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except ContainerError as err:  # the container runner: no engine, or no image (it says what to do)
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
