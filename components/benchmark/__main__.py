r"""Command line: ``python -m components.benchmark {inference,join} ...`` (no Kubeflow needed).

inference  times batched inference on the exported model (in process and over REST) and prices it;
           writes what the benchmark_inference component writes: metrics.json, report.md, and
           row.json (the result row, statistics included).
join       joins row.json files (one per accelerator) into the case study's table, fastest and
           cheapest marked: report.md, chart.html, best.json.

The GPU-vs-TPU notebook's training sweep and the experiment grid: ``python -m components.sweep``.

Examples::

    python -m components.benchmark inference --model-dir models/run1 --dataset data/fmnist \
        --output-dir out/bench-cpu --accelerator cpu-8
    python -m components.benchmark join out/bench-*/row.json --output-dir out/bench
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from components.benchmark.config import BenchmarkConfig
from components.cli import (
    EXIT_OK,
    add_config_flags,
    check_folder,
    fail,
    flags_to_fields,
    load_section,
    read_json_file,
    write_files,
)
from trainer.config import ConfigError
from trainer.runtime import configure_tensorflow_env


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m components.benchmark",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit status: 0 done, 2 bad input (one 'error: ...' line).",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="{inference,join}")

    inf = sub.add_parser("inference", help="time and price batched inference on one accelerator")
    inf.add_argument("--model-dir", required=True, help="the model folder or gs:// URI (saved_model/ inside)")
    inf.add_argument("--dataset", required=True, help="the dataset folder or gs:// URI; its split's images are sent")
    inf.add_argument("--output-dir", required=True, help="where metrics.json, report.md and row.json are written")
    inf.add_argument("--config", help="YAML: BenchmarkConfig fields, or a whole-run Config with a benchmark: section")
    add_config_flags(inf, BenchmarkConfig)
    inf.add_argument("--split", default="test", help="the split whose images are sent (default test)")

    join = sub.add_parser("join", help="join row.json files into one table and chart")
    join.add_argument("files", nargs="+", help="row.json files of 'inference'")
    join.add_argument("--output-dir", required=True, help="where report.md and chart.html are written")
    return p


def _inference(args: argparse.Namespace) -> int:
    config = load_section(BenchmarkConfig, args.config, flags_to_fields(args))
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
            f"served (REST, {row.http_server}): {row.http.images_per_sec:,.1f} images/s, "
            f"p50 {row.http.latency_p50_ms:.2f} ms; {row.http_overhead:.2f}x the in-process time"
        )
    print("wrote: " + ", ".join(paths))
    return EXIT_OK


def _join(args: argparse.Namespace) -> int:
    from components.benchmark.table import best_of, render_html, render_markdown

    data = [read_json_file(f, "row.json files of 'inference'") for f in args.files]
    best = best_of(data)
    files = {"report.md": render_markdown(data), "chart.html": render_html(data), "best.json": best}
    paths = write_files(args.output_dir, files)
    print(f"{len(data)} accelerators: fastest {best['fastest']}, cheapest {best['cheapest']}")
    print("wrote: " + ", ".join(paths))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Parses the arguments and runs the sub-command.

    Returns:
        The exit status: 0 done, 2 bad input (flags, config, price table, model, dataset, rows).
    """
    args = _parser().parse_args(argv)
    configure_tensorflow_env()  # before anything imports TensorFlow
    from trainer.benchmark import BenchmarkError
    from trainer.budget.pricing import PriceTableError
    from trainer.evaluate import EvaluationError
    from trainer.tfrecords import DatasetError

    command = {"inference": _inference, "join": _join}[args.command]
    try:
        return command(args)
    except (ConfigError, PriceTableError, BenchmarkError, EvaluationError, DatasetError) as err:
        return fail(err)


if __name__ == "__main__":
    sys.exit(main())
