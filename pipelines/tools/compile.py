"""Compiles every pipeline to ``<output-dir>/<name>.yaml``: what users upload to Kubeflow.

``python -m pipelines.tools.compile --output-dir dist/pipelines [--image REGISTRY/IMAGE:TAG] [NAME ...]``

No TensorFlow is imported: compiling all pipelines takes a few seconds.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

import yaml
from kfp import compiler

from pipelines import grid, search

# File name -> module defining ``pipeline`` (a @dsl.pipeline function).
PIPELINES = {
    "end_to_end": "pipelines.end_to_end",
    "detection": "pipelines.detection",
    "tfrecords": "pipelines.tfrecords",
    "benchmark": "pipelines.benchmark",
    "gpu_vs_tpu": "pipelines.gpu_vs_tpu",
    "promote": "pipelines.promote",
    "rollback": "pipelines.rollback",
    "notebook": "pipelines.notebook",
    "monitor": "pipelines.monitor",
    "sweep": "pipelines.sweep",
    "batch_predict": "pipelines.batch_predict",
    "search": "pipelines.search",
    "select": "pipelines.select",
    "retrain": "pipelines.retrain",
}


def set_image(documents: list[dict], image: str) -> int:
    """Points every executor of a compiled pipeline at ``image``; returns how many it changed."""
    changed = 0
    for executor in documents[0]["deploymentSpec"]["executors"].values():
        container = executor.get("container")
        if container is not None:
            container["image"] = image
            changed += 1
    return changed


def pipeline_func(name: str, parallelism: int | None = None, rungs: int | None = None, preset: str | None = None):
    """The pipeline function of a file name, built with the compile-time settings it takes (``build``).

    Args:
        name: a key of ``PIPELINES``.
        parallelism: items at once for pipelines with a fan-out (pipelines/grid.py); None for their default.
        rungs: the search's rungs (pipelines/search.py); None for its default.
        preset: an accelerator preset (pipelines/accelerators.py) for the pipelines that train or run
            a notebook: end_to_end, detection, sweep, search, notebook; None for their run-time request.
    """
    if name not in PIPELINES:
        raise KeyError(f"unknown pipeline {name!r}; known: {', '.join(PIPELINES)}")
    module = importlib.import_module(PIPELINES[name])
    if preset and hasattr(module, "pipeline_for"):
        return module.pipeline_for(preset)
    if not hasattr(module, "build"):
        return module.pipeline
    takes = inspect.signature(module.build).parameters
    given = {"parallelism": parallelism, "rungs": rungs, "preset": preset or None}
    kwargs = {k: v for k, v in given.items() if v is not None and k in takes}
    return module.build(**kwargs) if kwargs else module.pipeline


def compile_pipeline(
    name: str,
    output_dir: Path,
    image: str | None = None,
    parallelism: int | None = None,
    rungs: int | None = None,
    preset: str | None = None,
) -> Path:
    """Compiles one pipeline by its file name and returns the YAML's path (written atomically)."""
    func = pipeline_func(name, parallelism, rungs, preset)
    output_dir.mkdir(parents=True, exist_ok=True)
    target = output_dir / f"{name}.yaml"
    fd, tmp = tempfile.mkstemp(suffix=".yaml", dir=output_dir, prefix=f".{name}.")
    os.close(fd)
    try:
        compiler.Compiler().compile(func, tmp)
        if image:
            with open(tmp) as f:
                documents = [d for d in yaml.safe_load_all(f) if d is not None]
            set_image(documents, image)
            with open(tmp, "w") as f:
                yaml.safe_dump_all(documents, f, sort_keys=False)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def compile_all(
    output_dir: Path,
    image: str | None = None,
    names: Iterable[str] | None = None,
    parallelism: int | None = None,
    rungs: int | None = None,
    preset: str | None = None,
) -> list[Path]:
    """Compiles the named pipelines (all by default)."""
    return [compile_pipeline(n, output_dir, image, parallelism, rungs, preset) for n in (names or PIPELINES)]


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"pipelines to compile (default all: {', '.join(PIPELINES)})")
    parser.add_argument("--output-dir", type=Path, default=Path("dist/pipelines"))
    parser.add_argument("--image", help="container image for every step (default: components.images)")
    parser.add_argument(
        "--sweep-parallelism",
        help=f"grid cells run at once in sweep and gpu_vs_tpu (0: no limit); default ${grid.PARALLELISM_ENV} "
        f"or {grid.DEFAULT_PARALLELISM}. A literal in the YAML: kfp takes no parameter there",
    )
    parser.add_argument(
        "--search-rungs",
        help=f"the search pipeline's rungs of successive halving; default ${search.RUNGS_ENV} or "
        f"{search.DEFAULT_RUNGS}",
    )
    parser.add_argument(
        "--accelerator",
        help="an accelerator preset (gke-tpu-v5e-2x4, tpu-v3-8, gpu-1, cpu; pipelines/accelerators.py) for the "
        "train step of end_to_end and detection, the sweep's cells, the search's trials and the notebook step, "
        "in place of their run-time accelerator request; none by default",
    )
    args = parser.parse_args(argv)
    preset = (args.accelerator or "").strip()
    if preset:
        from pipelines import accelerators

        try:
            accelerators.get_preset(preset)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    try:
        rungs_text = args.search_rungs if args.search_rungs is not None else os.environ.get(search.RUNGS_ENV, "")
        rungs = int(rungs_text) if rungs_text.strip() else None
        if rungs is not None and rungs < 1:
            raise ValueError(f"{search.RUNGS_ENV}: a search has at least one rung, got {rungs}")
        parallelism = (
            grid.parallelism_from(args.sweep_parallelism)
            if args.sweep_parallelism is not None
            else grid.parallelism_of(os.environ)
        )
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        for path in compile_all(args.output_dir, args.image, args.names, parallelism, rungs, preset or None):
            print(path)
    except KeyError as err:
        print(f"error: {err.args[0]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
