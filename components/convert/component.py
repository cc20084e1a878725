"""KFP adapters of the convert step: parameters -> ConvertConfig, artifacts -> folders, one call each.

``convert_to_tfrecords`` converts on one pod (worker processes). The fan-out trio
``plan_tfrecords`` -> ``write_tfrecord_shards`` (in a ``ParallelFor``) -> ``finalize_tfrecords``
spreads one conversion over many pods (pipelines/tfrecords.py).
"""

from typing import Optional

from kfp.dsl import Dataset, Input, Metrics, Output

from components.images import project_component


@project_component
def convert_to_tfrecords(
    source: str,
    dataset: Output[Dataset],
    metrics: Output[Metrics],
    limit_per_split: int = 0,
    target_shard_mb: float = 100.0,
    compression: Optional[str] = None,
    verify: bool = True,
    source_format: Optional[str] = None,
    stratify: bool = False,
    split_by: str = "path",
    power_of_two_shards: bool = False,
    resize_height: int = 0,
    resize_width: int = 0,
    resize_mode: str = "crop",
    seed: int = 0,
    workers: int = 0,
    parent: str = "",
):
    """Converts a source (image folder, manifest, arrays, COCO or a built-in) into sharded TFRecords.

    The parameters are ConvertConfig's fields (docs/tfrecords.md; ``resize`` as ``resize_height``
    and ``resize_width``). ``None``, or the stand-ins ``0`` and ``""`` that a pipeline passes
    (kfp.local refuses ``Optional[int] = None`` here and ``Optional[str] = None`` on a pipeline),
    mean "none": keep all images, no compression, detect the format, keep the size, every core.
    ``verify`` reads every shard back and checks it against dataset.json. ``parent``: a dataset
    folder this one grows from (only the images it lacks are converted; empty: none).
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.convert.run import artifact_location, config_from_params, run_step
    from components.progress import reporter

    config = config_from_params(
        source=source,
        source_format=source_format,
        limit_per_split=limit_per_split,
        target_shard_mb=target_shard_mb,
        compression=compression,
        stratify=stratify,
        split_by=split_by,
        power_of_two_shards=power_of_two_shards,
        resize_height=resize_height,
        resize_width=resize_width,
        resize_mode=resize_mode,
        seed=seed,
        workers=workers,
        parent=parent,
    )
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
    compression: Optional[str] = None,
    source_format: Optional[str] = None,
    stratify: bool = False,
    split_by: str = "path",
    power_of_two_shards: bool = False,
    resize_height: int = 0,
    resize_width: int = 0,
    resize_mode: str = "crop",
    seed: int = 0,
    workers: int = 0,
    parent: str = "",
) -> list:
    """Plans a fan-out conversion: the dataset folder, shard ranges for up to ``parallelism`` pods.

    The conversion parameters are those of ``convert_to_tfrecords``; the plan writes the config
    into the dataset folder, where every worker and the finalize step read it. A single list
    output: kfp.local cannot loop over one field of a NamedTuple output.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.convert.run import artifact_location, config_from_params, plan_step

    config = config_from_params(
        source=source,
        source_format=source_format,
        limit_per_split=limit_per_split,
        target_shard_mb=target_shard_mb,
        compression=compression,
        stratify=stratify,
        split_by=split_by,
        power_of_two_shards=power_of_two_shards,
        resize_height=resize_height,
        resize_width=resize_width,
        resize_mode=resize_mode,
        seed=seed,
        workers=workers,
        parent=parent,
    )
    return plan_step(config, artifact_location(dataset), parallelism)


@project_component
def write_tfrecord_shards(dataset: Input[Dataset], start: int, stop: int) -> int:
    """Writes shards ``[start, stop)`` of the plan into the planned folder; returns images written."""
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.convert.run import artifact_location, shards_step

    return shards_step(artifact_location(dataset), start, stop)["images"]


@project_component
def finalize_tfrecords(staged: Input[Dataset], dataset: Output[Dataset], metrics: Output[Metrics], verify: bool = True):
    """Writes dataset.json once every shard exists; the output Dataset is the planned folder."""
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.convert.run import artifact_location, finalize_step

    metadata, scores = finalize_step(artifact_location(staged), verify, pointer=artifact_location(dataset))
    dataset.uri = staged.uri  # the dataset stays where the workers wrote it (the pointer copy covers
    # an orchestrator that keeps the original URI)
    dataset.metadata.update(metadata)
    for name, value in scores.items():
        metrics.log_metric(name, value)
