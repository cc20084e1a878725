"""Inference benchmark step: time the exported model in process and over REST (the local Python server), price it.

The KFP adapter (``component.py``) calls :func:`run_benchmark` and logs what it returns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Optional

from components.benchmark.config import BenchmarkConfig
from components.benchmark.rows import BenchmarkRow, Timing
from trainer import model_folder
from trainer.benchmark import BenchmarkError, TimingStats
from trainer.budget.pricing import images_per_dollar, load_price_table, lookup

DEFAULT_SPLIT = "test"
SERVED_NAME = "benchmark"
# What times the served path here: the project's own server, not TensorFlow Serving (tables say so).
LOCAL_SERVER = "local Python server"


class BatchCount:
    """Counts the timed batches of every path against the most there can be, for progress.

    Each path (in process, then served) may run up to its cap of rounds; one that stops early
    (the rounds agreed: ``target_spread``) counts as done at its cap, so the count reaches the
    total with the last path.

    Args:
        per_path: timed batches of one path at its cap (batches per round x ``rounds``).
        paths: the paths timed.
        on_progress: called with (batches counted, ``per_path x paths``); None for no progress.
    """

    def __init__(self, per_path: int, paths: int, on_progress: Optional[Callable[[int, int], None]]) -> None:
        self.per_path, self.total, self.on_progress = per_path, per_path * paths, on_progress
        self.done = self.paths_done = 0

    def batch(self) -> None:
        """One timed batch done."""
        self.done += 1
        self._report()

    def end_path(self) -> None:
        """A path finished: its batches not run (rounds it did not need) count as done."""
        self.paths_done += 1
        if self.done < self.paths_done * self.per_path:
            self.done = self.paths_done * self.per_path
            self._report()

    def _report(self) -> None:
        if self.on_progress is not None:
            self.on_progress(self.done, self.total)


def run_benchmark(
    model_dir: str,
    dataset_dir: str,
    config: BenchmarkConfig,
    split: str = DEFAULT_SPLIT,
    on_progress: Optional[Callable[[int, int], None]] = None,
) -> BenchmarkRow:
    """Times batched inference on ``<model_dir>/saved_model`` and prices it.

    Checked before any timing: the accelerator has a price, the split exists and is not empty,
    the SavedModel's signature fits the dataset's classes.

    Args:
        model_dir: the Model artifact's folder.
        dataset_dir: the Dataset artifact's folder; its split's images are the benchmark's input.
        config: what to time and on which accelerator (price table key).
        split: the split whose images are sent.
        on_progress: called with (timed batches done, timed batches in total) over both paths, the
            total at ``config.rounds`` rounds each; a path whose rounds agree early
            (``config.target_spread``) jumps to its share, and the last call is (total, total).

    Returns:
        The result row, with the full statistics (``row.summary()`` drops them); with
        ``config.http`` also the served path's timings, ``http_overhead`` (served time /
        in-process time) and ``http_server`` (the local Python server, which it timed).
    """
    from trainer.benchmark import benchmark_http, benchmark_signature, plan_batches
    from trainer.evaluate import read_encoded_split
    from trainer.tasks import task_of_model
    from trainer.tfrecords import load_dataset_info

    task = task_of_model(model_dir)
    price = lookup(load_price_table(config.price_table), config.accelerator)
    info = load_dataset_info(dataset_dir)
    count = info.split_count(split)
    saved_model = model_folder.saved_model_dir(model_dir)
    _loaded, fn = task.serving_function(saved_model, info)
    # Distinct images beyond num_images add nothing: the benchmark cycles over what it reads.
    images, _, _ = read_encoded_split(dataset_dir, split, min(count, config.num_images))
    per_path = len(plan_batches(len(images), config.num_images, config.batch_size)) * config.rounds
    progress = BatchCount(per_path, 2 if config.http else 1, on_progress)
    stats = benchmark_signature(
        fn,
        images,
        task.serving.input_name,
        config.num_images,
        config.batch_size,
        config.warmup_batches,
        config.rounds,
        on_batch=progress.batch,
        target_spread=config.target_spread,
    )
    progress.end_path()
    http = None
    if config.http:
        from components.serving.server import ModelServer

        with ModelServer(saved_model, SERVED_NAME) as server:
            url = f"{server.url.rstrip('/')}/v1/models/{SERVED_NAME}:predict"
            http = benchmark_http(
                url, images, config.num_images, config.batch_size, config.warmup_batches, config.rounds,
                progress.batch, config.target_spread,
            )  # fmt: skip
        progress.end_path()
    return BenchmarkRow(
        accelerator=price.name,
        label=price.label,
        kind=price.kind,
        cores=price.cores,
        price_per_hour=price.price_per_hour,
        price_source=price.source,
        timing=Timing.from_stats(stats),
        images_per_dollar=images_per_dollar(stats.images_per_sec, price.price_per_hour),
        http=None if http is None else Timing.from_stats(http),
        http_overhead=None if http is None else http.total_s / stats.total_s,
        http_server=None if http is None else LOCAL_SERVER,
        timing_stats=stats,
        http_stats=http,
    )


def rounds_text(stats: TimingStats) -> str:
    """How many rounds were timed and how far apart they were, in words."""
    if stats.rounds == 1:
        return "one timed round"
    spread = "" if stats.round_spread is None else f", within {stats.round_spread:.1%} of each other"
    return f"the median of {stats.rounds} timed rounds{spread}"


def render_single(row: BenchmarkRow) -> str:
    """Markdown for one accelerator's benchmark (the step's own report).

    Raises:
        BenchmarkError: the row has no full statistics (a summary row).
    """
    from components.benchmark.table import render_markdown

    if row.timing_stats is None or (row.http is not None and row.http_stats is None):
        raise BenchmarkError(
            f"render_single needs the full statistics of {row.accelerator}'s row; pass the row "
            "run_benchmark returned, not its summary()"
        )
    lines = [render_markdown([row], title=f"Inference benchmark on {row.label}")]
    stats = row.timing_stats
    lat = stats.latency_ms
    lines += [
        "",
        "Per-batch latency (in process, ms): "
        f"p50 {lat['p50']:.2f}, p95 {lat['p95']:.2f}, p99 {lat['p99']:.2f}, "
        f"mean {lat['mean']:.2f} +- {lat['std']:.2f}, min {lat['min']:.2f}, max {lat['max']:.2f}; "
        f"spread (std/mean) {row.timing.latency_spread:.1%}; "
        f"{stats.warmup_batches} warm-up batches excluded "
        f"({stats.warmup_s:.2f} s); {rounds_text(stats)}.",
    ]
    if row.http is not None and row.http_stats is not None:
        h = row.http_stats.latency_ms
        lines += [
            "",
            f"Served path (REST, {row.http_server}): {row.http.images_per_sec:.1f} images/s, "
            f"p50 {h['p50']:.2f} ms, p95 {h['p95']:.2f} ms, p99 {h['p99']:.2f} ms, "
            f"spread {row.http.latency_spread:.1%}; HTTP takes {row.http_overhead:.2f}x the "
            "in-process time.",
        ]
    return "\n".join(lines) + "\n"
