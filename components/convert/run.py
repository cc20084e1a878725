"""What the convert components do, as plain functions: build the config, convert or fan out, verify,
summarise into artifact metadata and metrics.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from components.convert.config import ConvertConfig
from components.convert.convert import convert, own_records, plan_ranges
from components.convert.publish import finalize
from components.convert.write import write_shards
from components.params import none_if_empty
from trainer import storage
from trainer.config import ConfigError
from trainer.tfrecords import BoxStats, DatasetInfo, write_dataset_info


def config_from_params(**params: Any) -> ConvertConfig:
    """The ConvertConfig from the convert components' flat parameters (the run form's names).

    The names are ConvertConfig's fields, except that ``resize`` arrives as ``resize_height`` and
    ``resize_width`` (a run form has no pair field). A field that may be None takes KFP's stand-in
    for "none" (``0``, ``""``), translated by ``components.params.none_if_empty``; parameters left
    out keep ConvertConfig's defaults.

    Raises:
        ConfigError: an unknown name, only one of the two resize sizes, or an invalid value.
    """
    params = dict(params)
    height = none_if_empty(params.pop("resize_height", None))
    width = none_if_empty(params.pop("resize_width", None))
    if (height is None) != (width is None):
        raise ConfigError(
            f"convert.resize: give both resize_height and resize_width (or neither), got {height or 0}x{width or 0}"
        )
    if height is not None:
        params["resize"] = (height, width)
    nullable = {f.name for f in dataclasses.fields(ConvertConfig) if f.default is None}
    return ConvertConfig.from_dict({k: none_if_empty(v) if k in nullable else v for k, v in params.items()})


def artifact_location(artifact: Any) -> str:
    """Where a Dataset artifact's files go: its gs:// URI (written with google-cloud-storage), else its path.

    For a gs:// artifact the local path is still created (empty): the KFP launcher uploads that
    folder after the step and fails on a missing one.
    """
    if storage.is_gcs(str(artifact.uri)):
        storage.makedirs(artifact.path)
        return artifact.uri
    return artifact.path


def dataset_metadata(info: DatasetInfo) -> dict[str, Any]:
    """The ``Dataset`` artifact's metadata: what a reader wants without opening dataset.json."""
    return {
        "schema_version": info.schema_version,
        "task": info.task,
        "classes": list(info.classes),
        "num_classes": len(info.classes),
        "image": None if info.image is None else dataclasses.asdict(info.image),
        "compression": info.compression,
        "counts": {name: s.count for name, s in info.splits.items()},
        "shards": {name: len(s.shards) for name, s in info.splits.items()},
        "source": dataclasses.asdict(info.source),
        "rejected": info.rejected,
        "empty_classes": list(info.empty_classes),
        "parent": None if info.parent is None else dataclasses.asdict(info.parent),
    }


def _metric_name(reason: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in reason.lower())


def _box_metrics(boxes: BoxStats) -> dict[str, float]:
    """A detection dataset's box statistics as metrics."""
    metrics: dict[str, float] = {
        f"boxes_{name}": getattr(boxes, name) for name in ("kept", "clipped", "dropped", "crowd")
    }
    for reason, n in boxes.dropped_reasons.items():
        metrics["boxes_dropped_" + _metric_name(reason)] = n
    metrics["negatives"] = boxes.negatives
    metrics["annotations_orphaned"] = boxes.orphan_annotations
    return metrics


def summarize(info: DatasetInfo, output: str, verify: bool, seconds: float) -> tuple[dict[str, Any], dict[str, float]]:
    """(Dataset metadata, metrics) of a finished dataset; verifies it first when asked."""
    splits = info.splits
    metrics: dict[str, float] = {f"images_{name}": s.count for name, s in splits.items()}
    metrics.update(
        images=sum(s.count for s in splits.values()),
        shards=sum(len(s.shards) for s in splits.values()),
        rejected=info.rejected,
        converted=sum(info.converted.values()),
        ignored=sum(info.ignored.values()),
        empty_classes=len(info.empty_classes),
        convert_seconds=round(seconds, 3),
        # records read and written by this conversion, and a delta's parents' (neither read nor written)
        records_written=own_records(info),
        records_reused=info.parent.records if info.parent else 0,
    )
    for reason, n in info.rejected_reasons.items():
        metrics["rejected_" + _metric_name(reason)] = n
    if info.boxes is not None:  # detection datasets
        metrics.update(_box_metrics(info.boxes))
    labels = info.source.labels
    if labels is not None:  # a labelling tool's export: its label entries rejected while scanning
        metrics["labels_rejected"] = labels.rejected
        for reason, n in labels.rejected_reasons.items():
            metrics["labels_rejected_" + _metric_name(reason)] = n
    if verify:
        from components.convert.verify import verify as verify_dataset

        report = verify_dataset(output)
        metrics["verified_records"] = report["records"]
        metrics["verified_decoded"] = report["decoded"]
    return dataset_metadata(info), {k: float(v) for k, v in metrics.items()}


def run_step(
    config: ConvertConfig,
    output: str,
    verify: bool = True,
    progress_every_s: float = 10.0,
    on_progress: Callable[[int, int], None] | None = None,
) -> tuple[dict[str, Any], dict[str, float]]:
    """Converts (and verifies) on this machine, returning the artifact metadata and the metrics.

    Args:
        config: the convert config.
        output: the dataset folder (the artifact's path, or its gs:// URI).
        verify: read every shard back with tf.data and check it against dataset.json.
        progress_every_s: seconds between progress lines.
        on_progress: called with (images done, images in total) as the shards are written.

    Returns:
        (Dataset metadata, metrics name -> value).
    """
    t0 = time.monotonic()
    manifest = convert(config, output, progress_every_s=progress_every_s, on_progress=on_progress)
    return summarize(DatasetInfo.from_json(manifest), output, verify, time.monotonic() - t0)


FANOUT_CONFIG = "_convert/config.yaml"  # the plan's config, read by every worker and by finalize


def _fanout_config(output: str) -> ConvertConfig:
    from components.image_input.sources import ConvertError

    try:
        text = storage.read_text(storage.join(output, FANOUT_CONFIG))
    except FileNotFoundError:
        raise ConvertError(f"{output} has no {FANOUT_CONFIG}: run the plan step (plan_tfrecords) first") from None
    return ConvertConfig.from_yaml(text)


def plan_step(config: ConvertConfig, output: str, parts: int) -> list[dict[str, int]]:
    """Fan-out planning: shard ranges for the workers; the config goes into the output folder."""
    ranges = plan_ranges(config, output, parts)["ranges"]
    storage.write_text(storage.join(output, FANOUT_CONFIG), config.to_yaml())
    return [{"start": a, "stop": b} for a, b in ranges]


def shards_step(output: str, start: int, stop: int) -> dict[str, Any]:
    """One fan-out worker: writes shards ``[start, stop)`` of the plan (kfp.local passes floats)."""
    return write_shards(_fanout_config(output), output, int(start), int(stop))


def finalize_step(output: str, verify: bool, pointer: str | None = None) -> tuple[dict[str, Any], dict[str, float]]:
    """Fan-out end: writes dataset.json once every shard exists; verifies; summarises.

    Args:
        output: the planned dataset folder the workers wrote.
        verify: read every shard back and check it.
        pointer: another folder (the step's own output artifact) that gets a copy of dataset.json
            whose ``shards_dir`` names ``output``, for orchestrators that ignore a changed artifact URI.
    """
    t0 = time.monotonic()
    info = DatasetInfo.from_json(finalize(_fanout_config(output), output))
    if pointer is not None and pointer.rstrip("/") != output.rstrip("/"):
        write_dataset_info(pointer, dataclasses.replace(info, shards_dir=output))
    return summarize(info, output, verify, time.monotonic() - t0)
