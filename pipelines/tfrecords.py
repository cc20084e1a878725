"""The ``tfrecords`` pipeline: one conversion spread over many pods.

plan (scan the source, lay out shards, split them into ranges) -> ``ParallelFor`` over the ranges
(each pod writes its shards, with worker processes inside) -> finalize (``dataset.json`` once every
range succeeded, then verify). Runs unchanged on a cluster and under kfp.local. No TensorFlow here.
"""

from kfp import dsl
from kfp.dsl import Dataset

from components.convert.component import finalize_tfrecords, plan_tfrecords, write_tfrecord_shards
from components.convert.config import ConvertConfig
from pipelines import platform


@platform.pipeline(
    name="tfrecords",
    description="Converts images (folder, CSV/JSONL manifest, .npz, IDX, COCO or a built-in dataset) "
    "into sharded, verified TFRecords, fanned out over pods.",
)
def pipeline(
    source: str = ConvertConfig.__dataclass_fields__["source"].default,
    parallelism: int = 4,
    limit_per_split: int = 0,
    target_shard_mb: float = 100.0,
    compression: str = "",
    power_of_two_shards: bool = False,
    stratify: bool = False,
    resize_height: int = 0,
    resize_width: int = 0,
    resize_mode: str = "crop",
    seed: int = 0,
    workers: int = 0,
    verify: bool = True,
) -> Dataset:
    """Plans, writes shard ranges in parallel pods, and finalizes one dataset.

    Args:
        source: image folder, manifest, .npz, IDX folder, COCO JSON (local or gs://) or a built-in name.
        parallelism: pods writing shards at the same time (ranges of whole shards).
        limit_per_split: keep at most this many images per split; 0 keeps all.
        target_shard_mb: shard size to aim for.
        compression: "GZIP" or "" (none).
        power_of_two_shards: round each split's shard count up to a power of two.
        stratify: keep the class balance in every split.
        resize_height: resize images to this height (with resize_width); 0 keeps them.
        resize_width: resize images to this width; 0 keeps them.
        resize_mode: "crop" or "pad" to keep the aspect ratio.
        seed: salt of the split hash.
        workers: processes per pod; 0 uses every core.
        verify: read every shard back and check it against dataset.json.

    Returns:
        The dataset folder (shards + dataset.json), with counts, shards and classes in its metadata.
    """
    plan = plan_tfrecords(
        source=source,
        parallelism=parallelism,
        limit_per_split=limit_per_split,
        target_shard_mb=target_shard_mb,
        compression=compression,
        power_of_two_shards=power_of_two_shards,
        stratify=stratify,
        resize_height=resize_height,
        resize_width=resize_width,
        resize_mode=resize_mode,
        seed=seed,
        workers=workers,
    ).set_display_name("plan")
    plan.set_caching_options(False)  # the plan checks the output folder, which caching cannot see
    with dsl.ParallelFor(plan.outputs["Output"], parallelism=64) as part:
        shards = write_tfrecord_shards(
            dataset=plan.outputs["dataset"], start=part.start, stop=part.stop
        ).set_display_name("write shards")
        shards.set_caching_options(False)
        shards.set_retry(num_retries=2)  # a restarted worker skips the shards it finished
    done = finalize_tfrecords(staged=plan.outputs["dataset"], verify=verify).set_display_name("finalize")
    done.after(shards)
    done.set_caching_options(False)
    return done.outputs["dataset"]
