"""The TFRecord schema of this project: what one record holds, written and read in one place.

One ``tf.train.Example`` per image (docs/CONTRACTS.md, "TFRecord schema"). The writing half is
:mod:`trainer.tfrecord_wire` (pure Python, so that the converter's worker processes never import
TensorFlow); the reading half here (:data:`FEATURE_SPEC`, :func:`decode_example`,
:func:`parse_batch`, :func:`decode_image`) imports TensorFlow lazily, inside the functions, so
importing this module stays cheap.

A dataset folder holds ``<split>-<i:05d>-of-<n:05d>.tfrecord[.gz]`` shards and a ``dataset.json``
manifest written last, typed as :class:`DatasetInfo`: :func:`load_dataset_info` reads and checks it,
:meth:`DatasetInfo.shard_paths` lists a split's shards and :meth:`DatasetInfo.split_count` its examples.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from trainer import records, storage

SCHEMA_VERSION = 2
# Versions this code reads: 1 had no ``columns`` (a dataset converted then reads as having none).
READABLE_VERSIONS = (1, 2)
# The kinds of an ``extra/`` column in ``dataset.json``'s ``columns``.
COLUMN_KINDS = ("string", "int", "float", "mixed")
MANIFEST_NAME = "dataset.json"
REJECTED_NAME = "rejected.jsonl"
KEYS_NAME = "keys.jsonl"  # the items a dataset holds (its own, not its parents'): what a delta leaves out
IMAGE_FORMATS = ("png", "jpeg", "gif", "bmp")

# The features every record has, with their kind; FEATURE_SPEC turns this into TensorFlow specs.
SCALAR_FEATURES: dict[str, str] = {
    "image/encoded": "bytes",
    "image/format": "bytes",
    "image/height": "int64",
    "image/width": "int64",
    "image/channels": "int64",
    "image/class/label": "int64",
    "image/class/text": "bytes",
    "image/source_key": "bytes",
    "image/sha256": "bytes",
}
# Per-box lists; present (maybe empty) only in detection datasets.
LIST_FEATURES: dict[str, str] = {
    "image/object/bbox/xmin": "float",
    "image/object/bbox/ymin": "float",
    "image/object/bbox/xmax": "float",
    "image/object/bbox/ymax": "float",
    "image/object/class/label": "int64",
    "image/object/class/text": "bytes",
    "image/object/is_crowd": "int64",
}
# Images without an image-level class (detection sources) store this label and an empty text.
NO_LABEL = -1


class DatasetError(ValueError):
    """A folder or manifest is not a usable dataset; the message says what is wrong and the fix."""


def shard_name(split: str, index: int, count: int, compression: str | None = None) -> str:
    """``<split>-<i:05d>-of-<n:05d>.tfrecord`` (``.gz`` added for GZIP)."""
    name = f"{split}-{index:05d}-of-{count:05d}.tfrecord"
    return name + ".gz" if compression == "GZIP" else name


# --------------------------------------------------------------------------------------------
# Reading: TensorFlow, imported lazily.
# --------------------------------------------------------------------------------------------


def feature_spec() -> dict[str, Any]:
    """The ``tf.io`` parsing spec of a record: fixed scalars, ragged per-box lists."""
    import tensorflow as tf

    dtypes = {"bytes": tf.string, "int64": tf.int64, "float": tf.float32}
    spec: dict[str, Any] = {}
    for name, kind in SCALAR_FEATURES.items():
        default = NO_LABEL if name == "image/class/label" else ("" if kind == "bytes" else None)
        spec[name] = tf.io.FixedLenFeature([], dtypes[kind], default_value=default)
    for name, kind in LIST_FEATURES.items():
        spec[name] = tf.io.RaggedFeature(dtypes[kind], row_splits_dtype=tf.int64)
    return spec


def __getattr__(name: str) -> Any:
    # FEATURE_SPEC is built on first use so that importing this module does not import TensorFlow.
    if name == "FEATURE_SPEC":
        spec = feature_spec()
        globals()["FEATURE_SPEC"] = spec
        return spec
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def decode_example(serialized: Any) -> dict[str, Any]:
    """Parses one serialized record into tensors (box lists as 1-D tensors, maybe empty)."""
    import tensorflow as tf

    return tf.io.parse_single_example(serialized, feature_spec())


def parse_batch(serialized_batch: Any) -> dict[str, Any]:
    """Parses a batch (1-D string tensor) of records; box lists come back as ragged tensors."""
    import tensorflow as tf

    return tf.io.parse_example(serialized_batch, feature_spec())


def decode_image(encoded: Any, channels: int = 0) -> Any:
    """Decodes ``image/encoded`` (any stored format) to a uint8 ``[H, W, C]`` tensor."""
    import tensorflow as tf

    return tf.io.decode_image(encoded, channels=channels, expand_animations=False)


# --------------------------------------------------------------------------------------------
# The manifest.
# --------------------------------------------------------------------------------------------


class _ManifestPart(records.Record):
    """A strict record of ``dataset.json``: an unknown or missing key is a DatasetError naming it."""

    _error = DatasetError
    _hint = "re-run the convert step"


@dataclasses.dataclass(frozen=True)
class ShardInfo(_ManifestPart):
    """One shard file of a split: its name, records, size and checksum (``crc32c``, base64);
    ``dir``: the folder holding it when that is a parent dataset's (a delta's), else absent.
    """

    _omit_empty = ("crc32c", "sha256", "dir")

    file: str
    count: int
    bytes: int
    crc32c: str | None = None
    sha256: str | None = None  # the checksum of manifests written before crc32c
    dir: str | None = None


@dataclasses.dataclass(frozen=True)
class SplitInfo(_ManifestPart):
    """One split: its examples, per-class counts (by class name) and shards in order."""

    _omit_empty = ("unlabelled",)

    count: int
    class_counts: dict[str, int]
    shards: tuple[ShardInfo, ...]
    unlabelled: int | None = None  # records without an image-level class (-1), when there are any


@dataclasses.dataclass(frozen=True)
class ImageShape(_ManifestPart):
    """The size every image of the dataset has (absent when the sizes differ)."""

    height: int
    width: int
    channels: int


@dataclasses.dataclass(frozen=True)
class LabelSource(_ManifestPart):
    """What a labelling tool's export (YOLO, Pascal VOC, Label Studio) gave and what was made of it.

    Attributes:
        tool: the layout the labels came in (the source kind's name: ``yolo``, ``voc``, ``label-studio``).
        class_ids: class name -> the tool's own id of it (YOLO's class number), for every class; empty
            where the tool names its classes (VOC, Label Studio).
        rejected: label entries rejected while scanning (a bad label line, a rotated rectangle), each a
            ``rejected.jsonl`` row naming its file and line.
        rejected_reasons: them by kind of reason.
    """

    _omit_empty = ("class_ids",)

    tool: str
    rejected: int
    rejected_reasons: dict[str, int]
    class_ids: dict[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class SourceInfo(_ManifestPart):
    """Where the images came from: the source URI or built-in name, its kind and its fingerprint;
    for a labelling tool's export, what became of its labels (``labels``, absent otherwise).
    """

    _omit_empty = ("labels",)

    uri: str
    format: str
    fingerprint: str
    labels: LabelSource | None = None


@dataclasses.dataclass(frozen=True)
class ParentInfo(_ManifestPart):
    """The dataset a delta grew from: its folder, its ``plan_key`` (``fingerprint``: what identifies
    its records) and the records it and its own parents hold (``records``: reused, not read).
    """

    uri: str
    fingerprint: str
    records: int


@dataclasses.dataclass(frozen=True)
class BoxStats(_ManifestPart):
    """What became of the boxes of a detection source (rejected.jsonl lists the dropped ones)."""

    kept: int
    clipped: int
    dropped: int
    dropped_reasons: dict[str, int]
    crowd: int
    negatives: int  # images kept without any box
    orphan_annotations: int


@dataclasses.dataclass(frozen=True)
class DatasetInfo(_ManifestPart):
    """The typed content of ``dataset.json``: every key it has, read and written in one place.

    A strict record (``trainer.records``), as are its parts: an unknown or missing key is a
    :class:`DatasetError` that names it.

    Attributes:
        schema_version: the record schema (``SCHEMA_VERSION``).
        task: ``classification`` or ``detection``.
        source: where the images came from.
        classes: class names; labels index into them.
        image: the common image size, None when sizes differ.
        compression: ``GZIP`` or None.
        splits: split name -> counts and shards, in the converter's split order.
        rejected: images rejected (rejected.jsonl).
        rejected_reasons: rejections by kind of reason.
        converted: images converted to a stored format, by conversion.
        ignored: files skipped while scanning, by why.
        empty_classes: class folders without images.
        plan_key: the conversion plan's key (an unchanged re-run is up to date).
        config: the ConvertConfig the dataset was made with, as a dict.
        boxes: box statistics of detection datasets, else None.
        columns: the ``extra/<name>`` features a CSV or JSONL manifest kept, name -> kind
            (``string``, ``int``, ``float``, or ``mixed`` when rows disagree); empty for other
            sources and for datasets of schema version 1.
        shards_dir: where the shards are when not next to dataset.json (a fan-out's pointer copy).
        parent: the dataset this one is a delta of, or None. A delta's folder holds only the
            shards of the items its parents lack; its ``splits`` count the union and list the
            parents' shards too, each with its ``dir``.
        location: the folder (local or gs://) the info was read from; set by
            :func:`load_dataset_info`, not a key of ``dataset.json`` and not compared. None for an
            info made in memory (the converter's, before it is written).
    """

    _omit_empty = ("boxes", "shards_dir", "columns", "parent")

    schema_version: int
    task: str
    source: SourceInfo
    classes: tuple[str, ...]
    image: ImageShape | None
    compression: str | None
    splits: dict[str, SplitInfo]
    rejected: int
    rejected_reasons: dict[str, int]
    converted: dict[str, int]
    ignored: dict[str, int]
    empty_classes: tuple[str, ...]
    plan_key: str
    config: dict[str, Any]
    boxes: BoxStats | None = None
    shards_dir: str | None = None
    columns: dict[str, str] = dataclasses.field(default_factory=dict)
    parent: ParentInfo | None = None
    location: str | None = records.field(data=False, default=None, compare=False)

    @classmethod
    def from_json(cls, data: Any, where: str = MANIFEST_NAME) -> DatasetInfo:
        """The info of a parsed ``dataset.json`` (its ``location`` is None: the loader sets it).

        Raises:
            DatasetError: another schema version, unknown or missing keys, or a malformed part.
        """
        if isinstance(data, dict) and "schema_version" in data and data["schema_version"] not in READABLE_VERSIONS:
            raise DatasetError(
                f"{where} has schema_version {data['schema_version']}, this code reads "
                f"{', '.join(map(str, READABLE_VERSIONS))}; "
                "re-run the convert step with this version"
            )
        return cls.from_dict(data, f"{where}: ")

    def to_json(self) -> dict[str, Any]:
        """The ``dataset.json`` object (:meth:`from_json` reads it back to an equal info)."""
        return self.to_dict()

    def to_text(self) -> str:
        """``dataset.json``'s text."""
        return json.dumps(self.to_json(), indent=1)

    @property
    def where(self) -> str:
        """How error messages name the dataset: its folder, or "the dataset" for an info made in memory."""
        return self.location or "the dataset"

    def split_count(self, split: str) -> int:
        """The number of examples in a split; errors if the split is missing or empty.

        Raises:
            DatasetError: no such split, or a split with no examples or no shards.
        """
        if split not in self.splits:
            raise DatasetError(
                f"split {split!r} is not in {self.where}; it has {sorted(self.splits)}. "
                "Pick one of those, or convert with that split"
            )
        info = self.splits[split]
        if info.count < 1 or not info.shards:
            raise DatasetError(
                f"split {split!r} of {self.where} is empty ({info.count} examples, {len(info.shards)} "
                "shards); convert with a larger limit_per_split or other split shares"
            )
        return info.count

    @property
    def records(self) -> int:
        """The records of every split, the parents' included."""
        return sum(s.count for s in self.splits.values())

    def own_shards(self, split: str) -> list[ShardInfo]:
        """The shards of a split this dataset's folder holds (a delta's: not its parents')."""
        return [s for s in self.splits[split].shards if s.dir is None]

    def shard_paths(self, split: str) -> list[str]:
        """The shard files of one split, in order, as paths/URIs: a delta's parents' shards included.

        They sit next to ``dataset.json`` (``location``), or under ``shards_dir`` when the manifest
        has one (a pipeline step whose output artifact only points at a dataset written elsewhere);
        a parent's shards in the parent's folder (their ``dir``).
        This is the one place that turns a manifest into shard paths: training, evaluation, the
        benchmark, the serving checks' known examples and verify all read shards through it.

        Raises:
            DatasetError: the split is missing (an empty split has no shards: :meth:`split_count`
                refuses it).
            ValueError: the info has neither ``shards_dir`` nor ``location`` (it was not read from a
                folder: read it with :func:`load_dataset_info`).
        """
        if split not in self.splits:
            self.split_count(split)  # raises the one "split is not in" error
        base = self.shards_dir or self.location
        if base is None:
            raise ValueError(
                "this DatasetInfo has no location and no shards_dir, so its shards cannot be found; "
                "expected an info read by load_dataset_info(folder)"
            )
        return [storage.join(s.dir or base, s.file) for s in self.splits[split].shards]


def load_dataset_info(dataset_dir: str) -> DatasetInfo:
    """Reads and checks ``<dataset_dir>/dataset.json`` (a local folder or a gs:// URI).

    This is the one reader of ``dataset.json``: every step and the trainer read a dataset through it.
    A delta's parents are checked here (each there, each the one the delta was made from).

    Args:
        dataset_dir: the dataset folder (a ``Dataset`` artifact's path or URI).

    Returns:
        The info, with ``location`` set to ``dataset_dir``.

    Raises:
        DatasetError: the folder has no ``dataset.json``, or it is malformed or of another schema;
            or it is a delta whose parent is gone or changed.
    """
    dataset_dir = str(dataset_dir)
    path = storage.join(dataset_dir, MANIFEST_NAME)
    try:
        text = storage.read_text(path)
    except FileNotFoundError:
        raise DatasetError(f"not a dataset: {dataset_dir} has no {MANIFEST_NAME}; run the convert step first") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise DatasetError(f"{path} is not valid JSON ({err}); re-run the convert step") from None
    info = dataclasses.replace(DatasetInfo.from_json(data, path), location=dataset_dir)
    check_parent(info)
    return info


def check_parent(info: DatasetInfo) -> DatasetInfo | None:
    """A delta's parent, read (its own parents checked in turn) and found to be the one it was made
    from; None for a dataset without a parent.

    Raises:
        DatasetError: the parent is not there, or it is another dataset now (its plan key changed).
    """
    parent = info.parent
    if parent is None:
        return None
    fix = f"restore it, or convert {info.source.uri} again without a parent"
    if not storage.exists(storage.join(parent.uri, MANIFEST_NAME)):
        raise DatasetError(f"{info.where} is a delta of {parent.uri}, which is not there (no {MANIFEST_NAME}); {fix}")
    found = load_dataset_info(parent.uri)
    if found.plan_key != parent.fingerprint:
        raise DatasetError(
            f"{info.where} is a delta of {parent.uri}, which changed since (fingerprint {found.plan_key}, the delta "
            f"was made from {parent.fingerprint}); {fix}"
        )
    return found


def write_dataset_info(dataset_dir: str, info: DatasetInfo) -> None:
    """Writes ``info`` as ``<dataset_dir>/dataset.json`` (local or gs://)."""
    storage.write_text(storage.join(str(dataset_dir), MANIFEST_NAME), info.to_text())
