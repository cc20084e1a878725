"""What a batch prediction scores: the images of its input, listed once, with a fingerprint, and
cut into shards.

An input is any source the convert step reads (a folder or ``gs://`` prefix, a CSV or JSONL
list, a COCO file, a built-in name, an array file, an extension's kind: the source kind lists its
images, :meth:`~components.image_input.sources.SourceKind.prediction_listing`) or a converted
dataset, which is listed here (``PredictConfig.data``). Either way the result is the same list of
:class:`~components.image_input.sources.PredictItem` (where the image is, the name the
predictions carry, a COCO image id, a label where the input has one) in a stable order, and a
fingerprint that changes when the input does. No TensorFlow: the planning step lists millions of
files without it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from components.image_input import sources
from components.image_input.sources import InputError, Listing, PredictItem, digest
from trainer import storage
from trainer.tfrecords import MANIFEST_NAME, load_dataset_info

# The listing kind of a converted dataset (its items are records of its TFRecord files).
DATASET = "dataset"


def list_dataset(uri: str, split: str) -> Listing:
    """The records of one split of a converted dataset, in shard order; their labels come with them.

    Raises:
        InputError: the split does not exist or is empty.
    """
    info = load_dataset_info(uri)
    if split not in info.splits:
        raise InputError(f"{uri}: no split {split!r}; its splits: {sorted(info.splits)}")
    items = []
    for shard, path in zip(info.splits[split].shards, info.shard_paths(split), strict=True):
        for n in range(shard.count):
            items.append(PredictItem(path, f"{split}/{shard.file}#{n}", len(items) + 1, record=n))
    if not items:
        raise InputError(f"{uri}: the {split!r} split is empty; give a split with records")
    manifest = storage.read_bytes(storage.join(uri, MANIFEST_NAME))
    return Listing(DATASET, items, digest([split, hashlib.sha256(manifest).hexdigest()]), labelled=True)


def list_input(data: str, split: str = "test") -> Listing:
    """Lists a converted dataset's ``split``, or any source by its kind (module docstring).

    Raises:
        SourceError: nothing to score there (InputError), or no kind claims it; the message names
            the input kinds.
    """
    if storage.exists(storage.join(data, MANIFEST_NAME)):
        return list_dataset(data, split)
    return sources.prediction_listing(data)


def shard_ranges(count: int, per_shard: int) -> list[tuple[int, int]]:
    """``(start, stop)`` item ranges of the shards: as even as possible, none above ``per_shard``."""
    if count < 1:
        raise InputError("nothing to score: the input lists no image")
    shards = -(-count // per_shard)
    bounds = [round(i * count / shards) for i in range(shards + 1)]
    return list(zip(bounds[:-1], bounds[1:], strict=True))


def items_text(items: Sequence[PredictItem]) -> str:
    """The items as JSON lines (``items.jsonl``, what the shards read their part of)."""
    return "".join(json.dumps(it.to_dict(), separators=(",", ":")) + "\n" for it in items)


def items_from_text(text: str) -> list[PredictItem]:
    """The inverse of :func:`items_text`."""
    return [PredictItem.from_dict(json.loads(line)) for line in text.splitlines() if line.strip()]
