"""What the convert components do, as plain functions: build the config, convert or fan out, verify,
summarise into artifact metadata and metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from components.convert.convert import convert, finalize, plan_ranges, write_shards
from trainer.config import ConvertConfig


def make_config(
    source: str,
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
) -> ConvertConfig:
    """A ConvertConfig from component parameters, where 0 and "" mean None (kfp.local has no None)."""
    if bool(resize_height) != bool(resize_width):
        from trainer.config import ConfigError

        raise ConfigError(
            f"convert.resize: give both resize_height and resize_width (or neither), got {resize_height}x{resize_width}"
        )
    return ConvertConfig(
        source=source,
        source_format=source_format or None,
        limit_per_split=limit_per_split or None,
        target_shard_mb=target_shard_mb,
        compression=compression or None,
        stratify=stratify,
        power_of_two_shards=power_of_two_shards,
        resize=(resize_height, resize_width) if resize_height else None,
        resize_mode=resize_mode,
        seed=seed,
        workers=workers or None,
    )


def artifact_location(artifact: Any) -> str:
    """Where a Dataset artifact's files go: its gs:// URI (written with google-cloud-storage), else its path.

    For a gs:// artifact the local path is still created (empty): the KFP launcher uploads that
    folder after the step and fails on a missing one.
    """
    if str(artifact.uri).startswith("gs://"):
        import os

        os.makedirs(artifact.path, exist_ok=True)
        return artifact.uri
    return artifact.path


def dataset_metadata(manifest: dict[str, Any]) -> dict[str, Any]:
    """The ``Dataset`` artifact's metadata: what a reader wants without opening dataset.json."""
    splits = manifest["splits"]
    return {
        "schema_version": manifest["schema_version"],
        "classes": manifest["classes"],
        "num_classes": len(manifest["classes"]),
        "image": manifest["image"],
        "compression": manifest["compression"],
        "counts": {name: s["count"] for name, s in splits.items()},
        "shards": {name: len(s["shards"]) for name, s in splits.items()},
        "source": manifest["source"],
        "rejected": manifest["rejected"],
    }


def summarize(
    manifest: dict[str, Any], output: str, verify: bool, seconds: float
) -> tuple[dict[str, Any], dict[str, float]]:
    """(Dataset metadata, metrics) of a finished dataset; verifies it first when asked."""
    total = sum(s["count"] for s in manifest["splits"].values())
    metrics: dict[str, float] = {f"images_{name}": s["count"] for name, s in manifest["splits"].items()}
    metrics.update(
        images=total,
        shards=sum(len(s["shards"]) for s in manifest["splits"].values()),
        rejected=manifest["rejected"],
        converted=sum(manifest.get("converted", {}).values()),
        ignored=sum(manifest.get("ignored", {}).values()),
        convert_seconds=round(seconds, 3),
    )
    for reason, n in manifest.get("rejected_reasons", {}).items():
        metrics["rejected_" + "".join(c if c.isalnum() else "_" for c in reason.lower())] = n
    if verify:
        from components.convert.verify import verify as verify_dataset

        report = verify_dataset(output)
        metrics["verified_records"] = report["records"]
        metrics["verified_decoded"] = report["decoded"]
    return dataset_metadata(manifest), {k: float(v) for k, v in metrics.items()}


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
    return summarize(manifest, output, verify, time.monotonic() - t0)


FANOUT_CONFIG = "_convert/config.yaml"  # the plan's config, read by every worker and by finalize


def _fanout_config(output: str) -> ConvertConfig:
    from components.convert.sources import ConvertError
    from components.convert.storage import Output

    text = Output(output).read_text(FANOUT_CONFIG)
    if text is None:
        raise ConvertError(f"{output} has no {FANOUT_CONFIG}: run the plan step (plan_tfrecords) first")
    return ConvertConfig.from_yaml(text)


def plan_step(config: ConvertConfig, output: str, parts: int) -> list[dict[str, int]]:
    """Fan-out planning: shard ranges for the workers; the config goes into the output folder."""
    from components.convert.storage import Output

    ranges = plan_ranges(config, output, parts)["ranges"]
    out = Output(output)
    out.makedirs()
    out.write_text(FANOUT_CONFIG, config.to_yaml())
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
    import json

    from components.convert.storage import Output

    t0 = time.monotonic()
    manifest = finalize(_fanout_config(output), output)
    if pointer is not None and pointer.rstrip("/") != output.rstrip("/"):
        target = Output(pointer)
        target.makedirs()
        target.write_text("dataset.json", json.dumps({**manifest, "shards_dir": output}, indent=1))
    return summarize(manifest, output, verify, time.monotonic() - t0)
