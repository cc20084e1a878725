"""Runs the end-to-end pipeline on this machine with kfp.local (``make run``) and prints a summary.

The very pipeline that ``make compile`` writes for Kubeflow runs here, each step in a subprocess of
this Python (``SubprocessRunner(use_venv=False)``: no container, no cluster, no cloud account).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


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


# Per task: the pipeline module, the summary's headline metrics, and make run's defaults.
TASKS: dict[str, dict[str, Any]] = {
    "classification": {
        "pipeline": "pipelines.end_to_end",
        "headline": (("test accuracy", "accuracy"),),
        "defaults": {"data": "fashion-mnist", "limit": 20000, "epochs": 3, "model_name": "classifier"},
    },
    "detection": {
        "pipeline": "pipelines.detection",
        "headline": (("test AP@0.5", "ap50"), ("test AP@[.5:.95]", "ap")),
        "defaults": {"data": "shapes", "limit": 0, "epochs": 6, "model_name": "detector"},
    },
}


def summarize(run_dir: Path, stages_root: Path, model_name: str, task: str = "classification") -> str:
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

    headline = "   ".join(
        f"{label}: {fmt(metric('evaluate', 'metrics', key), '.4f')}" for label, key in TASKS[task]["headline"]
    )
    lines = [
        "",
        "== lean-tpu-pipelines: local run finished ==",
        f"artifacts:          {run_dir}",
        f"{headline}   (blessed: {metric('evaluate', 'parameters', 'Output')})",
        f"training:           {fmt(metric('train', 'metrics', 'images_per_sec'), ',.0f')} images/s",
        f"inference:          {fmt(metric('benchmark', 'metrics', 'images_per_sec'), ',.0f')} images/s in-process, "
        f"{fmt(metric('benchmark', 'metrics', 'http_images_per_sec'), ',.0f')} images/s over REST",
        f"stages ({stages_root}):",
    ]
    for stage in ("demo", "staging", "prod"):
        # A stage serves several models side by side: list each (this run's first).
        served = stages.served_models(str(stages_root), stage)
        names = sorted(served, key=lambda name: (name != model_name, name))
        text = ", ".join(f"{n} version {served[n].version} (run {served[n].run or '?'})" for n in names)
        lines.append(f"  {stage:8s}          {text or 'nothing yet'}")
    lines.append("look at them:       make serve   (each stage's URL and Prometheus metrics page; Ctrl-C stops)")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> str:
    """Runs the pipeline once and returns the summary."""
    import importlib

    from kfp import local

    settings = TASKS[args.task]
    for key, value in settings["defaults"].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    flow = importlib.import_module(settings["pipeline"])
    check_source(args.data)
    root = Path(args.pipeline_root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    stages_root = root / "stages"
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root), raise_on_error=True)
    started = time.time() - 1
    try:
        flow.pipeline(
            source=args.data,
            limit_per_split=args.limit,
            epochs=args.epochs,
            steps_per_epoch=args.steps_per_epoch,
            benchmark_images=args.benchmark_images,
            stages_root=str(stages_root),
            served_model_name=args.model_name,
            promote_to_prod=args.to_prod,
        )
    except RuntimeError as err:
        raise RunError(f"the pipeline failed: {err} (the failing step's log is above)") from None
    return summarize(latest_run_dir(root, flow.NAME, started), stages_root, args.model_name, args.task)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (``make run``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", choices=sorted(TASKS), default="classification")
    parser.add_argument(
        "--data", help="image folder, manifest, COCO JSON, or a built-in: fashion-mnist, digits (classification), "
        "shapes (detection); default: the task's built-in"
    )  # fmt: skip
    parser.add_argument("--limit", type=int, help="images per split, 0 = all; default 20000 (detection: all)")
    parser.add_argument("--epochs", type=int, help="default 3 (detection: 6)")
    parser.add_argument("--steps-per-epoch", type=int, default=0, help="0 = one pass over the training split")
    parser.add_argument("--benchmark-images", type=int, default=3200)
    parser.add_argument("--model-name", help="the served name; default classifier (detection: detector)")
    parser.add_argument("--pipeline-root", default="local_outputs")
    parser.add_argument("--to-prod", action="store_true", help="promote to prod after staging passed")
    args = parser.parse_args(argv)
    try:
        print(run(args))
    except RunError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
