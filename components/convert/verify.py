"""Reading a dataset back: every shard through tf.data, counts and checksums against dataset.json.

TensorFlow is imported when :func:`verify` runs, not when this module is imported.
"""

from __future__ import annotations

import collections
import hashlib
import os
import tempfile
from typing import Any

from components.convert.sources import ConvertError
from trainer.storage import is_gcs, read_bytes
from trainer.tfrecords import load_manifest, shard_checksum, shard_paths


class VerifyError(ConvertError):
    """A dataset does not match its manifest; the message lists every problem found."""


def _local_copy(path: str, data: bytes, tmpdir: str) -> str:
    """TensorFlow's gs:// reader ignores STORAGE_EMULATOR_HOST: read emulator shards from a copy."""
    if is_gcs(path) and os.environ.get("STORAGE_EMULATOR_HOST"):
        local = os.path.join(tmpdir, os.path.basename(path))
        with open(local, "wb") as f:
            f.write(data)
        return local
    return path


def verify(dataset_dir: str, decode_per_split: int = 32, batch_size: int = 256) -> dict[str, Any]:
    """Reads every shard with tf.data and checks it against ``dataset.json``.

    Checks each shard's size and CRC-32C, its record count, every record's ``image/sha256``
    against its bytes, the labels and per-class counts, and decodes up to ``decode_per_split``
    images per split with ``tf.io.decode_image`` (their size must match the record's).

    Args:
        dataset_dir: the dataset folder (local or gs://).
        decode_per_split: images decoded per split.
        batch_size: records parsed per batch.

    Returns:
        ``{"shards": n, "records": n, "decoded": n, "bytes": n}``.

    Raises:
        VerifyError: anything differs from the manifest (all problems in one message).
    """
    import tensorflow as tf

    from trainer.tfrecords import decode_image, parse_batch

    manifest = load_manifest(dataset_dir)
    classes = manifest["classes"]
    compression = manifest.get("compression") or ""
    problems: list[str] = []
    totals = {"shards": 0, "records": 0, "decoded": 0, "bytes": 0}
    with tempfile.TemporaryDirectory(prefix="verify-") as tmpdir:
        for split, info in manifest["splits"].items():
            class_counts: collections.Counter = collections.Counter()
            decoded = 0
            for shard, path in zip(info["shards"], shard_paths(dataset_dir, split, manifest), strict=True):
                try:
                    data = read_bytes(path)
                except (OSError, ValueError) as err:
                    problems.append(f"{shard['file']}: cannot read ({err})")
                    continue
                totals["shards"] += 1
                totals["bytes"] += len(data)
                if len(data) != shard["bytes"]:
                    problems.append(f"{shard['file']}: {len(data)} bytes, manifest says {shard['bytes']}")
                if "crc32c" in shard and shard_checksum(data) != shard["crc32c"]:
                    problems.append(f"{shard['file']}: crc32c differs from the manifest")
                elif "sha256" in shard and hashlib.sha256(data).hexdigest() != shard["sha256"]:  # older manifests
                    problems.append(f"{shard['file']}: sha256 differs from the manifest")
                ds = tf.data.TFRecordDataset(_local_copy(path, data, tmpdir), compression_type=compression)
                count = 0
                try:
                    for batch in ds.batch(batch_size):
                        feats = parse_batch(batch)
                        encoded = feats["image/encoded"].numpy()
                        shas = feats["image/sha256"].numpy()
                        labels = feats["image/class/label"].numpy()
                        for i, (img, sha) in enumerate(zip(encoded, shas, strict=True)):
                            if hashlib.sha256(img).hexdigest().encode() != sha:
                                key = feats["image/source_key"][i].numpy().decode()
                                problems.append(f"{shard['file']}: record {count + i} ({key}) sha256 mismatch")
                        for label in labels.tolist():
                            if label != -1 and not 0 <= label < len(classes):
                                problems.append(f"{shard['file']}: label {label} outside 0..{len(classes) - 1}")
                            class_counts[label] += 1
                        take = min(len(encoded), decode_per_split - decoded)
                        for i in range(take):
                            image = decode_image(encoded[i])
                            want = [int(feats[k][i]) for k in ("image/height", "image/width", "image/channels")]
                            got = list(image.shape)
                            if got[:2] != want[:2] or (want[2] != 2 and got[2] != want[2]):
                                problems.append(f"{shard['file']}: record {count + i} decodes to {got}, says {want}")
                        decoded += max(take, 0)
                        count += len(encoded)
                except tf.errors.OpError as err:
                    problems.append(f"{shard['file']}: unreadable by tf.data: {err.message.splitlines()[0]}")
                if count != shard["count"]:
                    problems.append(f"{shard['file']}: {count} records, manifest says {shard['count']}")
                totals["records"] += count
            totals["decoded"] += decoded
            expected = info.get("class_counts", {})
            got_counts = {name: class_counts.get(i, 0) for i, name in enumerate(classes)}
            if expected and got_counts != expected:
                problems.append(f"split {split}: class counts {got_counts} differ from the manifest {expected}")
    if problems:
        shown = "; ".join(problems[:10])
        more = f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""
        raise VerifyError(f"dataset {dataset_dir} failed verification: {shown}{more}")
    return totals
