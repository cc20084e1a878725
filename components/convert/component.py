"""KFP adapter of the convert step: parameters -> ConvertConfig, artifact -> folder, one call."""

from kfp.dsl import Dataset, Metrics, Output

from components.images import project_component


@project_component
def convert_to_tfrecords(
    source: str,
    dataset: Output[Dataset],
    metrics: Output[Metrics],
    limit_per_split: int = 0,
    target_shard_mb: float = 100.0,
    compression: str = "",
    verify: bool = True,
    source_format: str = "",
    stratify: bool = False,
    power_of_two_shards: bool = False,
    resize_height: int = 0,
    resize_width: int = 0,
    resize_mode: str = "crop",
    seed: int = 0,
    workers: int = 0,
):
    """Converts a source (folder, manifest, arrays, COCO or a built-in) into sharded TFRecords.

    0 and "" mean "none" (kfp.local cannot take None pipeline parameters).
    """
    from components.convert.step import run_step
    from trainer.config import ConvertConfig

    config = ConvertConfig(
        source=source,
        source_format=source_format or None,
        limit_per_split=limit_per_split or None,
        target_shard_mb=target_shard_mb,
        compression=compression or None,
        stratify=stratify,
        power_of_two_shards=power_of_two_shards,
        resize=(resize_height, resize_width) if resize_height and resize_width else None,
        resize_mode=resize_mode,
        seed=seed,
        workers=workers or None,
    )
    output = dataset.uri if dataset.uri.startswith("gs://") else dataset.path
    metadata, scores = run_step(config, output, verify=verify)
    dataset.metadata.update(metadata)
    for name, value in scores.items():
        metrics.log_metric(name, value)
