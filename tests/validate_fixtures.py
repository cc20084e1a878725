"""Tiny datasets for the validate step's tests, written with the project's TFRecord writer (no TensorFlow).

The validate step never decodes an image, so a record's "image" here is a few distinct bytes: two
records are the same image exactly when they are given the same bytes. Each test builds the
records it needs (:class:`Rec`), plants its fault, and writes shards plus ``dataset.json``.
"""

from __future__ import annotations

import collections
import dataclasses
import gzip
import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from tests.datasets import dataset_info
from trainer import tfrecord_wire, tfrecords


@dataclasses.dataclass
class Rec:
    """One record to write: its key, label, image bytes (default: unique to the key) and size."""

    key: str
    label: int
    image: Optional[bytes] = None
    height: int = 32
    width: int = 32
    boxes: Optional[Sequence[Sequence[float]]] = None  # [ymin, xmin, ymax, xmax], normalised
    box_labels: Optional[Sequence[int]] = None
    extra: Optional[Mapping[str, Any]] = None

    def encoded(self, classes: Sequence[str]) -> bytes:
        image = self.image if self.image is not None else f"image of {self.key}".encode()
        box_texts = None if self.box_labels is None else [classes[k] for k in self.box_labels]
        return tfrecord_wire.encode_example(
            image=image,
            image_format="png",
            height=self.height,
            width=self.width,
            channels=3,
            label=self.label,
            label_text=classes[self.label] if self.label >= 0 else "",
            source_key=self.key,
            sha256=hashlib.sha256(image).hexdigest(),
            boxes=self.boxes,
            box_labels=self.box_labels,
            box_texts=box_texts,
            extra=self.extra,
        )


def balanced(split: str, count: int, num_classes: int, **fields: Any) -> list[Rec]:
    """``count`` records of ``split`` dealt over the classes in turn (keys ``<split>/<i>``)."""
    return [Rec(f"{split}/{i}", i % num_classes, **fields) for i in range(count)]


def write_dataset(
    folder: Path,
    splits: Mapping[str, Sequence[Rec]],
    classes: Sequence[str] = ("a", "b", "c", "d"),
    task: str = "classification",
    shards: int = 2,
    compression: Optional[str] = None,
) -> Path:
    """Writes the records as a dataset: ``shards`` shards per non-empty split and ``dataset.json``.

    Returns:
        The folder.
    """
    folder.mkdir(parents=True, exist_ok=True)
    infos = {}
    for split, recs in splits.items():
        n = min(shards, len(recs))
        files = []
        for i in range(n):
            blob = b"".join(tfrecord_wire.frame_record(r.encoded(classes)) for r in recs[i::n])
            name = tfrecords.shard_name(split, i, n, compression)
            (folder / name).write_bytes(gzip.compress(blob) if compression else blob)
            files.append(tfrecords.ShardInfo(name, len(recs[i::n]), len(blob), tfrecord_wire.shard_checksum(blob)))
        labels = collections.Counter(r.label for r in recs)
        counts = {c: labels.get(k, 0) for k, c in enumerate(classes)}
        infos[split] = tfrecords.SplitInfo(len(recs), counts, tuple(files), labels.get(tfrecords.NO_LABEL) or None)
    info = dataset_info(infos, classes, image=None, task=task, compression=compression)
    tfrecords.write_dataset_info(folder, info)
    return folder
