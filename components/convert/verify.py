"""Reading a dataset back: every shard through tf.data, counts and checksums against dataset.json.

TensorFlow is imported when :func:`verify` runs, not when this module is imported.
"""

from __future__ import annotations

import collections
import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

from components.image_input.sources import ConvertError
from trainer.storage import is_gcs, read_bytes
from trainer.tfrecord_wire import shard_checksum
from trainer.tfrecords import DatasetInfo, ShardInfo, check_parent, load_dataset_info


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


def _check_bytes(shard: ShardInfo, data: bytes, problems: list[str]) -> None:
    """The shard's size and checksum against the manifest."""
    if len(data) != shard.bytes:
        problems.append(f"{shard.file}: {len(data)} bytes, manifest says {shard.bytes}")
    if shard.crc32c is not None and shard_checksum(data) != shard.crc32c:
        problems.append(f"{shard.file}: crc32c differs from the manifest")
    elif shard.sha256 is not None and hashlib.sha256(data).hexdigest() != shard.sha256:  # older manifests
        problems.append(f"{shard.file}: sha256 differs from the manifest")


@dataclass
class _SplitCheck:
    """What one split's records are checked against, and what they add up to."""

    file: str
    classes: tuple[str, ...]
    problems: list[str]
    decode_left: int
    class_counts: collections.Counter = field(default_factory=collections.Counter)
    decoded: int = 0

    def batch(self, feats: dict[str, Any], first: int) -> int:
        """Checks one parsed batch of records (numbered from ``first``); returns how many it held."""
        from trainer.tfrecords import decode_image

        encoded = feats["image/encoded"].numpy()
        shas = feats["image/sha256"].numpy()
        for i, (img, sha) in enumerate(zip(encoded, shas, strict=True)):
            if hashlib.sha256(img).hexdigest().encode() != sha:
                key = feats["image/source_key"][i].numpy().decode()
                self.problems.append(f"{self.file}: record {first + i} ({key}) sha256 mismatch")
        for label in feats["image/class/label"].numpy().tolist():
            if label != -1 and not 0 <= label < len(self.classes):
                self.problems.append(f"{self.file}: label {label} outside 0..{len(self.classes) - 1}")
            self.class_counts[label] += 1
        take = max(min(len(encoded), self.decode_left - self.decoded), 0)
        for i in range(take):
            image = decode_image(encoded[i])
            want = [int(feats[k][i]) for k in ("image/height", "image/width", "image/channels")]
            got = list(image.shape)
            if got[:2] != want[:2] or (want[2] != 2 and got[2] != want[2]):
                self.problems.append(f"{self.file}: record {first + i} decodes to {got}, says {want}")
        self.decoded += take
        return len(encoded)


def _read_records(path: str, compression: str, check: _SplitCheck, batch_size: int) -> int:
    """Parses every record of a shard with tf.data into ``check``; returns the records read."""
    import tensorflow as tf

    from trainer.tfrecords import parse_batch

    count = 0
    try:
        for batch in tf.data.TFRecordDataset(path, compression_type=compression).batch(batch_size):
            count += check.batch(parse_batch(batch), count)
    except tf.errors.OpError as err:
        check.problems.append(f"{check.file}: unreadable by tf.data: {err.message.splitlines()[0]}")
    return count


def _own_class_counts(info: DatasetInfo, parent: DatasetInfo | None, split: str) -> dict[str, int]:
    """A split's class counts in this folder's shards: a delta's, less its parents'."""
    counts = dict(info.splits[split].class_counts)
    theirs = parent.splits.get(split) if parent is not None else None
    for name, n in (theirs.class_counts if theirs else {}).items():
        counts[name] = counts.get(name, 0) - n
    return counts


def _verify_split(
    info: DatasetInfo, split: str, tmpdir: str, decode: int, batch_size: int, problems: list[str]
) -> dict[str, int]:
    """Checks one split's shards in this folder (a delta's parents were checked when they were
    written); returns its ``shards``, ``records``, ``decoded`` and ``bytes``.
    """
    totals = {"shards": 0, "records": 0, "decoded": 0, "bytes": 0}
    check = _SplitCheck("", info.classes, problems, decode)
    for shard, path in zip(info.splits[split].shards, info.shard_paths(split), strict=True):
        if shard.dir is not None:
            continue
        try:
            data = read_bytes(path)
        except (OSError, ValueError) as err:
            problems.append(f"{shard.file}: cannot read ({err})")
            continue
        totals["shards"] += 1
        totals["bytes"] += len(data)
        _check_bytes(shard, data, problems)
        check.file = shard.file
        count = _read_records(_local_copy(path, data, tmpdir), info.compression or "", check, batch_size)
        if count != shard.count:
            problems.append(f"{shard.file}: {count} records, manifest says {shard.count}")
        totals["records"] += count
    totals["decoded"] = check.decoded
    expected = _own_class_counts(info, check_parent(info), split)
    got_counts = {name: check.class_counts.get(i, 0) for i, name in enumerate(info.classes)}
    if expected and got_counts != expected:
        problems.append(f"split {split}: class counts {got_counts} differ from the manifest {expected}")
    return totals


def verify(dataset_dir: str, decode_per_split: int = 32, batch_size: int = 256) -> dict[str, Any]:
    """Reads every shard with tf.data and checks it against ``dataset.json`` (a delta: its own shards).

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
    info = load_dataset_info(dataset_dir)
    problems: list[str] = []
    totals = collections.Counter({"shards": 0, "records": 0, "decoded": 0, "bytes": 0})
    with tempfile.TemporaryDirectory(prefix="verify-") as tmpdir:
        for split in info.splits:
            totals.update(_verify_split(info, split, tmpdir, decode_per_split, batch_size, problems))
    if problems:
        shown = "; ".join(problems[:10])
        more = f" (and {len(problems) - 10} more)" if len(problems) > 10 else ""
        raise VerifyError(f"dataset {dataset_dir} failed verification: {shown}{more}")
    return dict(totals)
