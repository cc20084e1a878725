"""The TFRecord schema of this project: what one record holds, written and read in one place.

One ``tf.train.Example`` per image (docs/CONTRACTS.md, "TFRecord schema"). The writing half
(:func:`encode_example`, :func:`frame_record`) is pure Python so that the converter's worker
processes never import TensorFlow (about 6 s per process); the reading half (:data:`FEATURE_SPEC`,
:func:`decode_example`, :func:`parse_batch`, :func:`decode_image`) imports TensorFlow lazily, inside
the functions, so importing this module stays cheap.

A dataset folder holds ``<split>-<i:05d>-of-<n:05d>.tfrecord[.gz]`` shards and a ``dataset.json``
manifest written last, typed as :class:`DatasetInfo`: :func:`load_dataset_info` reads and checks it,
:meth:`DatasetInfo.shard_paths` lists a split's shards and :meth:`DatasetInfo.split_count` its examples.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import google_crc32c

from trainer import storage

SCHEMA_VERSION = 1
MANIFEST_NAME = "dataset.json"
REJECTED_NAME = "rejected.jsonl"
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


# --------------------------------------------------------------------------------------------
# Writing: hand-made protobuf wire format (no TensorFlow, no protobuf runtime needed).
# --------------------------------------------------------------------------------------------


_ONE_BYTE = [bytes([i]) for i in range(128)]


def _varint(value: int) -> bytes:
    if 0 <= value < 0x80:  # the common case: short lengths, labels, tags
        return _ONE_BYTE[value]
    if 0 < value < 0x4000:  # two bytes: lengths of small images and records
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    if 0 < value < 0x200000:  # three bytes: lengths up to 2 MB (most photos)
        return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
    if value < 0:  # int64 negatives are sent as their 64-bit two's complement (10 bytes)
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _len_field(field: int, payload: bytes) -> bytes:
    # wire type 2 (length-delimited)
    return b"".join((_ONE_BYTE[(field << 3) | 2], _varint(len(payload)), payload))


def _bytes_feature(values: Iterable[bytes]) -> bytes:
    inner = b"".join([b"\x0a" + _varint(len(v)) + v for v in values])  # BytesList.value = 1
    return b"\x0a" + _varint(len(inner)) + inner  # Feature.bytes_list = 1


def _float_feature(values: Sequence[float]) -> bytes:
    packed = struct.pack(f"<{len(values)}f", *values)
    inner = _len_field(1, packed) if values else b""
    return _len_field(2, inner)  # Feature.float_list = 2


def _int64_feature(values: Iterable[int]) -> bytes:
    packed = b"".join([_varint(int(v)) for v in values])
    inner = b"\x0a" + _varint(len(packed)) + packed if packed else b""  # Int64List.value = 1, packed
    return b"\x1a" + _varint(len(inner)) + inner  # Feature.int64_list = 3


def _to_bytes(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


_KEYS: dict[str, bytes] = {}


def _key(name: str) -> bytes:
    """Field 1 (the key string) of a map entry, built once per name."""
    key = _KEYS.get(name)
    if key is None:
        raw = name.encode()
        key = _KEYS[name] = b"\x0a" + _varint(len(raw)) + raw
    return key


_SCALARS: dict[tuple[str, Any], bytes] = {}


def _scalar_entry(name: str, value: int | str) -> bytes:
    """A map entry holding one int64 or string, memoised (bounded) since such values repeat."""
    entry = _SCALARS.get((name, value))
    if entry is None:
        feature = _int64_feature([value]) if isinstance(value, int) else _bytes_feature([_to_bytes(value)])
        entry = _entry(name, feature)
        if len(_SCALARS) > 100_000:
            _SCALARS.clear()
        _SCALARS[(name, value)] = entry
    return entry


_COMMON: dict[tuple, bytes] = {}


_ENTRY_HEADS: dict[tuple[str, int], bytes] = {}


def _bytes_entry(name: str, value: bytes) -> bytes:
    """``_entry(name, _bytes_feature([value]))``: a header that depends only on the name and the length."""
    head = _ENTRY_HEADS.get((name, len(value)))
    if head is None:
        key = _key(name)
        n = len(value)
        bytes_list = 1 + len(_varint(n)) + n
        feature = 1 + len(_varint(bytes_list)) + bytes_list
        body = len(key) + 1 + len(_varint(feature)) + feature
        head = b"".join(
            (b"\x0a", _varint(body), key, b"\x12", _varint(feature), b"\x0a", _varint(bytes_list), b"\x0a", _varint(n))
        )
        if len(_ENTRY_HEADS) > 10_000:
            _ENTRY_HEADS.clear()
        _ENTRY_HEADS[(name, n)] = head
    return head + value


def _entry(name: str, feature: bytes) -> bytes:
    """One entry of the map<string, Feature>: a message {1: key, 2: value}, itself field 1 of Features."""
    key = _key(name)
    body = b"".join((key, b"\x12", _varint(len(feature)), feature))
    return b"".join((b"\x0a", _varint(len(body)), body))


def _feature(value: Any) -> bytes:
    """One ``tf.train.Feature`` from a Python value: bytes/str, int, float or a list of one kind."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if all(isinstance(v, (bytes, str)) for v in values):
        return _bytes_feature([_to_bytes(v) for v in values])
    if all(isinstance(v, (bool, int)) for v in values):
        return _int64_feature(values)
    if all(isinstance(v, (bool, int, float)) for v in values):
        return _float_feature([float(v) for v in values])
    raise TypeError(f"feature values must be bytes/str, int or float (one kind per list), got {value!r}")


def encode_example_parts(
    *,
    image: bytes,
    image_format: str,
    height: int,
    width: int,
    channels: int,
    label: int,
    label_text: str,
    source_key: str,
    sha256: str,
    boxes: Sequence[Sequence[float]] | None = None,
    box_labels: Sequence[int] | None = None,
    box_texts: Sequence[str] | None = None,
    is_crowd: Sequence[int] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> tuple[bytes, bytes, bytes]:
    """Serializes one image as a ``tf.train.Example`` in this project's schema, in three parts.

    ``prefix + image + rest`` is the serialized message: the image bytes (the bulk of a record) are
    not copied, so a writer can frame and write them as they are.

    Args:
        image: the encoded image bytes as they go into the record.
        image_format: ``png``, ``jpeg``, ``gif`` or ``bmp`` (what TensorFlow decodes).
        height: decoded height in pixels.
        width: decoded width in pixels.
        channels: decoded channels (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA).
        label: class index into ``dataset.json`` ``classes``; ``NO_LABEL`` for detection images.
        label_text: class name ('' with ``NO_LABEL``).
        source_key: where the image came from (relative path, ``idx:train:123``...).
        sha256: hex sha256 of ``image``.
        boxes: ``[ymin, xmin, ymax, xmax]`` per object, normalised to [0, 1] (detection sources).
        box_labels: class index per box.
        box_texts: class name per box.
        is_crowd: COCO crowd flag per box.
        extra: additional features kept from a manifest, stored under ``extra/<name>``.

    Returns:
        ``(prefix, image, rest)``; joined, the serialized ``tf.train.Example``.
    """
    if image_format not in IMAGE_FORMATS:
        raise ValueError(f"image_format must be one of {IMAGE_FORMATS}, got {image_format!r}")
    # Entries that repeat across records (format, sizes, label) are built once and reused.
    common = (image_format, height, width, channels, label, label_text)
    head = _COMMON.get(common)
    if head is None:
        head = b"".join(
            _scalar_entry(name, value)
            for name, value in zip(
                ("image/format", "image/height", "image/width", "image/channels", "image/class/label"),
                common,
                strict=False,
            )
        ) + _scalar_entry("image/class/text", label_text)
        if len(_COMMON) > 10_000:
            _COMMON.clear()
        _COMMON[common] = head
    entries = [
        head,
        _bytes_entry("image/source_key", _to_bytes(source_key)),
        _bytes_entry("image/sha256", _to_bytes(sha256)),
    ]
    features: list[tuple[str, bytes]] = []
    if boxes is not None:
        boxes = [tuple(float(x) for x in b) for b in boxes]
        n = len(boxes)
        for name, seq in (("box_labels", box_labels), ("box_texts", box_texts), ("is_crowd", is_crowd)):
            if seq is not None and len(seq) != n:
                raise ValueError(f"{name} has {len(seq)} entries but there are {n} boxes")
        features += [
            ("image/object/bbox/ymin", _float_feature([b[0] for b in boxes])),
            ("image/object/bbox/xmin", _float_feature([b[1] for b in boxes])),
            ("image/object/bbox/ymax", _float_feature([b[2] for b in boxes])),
            ("image/object/bbox/xmax", _float_feature([b[3] for b in boxes])),
            ("image/object/class/label", _int64_feature(box_labels or [NO_LABEL] * n)),
            ("image/object/class/text", _bytes_feature([_to_bytes(t) for t in (box_texts or [""] * n)])),
            ("image/object/is_crowd", _int64_feature(is_crowd or [0] * n)),
        ]
    for name, value in (extra or {}).items():
        features.append((f"extra/{name}", _feature(value)))
    # Features.feature is a map<string, Feature>: each entry is a message {1: key, 2: value}.
    entries += [_entry(k, v) for k, v in features]
    rest = b"".join(entries)
    return _image_prefix(len(image), len(rest)), image, rest


_PREFIXES: dict[tuple[int, int], bytes] = {}


def _image_prefix(n: int, rest: int) -> bytes:
    """What precedes the image bytes in a record: it depends only on the image's and the rest's lengths."""
    prefix = _PREFIXES.get((n, rest))
    if prefix is None:
        # image/encoded comes first; its enclosing lengths are computed rather than built by copying.
        key = _key("image/encoded")
        bytes_list = 1 + len(_varint(n)) + n  # BytesList {1: image}
        feature = 1 + len(_varint(bytes_list)) + bytes_list  # Feature {1: BytesList}
        entry = len(key) + 1 + len(_varint(feature)) + feature  # map entry {1: key, 2: Feature}
        total = 1 + len(_varint(entry)) + entry + rest  # Features {1: entry, ...}
        prefix = b"".join(
            (
                b"\x0a", _varint(total),  # Example.features
                b"\x0a", _varint(entry), key,  # Features.feature entry, its key
                b"\x12", _varint(feature),  # entry value: Feature
                b"\x0a", _varint(bytes_list),  # Feature.bytes_list
                b"\x0a", _varint(n),  # BytesList.value
            )
        )  # fmt: skip
        if len(_PREFIXES) > 10_000:
            _PREFIXES.clear()
        _PREFIXES[(n, rest)] = prefix
    return prefix


def encode_example(**fields: Any) -> bytes:
    """Serializes one image as a ``tf.train.Example``; the arguments of :func:`encode_example_parts`.

    Returns:
        The serialized record (parse it with :func:`decode_example`).
    """
    return b"".join(encode_example_parts(**fields))


def _mask(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The CRC the TFRecord format stores: crc32c rotated right by 15 bits plus a constant."""
    return _mask(google_crc32c.value(data))


# --------------------------------------------------------------------------------------------
# Shard checksums: CRC-32C, as Cloud Storage computes it for every object.
# --------------------------------------------------------------------------------------------

_CRC32C_POLY = 0x82F63B78  # the Castagnoli polynomial, bit-reversed


def _multmodp(a: int, b: int) -> int:
    """The product of two polynomials modulo the CRC polynomial, both bit-reversed (zlib's crc32_combine algorithm)."""
    m, p = 1 << 31, 0
    while True:
        if a & m:
            p ^= b
            if a & (m - 1) == 0:
                return p
        m >>= 1
        b = (b >> 1) ^ _CRC32C_POLY if b & 1 else b >> 1


def _x2n_table() -> list[int]:
    table, p = [], 1 << 30  # x^1
    for _ in range(32):
        table.append(p)
        p = _multmodp(p, p)
    return table


_X2N = _x2n_table()  # x^(2^n) modulo the polynomial


def crc32c_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32C of ``A + B`` from ``crc32c(A)``, ``crc32c(B)`` and ``len(B)``, without the bytes.

    Lets workers that write parts of one shard in parallel give the shard's checksum: each hashes
    its own part, the parent combines them in file order (about 50 us each).
    """
    p, k, n = 1 << 31, 3, len2  # x^0; the shift is 8 * len2 bits: x^(2^3) per byte
    while n:
        if n & 1:
            p = _multmodp(_X2N[k & 31], p)
        n >>= 1
        k += 1
    return _multmodp(p, crc1) ^ crc2


def crc32c_b64(crc: int) -> str:
    """A CRC-32C as Cloud Storage shows it (``blob.crc32c``, ``gcloud storage hash``): base64, big-endian."""
    return base64.b64encode(crc.to_bytes(4, "big")).decode()


def shard_checksum(data: bytes) -> str:
    """The ``crc32c`` that ``dataset.json`` records for a shard's bytes."""
    return crc32c_b64(google_crc32c.value(data if isinstance(data, bytes) else bytes(data)))


_FRAME_HEADS: dict[int, bytes] = {}


def frame_parts(parts: Sequence[bytes], out: list[bytes]) -> None:
    """Appends one record, given as consecutive parts, framed as by ``tf.io.TFRecordWriter``.

    The pieces go onto ``out``; ``b"".join(out)`` is the file content (one copy of each image).
    """
    length = sum(map(len, parts))
    head = _FRAME_HEADS.get(length)
    if head is None:  # the length and its CRC: the same for records of the same size
        header = struct.pack("<Q", length)
        head = header + struct.pack("<I", _mask(google_crc32c.value(header)))
        if len(_FRAME_HEADS) > 10_000:
            _FRAME_HEADS.clear()
        _FRAME_HEADS[length] = head
    crc = 0
    for p in parts:
        crc = google_crc32c.extend(crc, p)
    out.append(head)
    out.extend(parts)
    out.append(struct.pack("<I", _mask(crc)))


def frame_record(record: bytes) -> bytes:
    """Frames one record the way ``tf.io.TFRecordWriter`` does (byte-identical, uncompressed).

    Layout: uint64 length, masked crc32c of the length, the data, masked crc32c of the data.
    """
    header = struct.pack("<Q", len(record))
    return b"".join(
        (header, struct.pack("<I", masked_crc32c(header)), record, struct.pack("<I", masked_crc32c(record)))
    )


def iter_records(data: bytes, check_crc: bool = True) -> Iterable[bytes]:
    """Yields the records of an uncompressed TFRecord file's bytes, checking framing and CRCs."""
    pos, end = 0, len(data)
    while pos < end:
        if end - pos < 12:
            raise DatasetError(f"truncated TFRecord header at byte {pos} of {end}")
        (length,) = struct.unpack_from("<Q", data, pos)
        if check_crc and struct.unpack_from("<I", data, pos + 8)[0] != masked_crc32c(data[pos : pos + 8]):
            raise DatasetError(f"corrupt TFRecord length CRC at byte {pos}")
        start = pos + 12
        stop = start + length
        if stop + 4 > end:
            raise DatasetError(f"truncated TFRecord at byte {pos}: needs {length} bytes of data")
        record = data[start:stop]
        if check_crc and struct.unpack_from("<I", data, stop)[0] != masked_crc32c(record):
            raise DatasetError(f"corrupt TFRecord data CRC at byte {pos}")
        yield record
        pos = stop + 4


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


# Metadata of a dataclass field that is not a key of dataset.json (set by the loader instead).
_NOT_JSON = "not_json"


def _json_fields(cls_or_obj: Any) -> list[dataclasses.Field]:
    """The fields of a dataclass that are keys of its JSON object."""
    return [f for f in dataclasses.fields(cls_or_obj) if not f.metadata.get(_NOT_JSON)]


def _from_fields(cls: type, data: Any, where: str) -> dict[str, Any]:
    """The keyword arguments of dataclass ``cls`` from a JSON object: unknown or missing keys are errors."""
    if not isinstance(data, dict):
        raise DatasetError(f"{where} must be a JSON object, got {type(data).__name__}: {json.dumps(data)[:80]}")
    fields = _json_fields(cls)
    names = {f.name for f in fields}
    required = [f.name for f in fields if f.default is dataclasses.MISSING]
    unknown = sorted(set(data) - names)
    missing = [n for n in required if n not in data]
    if unknown or missing:
        raise DatasetError(
            f"{where}: "
            + "; ".join(
                ([f"unknown keys {unknown}"] if unknown else []) + ([f"missing keys {missing}"] if missing else [])
            )
            + f"; expected the keys {sorted(names)} ({', '.join(required)} required); re-run the convert step"
        )
    return dict(data)


def _drop_none(data: dict[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """``data`` without those of ``keys`` whose value is None (keys written only when they apply)."""
    return {k: v for k, v in data.items() if k not in keys or v is not None}


@dataclasses.dataclass(frozen=True)
class ShardInfo:
    """One shard file of a split: its name, records, size and checksum (``crc32c``, base64)."""

    file: str
    count: int
    bytes: int
    crc32c: str | None = None
    sha256: str | None = None  # the checksum of manifests written before crc32c

    @classmethod
    def from_json(cls, data: Any, where: str) -> ShardInfo:
        return cls(**_from_fields(cls, data, where))

    def to_json(self) -> dict[str, Any]:
        return _drop_none(dataclasses.asdict(self), ("crc32c", "sha256"))


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    """One split: its examples, per-class counts (by class name) and shards in order."""

    count: int
    class_counts: dict[str, int]
    shards: tuple[ShardInfo, ...]
    unlabelled: int | None = None  # records without an image-level class (-1), when there are any

    @classmethod
    def from_json(cls, data: Any, where: str) -> SplitInfo:
        kw = _from_fields(cls, data, where)
        if not isinstance(kw["shards"], list):
            raise DatasetError(f"{where}: 'shards' must be a list, got {type(kw['shards']).__name__}")
        kw["shards"] = tuple(ShardInfo.from_json(s, f"{where} shard {i}") for i, s in enumerate(kw["shards"]))
        return cls(**kw)

    def to_json(self) -> dict[str, Any]:
        out = {"count": self.count, "class_counts": dict(self.class_counts)}
        out["shards"] = [s.to_json() for s in self.shards]
        if self.unlabelled is not None:
            out["unlabelled"] = self.unlabelled
        return out


@dataclasses.dataclass(frozen=True)
class ImageShape:
    """The size every image of the dataset has (absent when the sizes differ)."""

    height: int
    width: int
    channels: int


@dataclasses.dataclass(frozen=True)
class SourceInfo:
    """Where the images came from: the source URI or built-in name, its kind and its fingerprint."""

    uri: str
    format: str
    fingerprint: str


@dataclasses.dataclass(frozen=True)
class BoxStats:
    """What became of the boxes of a detection source (rejected.jsonl lists the dropped ones)."""

    kept: int
    clipped: int
    dropped: int
    dropped_reasons: dict[str, int]
    crowd: int
    negatives: int  # images kept without any box
    orphan_annotations: int


_NESTED: dict[str, type] = {"source": SourceInfo, "image": ImageShape, "boxes": BoxStats}


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """The typed content of ``dataset.json``: every key it has, read and written in one place.

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
        shards_dir: where the shards are when not next to dataset.json (a fan-out's pointer copy).
        location: the folder (local or gs://) the info was read from; set by
            :func:`load_dataset_info`, not a key of ``dataset.json`` and not compared. None for an
            info made in memory (the converter's, before it is written).
    """

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
    location: str | None = dataclasses.field(default=None, compare=False, metadata={_NOT_JSON: True})

    @classmethod
    def from_json(cls, data: Any, where: str = MANIFEST_NAME) -> DatasetInfo:
        """The info of a parsed ``dataset.json`` (its ``location`` is None: the loader sets it).

        Raises:
            DatasetError: another schema version, unknown or missing keys, or a malformed part.
        """
        if isinstance(data, dict) and "schema_version" in data and data["schema_version"] != SCHEMA_VERSION:
            raise DatasetError(
                f"{where} has schema_version {data['schema_version']}, this code reads {SCHEMA_VERSION}; "
                "re-run the convert step with this version"
            )
        kw = _from_fields(cls, data, where)
        for key, nested in _NESTED.items():
            if kw.get(key) is not None:
                kw[key] = nested(**_from_fields(nested, kw[key], f"{where} {key!r}"))
        if not isinstance(kw["splits"], dict):
            raise DatasetError(f"{where}: 'splits' must be an object, got {type(kw['splits']).__name__}")
        kw["splits"] = {k: SplitInfo.from_json(v, f"{where} split {k!r}") for k, v in kw["splits"].items()}
        kw["classes"], kw["empty_classes"] = tuple(kw["classes"]), tuple(kw["empty_classes"])
        return cls(**kw)

    def to_json(self) -> dict[str, Any]:
        """The ``dataset.json`` object (:meth:`from_json` reads it back to an equal info)."""
        out: dict[str, Any] = {}
        for f in _json_fields(self):
            value = getattr(self, f.name)
            if f.name in _NESTED:
                value = None if value is None else dataclasses.asdict(value)
            elif f.name == "splits":
                value = {k: v.to_json() for k, v in value.items()}
            elif isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, dict):
                value = dict(value)
            out[f.name] = value
        return _drop_none(out, ("boxes", "shards_dir"))

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

    def shard_paths(self, split: str) -> list[str]:
        """The shard files of one split, in order, as paths/URIs.

        They sit next to ``dataset.json`` (``location``), or under ``shards_dir`` when the manifest
        has one (a pipeline step whose output artifact only points at a dataset written elsewhere).
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
        return [storage.join(base, s.file) for s in self.splits[split].shards]


def load_dataset_info(dataset_dir: str) -> DatasetInfo:
    """Reads and checks ``<dataset_dir>/dataset.json`` (a local folder or a gs:// URI).

    This is the one reader of ``dataset.json``: every step and the trainer read a dataset through it.

    Args:
        dataset_dir: the dataset folder (a ``Dataset`` artifact's path or URI).

    Returns:
        The info, with ``location`` set to ``dataset_dir``.

    Raises:
        DatasetError: the folder has no ``dataset.json``, or it is malformed or of another schema.
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
    return dataclasses.replace(DatasetInfo.from_json(data, path), location=dataset_dir)


def write_dataset_info(dataset_dir: str, info: DatasetInfo) -> None:
    """Writes ``info`` as ``<dataset_dir>/dataset.json`` (local or gs://)."""
    storage.write_text(storage.join(str(dataset_dir), MANIFEST_NAME), info.to_text())
