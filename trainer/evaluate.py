"""Reading a split's encoded images and labels, and the error every evaluation raises.

The task-specific scoring lives with each task (``trainer/tasks/<task>/evaluation.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np

if TYPE_CHECKING:
    from trainer.tfrecords import DatasetInfo

# The feature keys read (docs/CONTRACTS.md, TFRecord schema).
_ENCODED_KEY = "image/encoded"
_LABEL_KEY = "image/class/label"


class EvaluationError(ValueError):
    """The model or the data cannot be evaluated; the message says what and how to fix it."""


def read_encoded_split(
    dataset_dir: str, split: str, limit: Optional[int] = None
) -> tuple[list[bytes], np.ndarray, DatasetInfo]:
    """Reads a split's encoded images and labels into memory.

    Args:
        dataset_dir: the dataset folder.
        split: the split to read.
        limit: read at most this many examples.

    Returns:
        (encoded images, int64 labels, the dataset's manifest).
    """
    import tensorflow as tf

    from trainer import tfrecords

    info = tfrecords.load_dataset_info(dataset_dir)
    info.split_count(split)
    files = info.shard_paths(split)
    spec = {
        _ENCODED_KEY: tf.io.FixedLenFeature([], tf.string),
        _LABEL_KEY: tf.io.FixedLenFeature([], tf.int64),
    }
    records = tf.data.TFRecordDataset(files, compression_type=info.compression or "")
    if limit is not None:
        records = records.take(limit)
    images: list[bytes] = []
    labels: list[int] = []
    for batch in records.batch(1024).map(lambda s: tf.io.parse_example(s, spec)):
        images.extend(batch[_ENCODED_KEY].numpy().tolist())
        labels.extend(batch[_LABEL_KEY].numpy().tolist())
    return images, np.asarray(labels, dtype=np.int64), info
