"""The pool a selection picks from: its images listed by their source kind (as batch prediction
lists them), read, left out where the labelled dataset has them already (by sha256), and scored
by the model, mirrored too where the strategy asks for it (``trainer.batch_predict``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any, Optional

from components.image_input import sources
from components.image_input.sources import Listing, PredictItem
from components.select.run import SelectError
from trainer import storage
from trainer.tfrecords import MANIFEST_NAME

# What a record of the selection keeps: every class or box the model returns (no top-k).
EVERY_PREDICTION = 1_000_000


@dataclasses.dataclass
class Pool:
    """A listed pool: its items, what reads each one's bytes, and the name each is read by.

    Attributes:
        listing: the source kind's listing (items in a stable order).
        read: reads one item's bytes, given its entry of ``uris``.
        uris: what ``read`` is asked for each item (its file, or ``<file>#<n>`` for a record).
    """

    listing: Listing
    read: Callable[[str], bytes]
    uris: list[str]

    @property
    def items(self) -> list[PredictItem]:
        return self.listing.items

    def bytes_of(self, index: int) -> bytes:
        """The bytes of item ``index``."""
        return self.read(self.uris[index])


def list_pool(data: str) -> Pool:
    """The pool's images, as batch prediction lists them (any source kind).

    Raises:
        SelectError: ``data`` is a converted dataset (it is labelled already).
        SourceError: nothing to score there, or no kind claims it (the message names the kinds).
    """
    if storage.exists(storage.join(data, MANIFEST_NAME)):
        raise SelectError(
            f"{data} is a converted dataset, labelled already: give the pool of unlabelled images (a folder, a "
            "list, any source), and the dataset as dataset to leave its images out"
        )
    listing = sources.prediction_listing(data)
    if all(it.record is None for it in listing.items):
        read = storage.read_bytes
    else:
        read = sources.kind(listing.kind).prediction_reader(data)
    uris = [it.uri if it.record is None else f"{it.uri}#{it.record}" for it in listing.items]
    return Pool(listing, read, uris)


def known_digests(dataset: str) -> frozenset[str]:
    """The sha256 of every image of a converted dataset, every split (its records' ``image/sha256``).

    Raises:
        DatasetError: no dataset there, or a record that cannot be read.
    """
    from trainer.tfrecord_read import iter_split_features
    from trainer.tfrecords import load_dataset_info

    info = load_dataset_info(dataset)
    found = set()
    for split in info.splits:
        for features in iter_split_features(info, split):
            for value in features.get("image/sha256") or []:
                found.add(value.decode("ascii") if isinstance(value, bytes) else str(value))
    return frozenset(found)


def mirrored(read: Callable[[str], bytes]) -> Callable[[str], bytes]:
    """``read``, its image mirrored left to right and encoded as PNG (the flip strategies' second look)."""
    from PIL import Image, ImageOps

    def read_mirrored(uri: str) -> bytes:
        with Image.open(io.BytesIO(read(uri))) as image:
            flipped = ImageOps.mirror(image.convert("RGB") if image.mode not in ("L", "RGB") else image)
        out = io.BytesIO()
        flipped.save(out, format="PNG", compress_level=1)
        return out.getvalue()

    return read_mirrored


@dataclasses.dataclass
class Scores:
    """The pool scored.

    Attributes:
        records: item index -> its record (every class or box the model returns).
        flipped: item index -> the record of its mirror image (empty unless asked for).
        digests: item index -> the sha256 of its bytes, for every item read.
        failures: ``(item index, reason)`` of the images that could not be read or decoded.
        class_names: the model's classes.
        seconds: the scoring's wall time, both looks.
    """

    records: dict[int, dict[str, Any]]
    flipped: dict[int, dict[str, Any]]
    digests: dict[int, str]
    failures: list[tuple[int, str]]
    class_names: tuple[str, ...]
    seconds: float


def score_pool(
    pool: Pool,
    saved_model: str,
    task: Any,
    *,
    flip: bool,
    batch_size: int,
    read_threads: int,
    on_progress: Optional[Callable[..., None]] = None,
) -> Scores:
    """Scores every image of the pool (and its mirror image with ``flip``), keeping each one's sha256.

    Raises:
        TaskError: the model is not its task's export.
    """
    from trainer.batch_predict import load_predictor, score_images

    lock, digests = threading.Lock(), {}

    def read_and_digest(uri: str) -> bytes:
        data = pool.read(uri)
        with lock:
            digests[uri] = hashlib.sha256(data).hexdigest()
        return data

    predictor = load_predictor(saved_model, task)
    settings = dict(batch_size=batch_size, score_threshold=0.0, top_k=EVERY_PREDICTION, read_threads=read_threads)
    first = score_images(predictor, task, pool.uris, read_bytes=read_and_digest, on_batch=on_progress, **settings)
    records, flipped, seconds = dict(first.records), {}, first.seconds
    if flip:
        wanted = sorted(records)
        second = score_images(
            predictor, task, [pool.uris[i] for i in wanted], read_bytes=mirrored(pool.read), **settings
        )
        flipped = {wanted[i]: record for i, record in second.records}
        seconds += second.seconds
    index = {uri: n for n, uri in enumerate(pool.uris)}
    return Scores(
        records=records,
        flipped=flipped,
        digests={index[uri]: sha for uri, sha in digests.items()},
        failures=list(first.failures),
        class_names=tuple(predictor.input.class_names),
        seconds=seconds,
    )


def eligible(scores: Scores, known: frozenset[str], flip: bool) -> tuple[list[int], list[int]]:
    """``(the items that may be picked, those left out as already labelled)``, by item index.

    An item may be picked when it was scored (both looks with ``flip``) and its sha256 is not
    among ``known``.
    """
    kept, labelled = [], []
    for index in sorted(scores.records):
        if scores.digests.get(index) in known:
            labelled.append(index)
        elif not flip or index in scores.flipped:
            kept.append(index)
    return kept, labelled


def names(paths: Sequence[str], formats: Sequence[str]) -> list[str]:
    """A file name for each picked image under ``images/``: its path made safe, unique, with its format's suffix."""
    suffixes = {"png": ".png", "jpeg": ".jpg", "gif": ".gif", "bmp": ".bmp", "webp": ".webp", "tiff": ".tif"}
    out: list[str] = []
    taken: set[str] = set()
    for path, fmt in zip(paths, formats, strict=True):
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", path.strip("/")).strip("._") or "image"
        suffix = suffixes.get(fmt.lower(), "")
        if suffix and not base.lower().endswith((suffix, ".jpeg" if suffix == ".jpg" else suffix)):
            base += suffix
        name, n = base, 1
        while name.lower() in taken:
            stem, dot, ext = base.rpartition(".")
            name = f"{stem}-{n}.{ext}" if dot else f"{base}-{n}"
            n += 1
        taken.add(name.lower())
        out.append(name)
    return out
