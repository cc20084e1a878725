"""Inference benchmark step: time the exported model in process and over REST, price the result.

The KFP adapter (``component.py``) calls :func:`run_benchmark` and logs what it returns.
"""

from __future__ import annotations

import os
from typing import Any

from components.benchmark.prices import images_per_dollar, load_price_table, lookup
from trainer.config import BenchmarkConfig

DEFAULT_SPLIT = "test"
SERVED_NAME = "benchmark"


def run_benchmark(
    model_dir: str,
    dataset_dir: str,
    config: BenchmarkConfig,
    split: str = DEFAULT_SPLIT,
) -> dict[str, Any]:
    """Times batched inference on ``<model_dir>/saved_model`` and prices it.

    Checked before any timing: the accelerator has a price, the split exists and is not empty,
    the SavedModel's signature fits the dataset's classes.

    Args:
        model_dir: the Model artifact's folder.
        dataset_dir: the Dataset artifact's folder; its split's images are the benchmark's input.
        config: what to time and on which accelerator (price table key).
        split: the split whose images are sent.

    Returns:
        One result row: ``accelerator``, ``label``, ``kind``, ``cores``, ``price_per_hour``,
        ``price_source``, ``num_images``, ``batch_size``, ``time_s``, ``images_per_sec``,
        ``latency_p50_ms``/``p95``/``p99``, ``latency_spread``, ``images_per_dollar`` and,
        with ``config.http``, the same timings prefixed ``http_`` and ``http_overhead`` (served
        time / in-process time); also ``in_process`` and ``http`` with the full statistics.
    """
    from trainer.benchmark import benchmark_http, benchmark_signature
    from trainer.evaluate import read_encoded_split
    from trainer.tasks import task_of_model
    from trainer.tfrecords import load_manifest, split_count

    task = task_of_model(model_dir)
    price = lookup(load_price_table(config.price_table), config.accelerator)
    manifest = load_manifest(dataset_dir)
    count = split_count(manifest, split)
    saved_model = os.path.join(model_dir, "saved_model")
    _loaded, fn = task.serving_function(saved_model, manifest)
    # Distinct images beyond num_images add nothing: the benchmark cycles over what it reads.
    images, _, _ = read_encoded_split(dataset_dir, split, min(count, config.num_images))
    stats = benchmark_signature(
        fn, images, task.serving.input_name, config.num_images, config.batch_size, config.warmup_batches, config.rounds
    )
    row: dict[str, Any] = {
        "accelerator": price.name,
        "label": price.label,
        "kind": price.kind,
        "cores": price.cores,
        "price_per_hour": price.price_per_hour,
        "price_source": price.source,
        **_flat("", stats),
        "images_per_dollar": images_per_dollar(stats.images_per_sec, price.price_per_hour),
        "in_process": stats.to_dict(),
    }
    if config.http:
        from components.serving.server import ModelServer

        with ModelServer(saved_model, SERVED_NAME) as server:
            url = f"{server.url.rstrip('/')}/v1/models/{SERVED_NAME}:predict"
            http = benchmark_http(
                url, images, config.num_images, config.batch_size, config.warmup_batches, config.rounds
            )
        row.update(_flat("http_", http))
        row["http_overhead"] = http.total_s / stats.total_s
        row["http"] = http.to_dict()
    return row


def _flat(prefix: str, stats: Any) -> dict[str, Any]:
    return {
        f"{prefix}num_images": stats.num_images,
        f"{prefix}batch_size": stats.batch_size,
        f"{prefix}time_s": stats.total_s,
        f"{prefix}images_per_sec": stats.images_per_sec,
        f"{prefix}latency_p50_ms": stats.latency_ms["p50"],
        f"{prefix}latency_p95_ms": stats.latency_ms["p95"],
        f"{prefix}latency_p99_ms": stats.latency_ms["p99"],
        f"{prefix}latency_spread": stats.spread,
    }


# The scalar metrics the component logs (Metrics artifacts hold numbers only).
METRIC_KEYS = (
    "images_per_sec",
    "time_s",
    "latency_p50_ms",
    "latency_p95_ms",
    "latency_p99_ms",
    "latency_spread",
    "price_per_hour",
    "images_per_dollar",
    "http_images_per_sec",
    "http_time_s",
    "http_latency_p50_ms",
    "http_latency_p95_ms",
    "http_latency_p99_ms",
    "http_latency_spread",
    "http_overhead",
)


def scalar_metrics(row: dict[str, Any]) -> dict[str, float]:
    """The numeric metrics of a result row, for a ``Metrics`` artifact (None values left out)."""
    return {k: float(row[k]) for k in METRIC_KEYS if row.get(k) is not None}


def summary_row(row: dict[str, Any]) -> dict[str, Any]:
    """A result row without the nested statistics: what the join step needs (small, JSON-able)."""
    return {k: v for k, v in row.items() if k not in ("in_process", "http")}


def render_single(row: dict[str, Any]) -> str:
    """Markdown for one accelerator's benchmark (the step's own report)."""
    from components.benchmark.table import render_markdown

    lines = [render_markdown([row], title=f"Inference benchmark on {row['label']}")]
    lat = row["in_process"]["latency_ms"]
    lines += [
        "",
        "Per-batch latency (in process, ms): "
        f"p50 {lat['p50']:.2f}, p95 {lat['p95']:.2f}, p99 {lat['p99']:.2f}, "
        f"mean {lat['mean']:.2f} +- {lat['std']:.2f}, min {lat['min']:.2f}, max {lat['max']:.2f}; "
        f"spread (std/mean) {row['latency_spread']:.1%}; "
        f"{row['in_process']['warmup_batches']} warm-up batches excluded "
        f"({row['in_process']['warmup_s']:.2f} s).",
    ]
    if "http" in row:
        h = row["http"]["latency_ms"]
        lines += [
            "",
            f"Served path (REST, TensorFlow Serving API): {row['http_images_per_sec']:.1f} images/s, "
            f"p50 {h['p50']:.2f} ms, p95 {h['p95']:.2f} ms, p99 {h['p99']:.2f} ms, "
            f"spread {row['http_latency_spread']:.1%}; HTTP takes {row['http_overhead']:.2f}x the "
            "in-process time.",
        ]
    return "\n".join(lines) + "\n"
