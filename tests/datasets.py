"""Small real datasets for tests, written through the library's own writers (records and dataset.json).

Class ``k`` of ``n`` is a bright square in cell ``k`` of a grid over a dark, noisy background:
learnable in a few steps, so a test can see the loss fall.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from trainer import tfrecord_wire, tfrecords


def make_images(count: int, num_classes: int, shape=(28, 28, 1), seed: int = 0):
    """(uint8 images ``[count, H, W, C]``, labels): class ``k`` is a bright square in grid cell ``k``."""
    rng = np.random.default_rng(seed)
    h, w, c = shape
    labels = rng.integers(0, num_classes, size=count)
    images = rng.integers(0, 40, size=(count, h, w, c), dtype=np.uint8)
    grid = int(np.ceil(np.sqrt(num_classes)))
    ch, cw = h // grid, w // grid
    for i, label in enumerate(labels):
        r, col = divmod(int(label), grid)
        images[i, r * ch : (r + 1) * ch, col * cw : (col + 1) * cw, :] = 230
    return images, labels


def _png(image: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image).save(buf, format="PNG")
    return buf.getvalue()


def _write_shard(path: Path, indices: range, images, labels, keys, classes) -> tfrecords.ShardInfo:
    blob = bytearray()
    for j in indices:
        png = _png(images[j])
        h, w, c = images[j].shape
        blob += tfrecord_wire.frame_record(
            tfrecord_wire.encode_example(
                image=png,
                image_format="png",
                height=h,
                width=w,
                channels=c,
                label=int(labels[j]),
                label_text=classes[labels[j]],
                source_key=keys[j],
                sha256=hashlib.sha256(png).hexdigest(),
            )
        )
    path.write_bytes(bytes(blob))
    return tfrecords.ShardInfo(path.name, len(indices), len(blob), tfrecord_wire.shard_checksum(blob))


Arrays = tuple[np.ndarray, np.ndarray, list[str]]  # images [N, H, W, C] uint8, labels, source keys


_SHAPE = tfrecords.ImageShape(28, 28, 1)


def dataset_info(
    splits: dict[str, tfrecords.SplitInfo],
    classes: Sequence[str] = ("class_0", "class_1"),
    image: tfrecords.ImageShape | None = _SHAPE,
    **changes: Any,
) -> tfrecords.DatasetInfo:
    """A classification dataset's manifest, in memory: the given splits, classes and image size.

    Args:
        splits: split name -> its counts and shards.
        classes: the class names.
        image: every image's size; None when they differ.
        **changes: other :class:`~trainer.tfrecords.DatasetInfo` fields (``rejected``, ``source``...).
    """
    info = tfrecords.DatasetInfo(
        schema_version=tfrecords.SCHEMA_VERSION,
        task="classification",
        source=tfrecords.SourceInfo("synthetic", "test", "synthetic"),
        classes=tuple(classes),
        image=image,
        compression=None,
        splits=dict(splits),
        rejected=0,
        rejected_reasons={},
        converted={},
        ignored={},
        empty_classes=(),
        plan_key="synthetic",
        config={},
    )
    return dataclasses.replace(info, **changes)


def write_test_dataset(
    folder: Path,
    splits: dict[str, int] | None = None,
    num_classes: int = 4,
    shape=(28, 28, 1),
    shards: int = 2,
    seed: int = 0,
    *,
    arrays: dict[str, Arrays] | None = None,
    classes: list[str] | None = None,
) -> Path:
    """Writes a classification dataset (shards and dataset.json, as the converter lays them out).

    Args:
        folder: the dataset folder (created).
        splits: split name -> examples (default train 64, validation 32); an empty split has no shards.
        num_classes: classes ``class_0``..``class_<n-1>``.
        shape: every image's ``(height, width, channels)``.
        shards: shards per non-empty split (records dealt round-robin).
        seed: the images' seed (split ``i`` uses ``seed + i``).
        arrays: split name -> (images, labels, source keys) to write instead of generated images
            (``splits``, ``num_classes``, ``shape`` and ``seed`` are then unused).
        classes: the class names of ``arrays``' labels.

    Returns:
        The folder.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if arrays is None:
        splits = {"train": 64, "validation": 32} if splits is None else splits
        classes = [f"class_{k}" for k in range(num_classes)]
        arrays = {}
        for s_index, (split, count) in enumerate(splits.items()):
            images, labels = make_images(count, num_classes, shape, seed=seed + s_index)
            arrays[split] = (images, labels, [f"test:{split}:{j}" for j in range(count)])
    infos = {}
    for split, (images, labels, keys) in arrays.items():
        count = len(labels)
        n = shards if count else 0
        files = tuple(
            _write_shard(folder / tfrecords.shard_name(split, i, n), range(i, count, n), images, labels, keys, classes)
            for i in range(n)
        )
        counts = {c: int((np.asarray(labels) == k).sum()) for k, c in enumerate(classes)}
        infos[split] = tfrecords.SplitInfo(count=count, class_counts=counts, shards=files)
    shapes = {tuple(images.shape[1:]) for images, _, _ in arrays.values() if len(images)}
    info = dataset_info(
        infos,
        classes,
        image=tfrecords.ImageShape(*shapes.pop()) if len(shapes) == 1 else None,
        source=tfrecords.SourceInfo("synthetic", "test", f"synthetic-{seed}-{len(classes)}"),
        plan_key=f"synthetic-{seed}",
    )
    tfrecords.write_dataset_info(folder, info)
    return folder
