"""KFP adapters of the convert step: parameters -> ConvertConfig, artifacts -> folders, one call each.

``convert_to_tfrecords`` converts on one pod (worker processes). The fan-out trio
``plan_tfrecords`` -> ``write_tfrecord_shards`` (in a ``ParallelFor``) -> ``finalize_tfrecords``
spreads one conversion over many pods (pipelines/tfrecords.py).
"""

from kfp.dsl import Dataset, Input, Metrics, Output

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
    """Converts a source (image folder, manifest, arrays, COCO or a built-in) into sharded TFRecords.

    0 and "" mean "none" (kfp.local cannot take None pipeline parameters).
    """
    from components.convert.step import artifact_location, make_config, run_step
    from components.progress import reporter

    config = make_config(
        source, limit_per_split, target_shard_mb, compression, source_format, stratify,
        power_of_two_shards, resize_height, resize_width, resize_mode, seed, workers,
    )  # fmt: skip
    metadata, scores = run_step(
        config, artifact_location(dataset), verify=verify, on_progress=reporter("convert", "images")
    )
    dataset.metadata.update(metadata)
    for name, value in scores.items():
        metrics.log_metric(name, value)


@project_component
def plan_tfrecords(
    source: str,
    dataset: Output[Dataset],
    parallelism: int = 4,
    limit_per_split: int = 0,
    target_shard_mb: float = 100.0,
    compression: str = "",
    source_format: str = "",
    stratify: bool = False,
    power_of_two_shards: bool = False,
    resize_height: int = 0,
    resize_width: int = 0,
    resize_mode: str = "crop",
    seed: int = 0,
    workers: int = 0,
) -> list:
    """Plans a fan-out conversion: the dataset folder, shard ranges for up to ``parallelism`` pods.

    A single list output: kfp.local cannot loop over one field of a NamedTuple output.
    """
    from components.convert.step import artifact_location, make_config, plan_step

    config = make_config(
        source, limit_per_split, target_shard_mb, compression, source_format, stratify,
        power_of_two_shards, resize_height, resize_width, resize_mode, seed, workers,
    )  # fmt: skip
    return plan_step(config, artifact_location(dataset), parallelism)


@project_component
def write_tfrecord_shards(dataset: Input[Dataset], start: int, stop: int) -> int:
    """Writes shards ``[start, stop)`` of the plan into the planned folder; returns images written."""
    from components.convert.step import artifact_location, shards_step

    return shards_step(artifact_location(dataset), start, stop)["images"]


@project_component
def finalize_tfrecords(staged: Input[Dataset], dataset: Output[Dataset], metrics: Output[Metrics], verify: bool = True):
    """Writes dataset.json once every shard exists; the output Dataset is the planned folder."""
    from components.convert.step import artifact_location, finalize_step

    metadata, scores = finalize_step(artifact_location(staged), verify, pointer=artifact_location(dataset))
    dataset.uri = staged.uri  # the dataset stays where the workers wrote it (the pointer copy covers
    # an orchestrator that keeps the original URI)
    dataset.metadata.update(metadata)
    for name, value in scores.items():
        metrics.log_metric(name, value)
