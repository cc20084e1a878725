"""What the convert component does, as a plain function: convert, verify, summarise."""

from __future__ import annotations

import time
from typing import Any

from components.convert.convert import convert
from trainer.config import ConvertConfig


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


def run_step(
    config: ConvertConfig, output: str, verify: bool = True, progress_every_s: float = 10.0
) -> tuple[dict[str, Any], dict[str, float]]:
    """Converts (and verifies), returning the artifact metadata and the metrics to log.

    Args:
        config: the convert config.
        output: the dataset folder (the artifact's path, or its gs:// URI).
        verify: read every shard back with tf.data and check it against dataset.json.
        progress_every_s: seconds between progress lines.

    Returns:
        (Dataset metadata, metrics name -> value).
    """
    t0 = time.monotonic()
    manifest = convert(config, output, progress_every_s=progress_every_s)
    seconds = time.monotonic() - t0
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
    metadata = dataset_metadata(manifest)
    return metadata, {k: float(v) for k, v in metrics.items()}
