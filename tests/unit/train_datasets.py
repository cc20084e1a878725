"""Tiny TFRecord datasets for the trainer's tests, written with the project's own schema writer.

Class ``k`` of ``n`` is a bright square in cell ``k`` of a grid over a dark, noisy background:
learnable in a few steps, so a test can see the loss fall.
"""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import numpy as np
from PIL import Image

from trainer import tfrecords


def make_images(count: int, num_classes: int, shape=(28, 28, 1), seed: int = 0):
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


def write_dataset(
    folder: Path,
    splits: dict[str, int] | None = None,
    num_classes: int = 4,
    shape=(28, 28, 1),
    shards: int = 2,
    seed: int = 0,
) -> Path:
    """Writes shards + dataset.json the way the converter does; returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    splits = {"train": 64, "validation": 32} if splits is None else splits
    classes = [f"class_{k}" for k in range(num_classes)]
    manifest_splits = {}
    for s_index, (split, count) in enumerate(splits.items()):
        images, labels = make_images(count, num_classes, shape, seed=seed + s_index)
        n = shards if count else 0
        shard_infos = []
        for i in range(n):
            name = tfrecords.shard_name(split, i, n)
            blob = bytearray()
            for j in range(i, count, n):
                png = _png(images[j])
                record = tfrecords.encode_example(
                    image=png,
                    image_format="png",
                    height=shape[0],
                    width=shape[1],
                    channels=shape[2],
                    label=int(labels[j]),
                    label_text=classes[labels[j]],
                    source_key=f"test:{split}:{j}",
                    sha256=hashlib.sha256(png).hexdigest(),
                )
                blob += tfrecords.frame_record(record)
            (folder / name).write_bytes(bytes(blob))
            shard_infos.append(
                {
                    "file": name,
                    "count": len(range(i, count, n)),
                    "bytes": len(blob),
                    "crc32c": tfrecords.shard_checksum(blob),
                }
            )
        counts = {c: int((labels == k).sum()) for k, c in enumerate(classes)}
        manifest_splits[split] = {"count": count, "class_counts": counts, "shards": shard_infos}
    manifest = {
        "schema_version": tfrecords.SCHEMA_VERSION,
        "source": {"uri": "synthetic", "format": "test", "fingerprint": f"synthetic-{seed}-{num_classes}"},
        "classes": classes,
        "image": {"height": shape[0], "width": shape[1], "channels": shape[2]},
        "compression": None,
        "splits": manifest_splits,
        "rejected": 0,
    }
    (folder / "dataset.json").write_text(json.dumps(manifest))
    return folder
