"""Runs the end-to-end pipeline on this machine with kfp.local (``make run``) and prints a summary.

The very pipeline that ``make compile`` writes for Kubeflow runs here, each step in a subprocess of
this Python (``SubprocessRunner(use_venv=False)``: no container, no cluster, no cloud account).
The console stays short (pipelines/console.py: a line per step, progress, a failing step's log
tail); each step's whole log goes to ``<run folder>/logs/<task>.log``, and the run ends with the
run report, ``<run folder>/report.html`` (also ``<pipeline root>/latest/report.html``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional, TextIO


class RunError(Exception):
    """The local run cannot start or did not finish; the message says why and what to do."""


def check_source(source: str) -> None:
    """Fails fast, before any step runs, when ``source`` cannot be a dataset.

    The convert step would fail the same way, but deep in a subprocess's log; scanning the source
    here (file names only, no image is read) gives the user one line instead.
    """
    from components.convert import sources

    if sources.is_builtin(source):
        return
    try:
        sources.open_source(source)
    except sources.SourceError as err:
        raise RunError(str(err)) from None


def latest_run_dir(pipeline_root: Path, pipeline_name: str, started: float) -> Path:
    """The folder kfp.local made for the run that began at ``started``."""
    runs = [p for p in pipeline_root.glob(f"{pipeline_name}-*") if p.is_dir() and p.stat().st_mtime >= started]
    if not runs:
        raise RunError(f"no run folder {pipeline_name}-* under {pipeline_root}")
    return max(runs, key=lambda p: p.stat().st_mtime)


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
        f"{fmt(metric('benchmark', 'metrics', 'http_images_per_sec'), ',.0f')} images/s over REST",
        f"stages ({stages_root}):",
    ]
    for stage in stages.STAGES:
        # A stage serves several models side by side: list each (this run's first).
        served = stages.served_models(str(stages_root), stage)
        names = sorted(served, key=lambda name: (name != model_name, name))
        text = ", ".join(f"{n} version {served[n].version} (run {served[n].run or '?'})" for n in names)
        lines.append(f"  {stage:8s}          {text or 'nothing yet'}")
    lines.append("look at them:       make serve   (each stage's URL and Prometheus metrics page; Ctrl-C stops)")
    return "\n".join(lines)


def _evaluation_headline(metrics: dict[str, Any]) -> str:
    """``<headline metric> <value>, `` of the task whose headline metric the metrics hold (else empty)."""
    from trainer.tasks import task_types

    for task_type in task_types().values():
        key = task_type.headline_metric
        if key in metrics:
            return f"{task_type.metric(key).label or key} {metrics[key]:.4f}, "
    return ""


def headline(run_dir: Optional[Path], task: str) -> str:
    """A finished step's figure in one line, from its executor output (empty when it has none)."""
    from pipelines.console import executor_output

    out = executor_output(run_dir, task)
    arts = {name: (a.get("artifacts") or [{}])[0].get("metadata", {}) for name, a in out.get("artifacts", {}).items()}
    params = out.get("parameterValues", {})
    if task.startswith("convert"):
        m = arts.get("metrics", {})
        return f"{m.get('images', 0):,.0f} images converted, {m.get('rejected', 0):,.0f} rejected"
    if task.startswith("train"):
        m = arts.get("metrics", {})
        score = next(((k, m[k]) for k in ("val_accuracy", "val_ap", "val_map", "train_accuracy") if k in m), None)
        figure = f", final {score[0]} {score[1]:.4f}" if score else ""
        fitted = arts.get("model", {}).get("fit_summary")
        return f"{m.get('images_per_sec', 0):,.0f} training images/s{figure}" + (f"; {fitted}" if fitted else "")
    if task.startswith("evaluate"):
        m, reasons = arts.get("metrics", {}), arts.get("blessing", {}).get("reasons", [])
        score = _evaluation_headline(m)
        return score + (reasons[0] if reasons else f"blessed: {params.get('Output')}")
    if task.startswith("benchmark"):
        m = arts.get("metrics", {})
        rest = f", {m['http_images_per_sec']:,.0f} over REST" if "http_images_per_sec" in m else ""
        return f"{m.get('images_per_sec', 0):,.0f} images/s in process{rest}"
    if task.startswith("promote"):
        r = arts.get("report", {})
        same = " (already served)" if r.get("no_op") else ""
        return f"{r.get('stage', '?')} serves version {r.get('version', params.get('Output', '?'))}{same}"
    if task.startswith("build-report"):
        return f"report.html, {arts.get('report', {}).get('bytes', 0) / 1024:,.0f} KiB"
    return ""


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


def _move_logs(console: Any, staging: Path, folder: Path) -> Path:
    """Moves the logs written while the run folder was unknown into ``<folder>/logs``."""
    folder.mkdir(parents=True, exist_ok=True)
    logs = folder / "logs"
    if logs.exists():
        shutil.rmtree(logs)
    shutil.move(str(staging), logs)
    if not any(staging.parent.iterdir()):
        staging.parent.rmdir()
    console.log_dir = logs
    for step in console.steps:
        step.log_path = logs / step.log_path.name
    return logs


def _run_quietly(pipeline: Any, kwargs: dict[str, Any], root: Path, console: Any, verbose: bool) -> Optional[str]:
    """Runs the pipeline under kfp.local with its output going to the console; returns kfp.local's error."""
    from kfp import local

    from pipelines.console import strip_ansi

    # TensorFlow's C++ INFO lines (oneDNN, CPU features) say nothing to a person; warnings stay.
    env_before = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
    if not verbose and env_before is None:
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "1"
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root), raise_on_error=True)
    error: Optional[str] = None
    saved = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = console
    try:
        pipeline(**kwargs)
    except RuntimeError as err:  # kfp.local: a task finished with status FAILURE
        error = strip_ansi(str(err))
    finally:
        sys.stdout, sys.stderr = saved
        if env_before is None:
            os.environ.pop("TF_CPP_MIN_LOG_LEVEL", None)
        console.close_pending()
    return error


def _report(
    console: Any,
    staging_logs: Path,
    folder: Path,
    stages_root: Path,
    error: Optional[str],
    name: str,
    root: Path,
    summary: Callable[[], str],
) -> tuple[Any, Path]:
    """Moves the logs into the run folder, writes the run report, links ``latest``; prints the outcome.

    ``summary`` gives the lines printed after a successful run (before the report's path).

    Returns:
        (the failure or None, the report's path).
    """
    from components.report.local import inputs_from_run_dir
    from components.report.run import Failure, write_report

    logs = _move_logs(console, staging_logs, folder)
    failure = console.failure(error)
    if failure is None and error is not None:  # failed outside any step (kfp.local itself)
        failure = Failure("(kfp.local)", error, "", str(logs / "pipeline.log"))
    report = folder / "report.html"
    inputs = inputs_from_run_dir(folder, str(stages_root), console.records(relative_to=folder), failure,
                                 title=f"{name}: run report")  # fmt: skip
    size = write_report(inputs, str(report))
    latest = _link_latest(root, folder)
    if failure is not None:
        console.print_failure(failure)
    else:
        console.say(summary())
    console.say(f"report:             {report} ({size / 1024:,.0f} KiB; also {latest / 'report.html'})")
    console.say(f"logs:               {logs}/ (make run VERBOSE=1 prints them as they run)")
    return failure, report


def run_pipeline(
    pipeline_kwargs: dict[str, Any],
    root: Path,
    stages_root: Path,
    model_name: str = "classifier",
    verbose: bool = False,
    out: Optional[TextIO] = None,
    tty: Optional[bool] = None,
    task: str = "classification",
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
        task: ``classification`` (the end_to_end pipeline) or ``detection`` (the detection pipeline).

    Returns:
        Whether it succeeded, the run folder, the report's path and the console's line count.
    """
    import importlib

    from pipelines.console import QuietConsole, display_names
    from trainer.tasks import get_task

    end_to_end = importlib.import_module(get_task(task).run_defaults.pipeline)

    out = out or sys.stdout
    root = root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    started = time.time() - 1
    t0 = time.monotonic()
    stamp = time.strftime("%Y-%m-%d-%H-%M-%S")
    # kfp.local names the run folder when the run starts and says nowhere which it is: the logs
    # are written here first and moved into the run folder once it can be found.
    staging_logs = root / ".logs" / stamp
    found: list[Path] = []

    def run_dir() -> Optional[Path]:
        if not found:
            try:
                found.append(latest_run_dir(root, end_to_end.NAME, started))
            except RunError:
                return None
        return found[0]

    epochs = {"train-model": int(pipeline_kwargs.get("epochs", 1))}
    console = QuietConsole(
        out,
        staging_logs,
        display_names(end_to_end.pipeline),
        headline=lambda task: headline(run_dir(), task),
        epochs=epochs,
        tty=tty,
        verbose=verbose,
    )
    pretty = ", ".join(f"{k}={v}" for k, v in pipeline_kwargs.items() if k in ("source", "limit_per_split", "epochs"))
    console.say(f"lean-tpu-pipelines: the {end_to_end.NAME} pipeline under kfp.local ({pretty})")
    error = _run_quietly(end_to_end.pipeline, {**pipeline_kwargs, "stages_root": str(stages_root)}, root, console,
                         verbose)  # fmt: skip
    folder = run_dir() or root / f"{end_to_end.NAME}-{stamp}-failed"
    failure, report = _report(
        console, staging_logs, folder, stages_root, error, end_to_end.NAME, root,
        lambda: summarize(folder, stages_root, model_name, time.monotonic() - t0, task),
    )  # fmt: skip
    return LocalRun(failure is None, folder, report, console.printed)


def run(args: argparse.Namespace) -> LocalRun:
    """Runs the pipeline once with the command line's settings (the task's defaults where unset)."""
    from trainer.tasks import get_task

    defaults = get_task(args.task).run_defaults
    for key, value in (
        ("data", defaults.data),
        ("limit", defaults.limit),
        ("epochs", defaults.epochs),
        ("model_name", defaults.served_model_name),
    ):
        if getattr(args, key) is None:
            setattr(args, key, value)
    check_source(args.data)
    root = Path(args.pipeline_root).resolve()
    kwargs = dict(
        source=args.data,
        limit_per_split=args.limit,
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        benchmark_images=args.benchmark_images,
        served_model_name=args.model_name,
        promote_to_prod=args.to_prod,
    )
    return run_pipeline(kwargs, root, root / "stages", args.model_name, verbose=args.verbose, task=args.task)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (``make run``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    from trainer.tasks import task_names

    parser.add_argument("--task", choices=task_names(), default="classification")
    parser.add_argument(
        "--data", help="image folder, manifest, COCO JSON, or a built-in: fashion-mnist, digits (classification), "
        "shapes (detection); default: the task's built-in"
    )  # fmt: skip
    parser.add_argument("--limit", type=int, help="images per split, 0 = all; default 20000 (detection: all)")
    parser.add_argument("--epochs", type=int, help="default 3 (detection: 0, a schedule in steps fitted to the data)")
    parser.add_argument("--steps-per-epoch", type=int, default=0, help="0 = one pass over the training split")
    parser.add_argument("--benchmark-images", type=int, default=3200)
    parser.add_argument("--model-name", help="the served name; default classifier (detection: detector)")
    parser.add_argument("--pipeline-root", default="local_outputs")
    parser.add_argument("--to-prod", action="store_true", help="promote to prod after staging passed")
    parser.add_argument("--verbose", action="store_true", help="also print kfp.local's whole output as it comes")
    args = parser.parse_args(argv)
    try:
        result = run(args)
    except RunError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
