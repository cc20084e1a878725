"""The TFRecord wire format without TensorFlow: ``tf.train.Example`` encoding, CRC-32C and framing.

The converter's worker processes build and frame records with these (pure Python: they never
import TensorFlow, about 6 s per process); :func:`iter_records` reads framed records back and
checks them. What a record holds (the feature names and kinds) is the schema's, in
:mod:`trainer.tfrecords`; the reading half (``tf.data``) is there too.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import google_crc32c

from trainer.tfrecords import IMAGE_FORMATS, NO_LABEL, DatasetError

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
