r"""Command line: ``python -m components.benchmark {inference,sweep,join} ...`` (no Kubeflow needed).

inference  times batched inference on the exported model (in process and over REST) and prices it;
           writes what the benchmark_inference component writes: metrics.json, report.md, and
           row.json (the result row, statistics included).
sweep      the GPU-vs-TPU notebook's training sweep on this machine: sweep.json, report.md, chart.html.
join       joins row.json files (one per accelerator) into the case study's table, fastest and
           cheapest marked, or sweep.json files into the notebook's tables: report.md, chart.html.

Examples::

    python -m components.benchmark inference --model-dir models/run1 --dataset data/fmnist \
        --output-dir out/bench-cpu --accelerator cpu-8
    python -m components.benchmark sweep --dataset data/fmnist --output-dir out/sweep-cpu \
        --name cpu --batch-sizes 256 512 1024 --epochs 3
    python -m components.benchmark join out/bench-*/row.json --output-dir out/bench
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from components.cli import EXIT_OK, check_folder, fail, load_section, write_files
from trainer.config import BenchmarkConfig, ConfigError
from trainer.runtime import configure_tensorflow_env


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m components.benchmark",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit status: 0 done, 2 bad input (one 'error: ...' line).",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="{inference,sweep,join}")

    inf = sub.add_parser("inference", help="time and price batched inference on one accelerator")
    inf.add_argument("--model-dir", required=True, help="the model folder or gs:// URI (saved_model/ inside)")
    inf.add_argument("--dataset", required=True, help="the dataset folder or gs:// URI; its split's images are sent")
    inf.add_argument("--output-dir", required=True, help="where metrics.json, report.md and row.json are written")
    inf.add_argument("--config", help="YAML: BenchmarkConfig fields, or a whole-run Config with a benchmark: section")
    inf.add_argument("--num-images", type=int, help="BenchmarkConfig.num_images (the case study: 3200)")
    inf.add_argument("--batch-size", type=int, help="BenchmarkConfig.batch_size (the case study: 64)")
    inf.add_argument("--warmup-batches", type=int, help="BenchmarkConfig.warmup_batches: untimed batches first")
    inf.add_argument("--rounds", type=int, help="BenchmarkConfig.rounds: timed rounds, the median reported")
    inf.add_argument("--accelerator", help="BenchmarkConfig.accelerator: the price table key (cpu-8, v100, ...)")
    inf.add_argument("--price-table", help="BenchmarkConfig.price_table: a YAML price table over the defaults")
    inf.add_argument(
        "--http",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="BenchmarkConfig.http: also time the served path (REST through the local model server)",
    )
    inf.add_argument("--split", default="test", help="the split whose images are sent (default test)")

    sw = sub.add_parser("sweep", help="the notebook's training sweep: epoch and step time per batch size")
    sw.add_argument("--dataset", required=True, help="the dataset folder (its split is decoded into memory)")
    sw.add_argument("--output-dir", required=True, help="where sweep.json, report.md and chart.html are written")
    sw.add_argument("--name", default="cpu", help="the name this machine is reported under (tpu-v2-8, gpu-1, cpu)")
    sw.add_argument("--batch-sizes", type=int, nargs="+", default=[256, 512, 1024], help="global batch sizes")
    sw.add_argument("--epochs", type=int, default=3, help="epochs per batch size, >= 2 (the first is excluded)")
    sw.add_argument("--steps-per-epoch", type=int, help="steps per epoch; default one pass over the split")
    sw.add_argument("--strategy", default="auto", choices=["auto", "tpu", "gpu", "cpu"], help="what to run on")
    sw.add_argument("--model", default="mnist_cnn", help="the model builder (mnist_cnn: the notebook's CNN)")
    sw.add_argument("--split", default="train", help="the split trained on (default train)")
    sw.add_argument("--limit", type=int, help="decode at most this many examples")

    join = sub.add_parser("join", help="join row.json (or sweep.json) files into one table and chart")
    join.add_argument("files", nargs="+", help="row.json files of 'inference' or sweep.json files of 'sweep'")
    join.add_argument("--output-dir", required=True, help="where report.md and chart.html are written")
    return p


def _inference(args: argparse.Namespace) -> int:
    flags = {
        "num_images": args.num_images,
        "batch_size": args.batch_size,
        "warmup_batches": args.warmup_batches,
        "rounds": args.rounds,
        "accelerator": args.accelerator,
        "price_table": args.price_table,
        "http": args.http,
    }
    config = load_section(BenchmarkConfig, args.config, flags)
    check_folder(args.model_dir, "model folder", "give the folder the train step wrote (saved_model/ inside)")
    check_folder(args.dataset, "dataset folder", "give the folder the convert step wrote (dataset.json inside)")
    from components.benchmark.run import render_single, run_benchmark

    row = run_benchmark(args.model_dir, args.dataset, config, args.split)
    paths = write_files(
        args.output_dir,
        {"metrics.json": row.scalar_metrics(), "report.md": render_single(row), "row.json": row.to_dict()},
    )
    t = row.timing
    print(
        f"{row.accelerator} ({row.label}): {t.images_per_sec:,.1f} images/s, {t.num_images} images in batches "
        f"of {t.batch_size}, latency p50 {t.latency_p50_ms:.2f} / p95 {t.latency_p95_ms:.2f} / "
        f"p99 {t.latency_p99_ms:.2f} ms"
    )
    ipd = "n/a (free)" if row.images_per_dollar is None else f"{row.images_per_dollar:,.0f}"
    print(f"price: ${row.price_per_hour:.2f}/hour ({row.price_source}); images per dollar: {ipd}")
    if row.http is not None:
        print(
            f"served (REST): {row.http.images_per_sec:,.1f} images/s, p50 {row.http.latency_p50_ms:.2f} ms; "
            f"{row.http_overhead:.2f}x the in-process time"
        )
    print("wrote: " + ", ".join(paths))
    return EXIT_OK


def _sweep(args: argparse.Namespace) -> int:
    check_folder(args.dataset, "dataset folder", "give the folder the convert step wrote (dataset.json inside)")
    from components.benchmark.rows import SweepRun
    from components.benchmark.table import render_sweep_html, render_sweep_markdown
    from trainer.benchmark import training_sweep
    from trainer.distribute import AcceleratorNotFoundError
    from trainer.tasks.classification.model import ModelError  # imports keras: only here, where TensorFlow runs anyway

    try:
        results = training_sweep(
            args.dataset,
            batch_sizes=args.batch_sizes,
            epochs=args.epochs,
            steps_per_epoch=args.steps_per_epoch,
            accelerator=args.strategy,
            model_name=args.model,
            split=args.split,
            limit=args.limit,
        )
    except (ModelError, AcceleratorNotFoundError) as err:
        return fail(err)
    run = SweepRun(args.name, tuple(results))
    paths = write_files(
        args.output_dir,
        {
            "sweep.json": run.to_dict(),
            "report.md": render_sweep_markdown([run]),
            "chart.html": render_sweep_html([run]),
        },
    )
    for r in run.results:
        print(
            f"{run.accelerator}, batch {r.batch_size} on {r.accelerator}: epoch {r.epoch_time_s:.2f} s, "
            f"{r.step_time_per_example_us:.1f} us per example (first epoch excluded)"
        )
    print("wrote: " + ", ".join(paths))
    return EXIT_OK


def _read_json(path: str) -> object:
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such file; give row.json files of 'inference' or sweep.json of 'sweep'"
        ) from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path} is not JSON ({err}); give row.json or sweep.json files") from None


def _join(args: argparse.Namespace) -> int:
    from components.benchmark.table import (
        best_of,
        render_html,
        render_markdown,
        render_sweep_html,
        render_sweep_markdown,
    )

    data = [_read_json(f) for f in args.files]
    sweeps = [isinstance(d, dict) and "results" in d for d in data]
    if any(sweeps) and not all(sweeps):
        raise ConfigError("join: give only row.json files (inference) or only sweep.json files (sweep), not both")
    if all(sweeps):
        files = {"report.md": render_sweep_markdown(data), "chart.html": render_sweep_html(data)}
        summary = f"{len(data)} training sweeps joined"
    else:
        best = best_of(data)
        files = {"report.md": render_markdown(data), "chart.html": render_html(data), "best.json": best}
        summary = f"{len(data)} accelerators: fastest {best['fastest']}, cheapest {best['cheapest']}"
    paths = write_files(args.output_dir, files)
    print(summary)
    print("wrote: " + ", ".join(paths))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Parses the arguments and runs the sub-command.

    Returns:
        The exit status: 0 done, 2 bad input (flags, config, price table, model, dataset, rows).
    """
    args = _parser().parse_args(argv)
    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.benchmark.prices import PriceTableError
    from trainer.benchmark import BenchmarkError
    from trainer.evaluate import EvaluationError
    from trainer.tfrecords import DatasetError

    command = {"inference": _inference, "sweep": _sweep, "join": _join}[args.command]
    try:
        return command(args)
    except (ConfigError, PriceTableError, BenchmarkError, EvaluationError, DatasetError) as err:
        return fail(err)


if __name__ == "__main__":
    sys.exit(main())
