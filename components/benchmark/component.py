"""KFP components: the inference benchmark per accelerator and the joined report."""

from typing import Optional

from kfp.dsl import HTML, Dataset, Input, Markdown, Metrics, Model, Output

from components.images import project_component


@project_component
def benchmark_inference(
    model: Input[Model],
    dataset: Input[Dataset],
    metrics: Output[Metrics],
    report: Output[Markdown],
    num_images: int = 3200,
    batch_size: int = 64,
    accelerator: str = "cpu-8",
    http: bool = True,
    warmup_batches: int = 3,
    price_table: Optional[str] = None,
    split: str = "test",
    rounds: int = 3,
    target_spread: Optional[float] = None,
) -> dict:
    """Times batched inference on the exported SavedModel (and over REST) and prices it.

    Args:
        model: the trained model folder (``saved_model/`` inside).
        dataset: the TFRecord dataset; its split's images are sent.
        metrics: images_per_sec, latency_p50/p95/p99_ms, latency_spread, images_per_dollar, ...
        report: Markdown table for this accelerator.
        num_images: images timed (the case study: 3,200).
        batch_size: images per batch (the case study: 64).
        accelerator: the price table key of what this runs on (cpu-8, v100, tpu-v3-8, ...).
        http: also time the served path through the local model server's REST API.
        warmup_batches: untimed batches first.
        price_table: a YAML price table overriding the defaults (a path in the container).
        split: the split whose images are sent.
        rounds: timed rounds over all images, the median reported (the most, with ``target_spread``).
        target_spread: stop timing once the rounds agree within this share (0.05: 5%); 0 or None
            always runs ``rounds``.

    Returns:
        The result row without the nested statistics (``BenchmarkRow.summary().to_dict()``), for
        the join step.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.benchmark.config import BenchmarkConfig
    from components.benchmark.run import render_single, run_benchmark
    from components.params import none_if_empty
    from components.progress import reporter

    config = BenchmarkConfig(
        num_images=num_images,
        batch_size=batch_size,
        warmup_batches=warmup_batches,
        rounds=rounds,
        target_spread=none_if_empty(target_spread),  # 0: the run form's stand-in for none
        accelerator=accelerator,
        price_table=price_table,
        http=http,
    )
    row = run_benchmark(model.path, dataset.path, config, split, on_progress=reporter("benchmark", "batches"))
    for name, value in row.scalar_metrics().items():
        metrics.log_metric(name, value)
    with open(report.path, "w", encoding="utf-8") as f:
        f.write(render_single(row))
    return row.summary().to_dict()


@project_component
def join_benchmarks(results: list, report: Output[Markdown], chart: Output[HTML]) -> dict:
    """Joins per-accelerator results into the case study's table, fastest and cheapest marked.

    Args:
        results: the rows of ``benchmark_inference`` (``dsl.Collected`` over the fan-out; read back
            with ``BenchmarkRow.from_dict``).
        report: the Markdown table.
        chart: an HTML page with the table and bar charts (inline SVG).

    Returns:
        ``fastest`` and ``cheapest``: the accelerators' names.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.benchmark.table import best_of, render_html, render_markdown

    with open(report.path, "w", encoding="utf-8") as f:
        f.write(render_markdown(results))
    with open(chart.path, "w", encoding="utf-8") as f:
        f.write(render_html(results))
    return best_of(results)
