"""Reading ``tf.train.Example`` records without TensorFlow: the protobuf wire format decoded by hand.

The counterpart of the writer in :mod:`trainer.tfrecord_wire`, for what needs a record's small
features but not its pixels (the validate step's statistics and checks): importing TensorFlow
costs about 6 s, decoding a record's dozen features here some tens of microseconds.
:func:`parse_example` turns one serialized record into ``{feature name: values}``; a name in
``skip`` (the image bytes) is passed over by its length, never copied. :func:`iter_split_features`
reads a split's shards (local or gs://, GZIP or not) with :func:`trainer.tfrecord_wire.iter_records`,
which checks every record's CRC, and yields each record's features.

Both encodings of numeric lists are read: packed (one length-delimited run of values, what
TensorFlow and this project's writer write) and unpacked (one tagged value each, which a protobuf
parser must accept too).
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Collection, Iterator
from typing import Union

from trainer import storage
from trainer.tfrecord_wire import iter_records
from trainer.tfrecords import DatasetError, DatasetInfo

Buffer = Union[bytes, bytearray, memoryview]
Values = Union[list[bytes], list[float], list[int]]

IMAGE_FEATURE = "image/encoded"

# Wire types of the protobuf encoding.
_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5
_FLOAT = struct.Struct("<f")


def _varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` and the position after it."""
    value, shift = 0, 0
    while True:
        if pos >= end:
            raise DatasetError(f"malformed tf.train.Example: a varint runs past the end of its field at byte {pos}")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise DatasetError(f"malformed tf.train.Example: a varint longer than 10 bytes at byte {pos}")


def _signed(value: int) -> int:
    """An int64 sent as its 64-bit two's complement, back to a Python int."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _fields(buf: Buffer, pos: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """``(field number, wire type, start, stop)`` of each field of the message in ``buf[pos:end]``.

    For a varint, ``start`` is the value itself and ``stop`` the position after it; for the other
    wire types, ``buf[start:stop]`` is the field's payload.

    Raises:
        DatasetError: a truncated field or a wire type that Example messages never use (groups).
    """
    while pos < end:
        tag, pos = _varint(buf, pos, end)
        number, wire = tag >> 3, tag & 7
        if wire == _VARINT:
            value, pos = _varint(buf, pos, end)
            yield number, wire, value, pos
            continue
        if wire == _LENGTH:
            length, pos = _varint(buf, pos, end)
            start, pos = pos, pos + length
        elif wire in (_FIXED32, _FIXED64):
            start, pos = pos, pos + (4 if wire == _FIXED32 else 8)
        else:
            raise DatasetError(f"malformed tf.train.Example: wire type {wire} of field {number} at byte {pos}")
        if pos > end:
            raise DatasetError(f"malformed tf.train.Example: field {number} runs past the end of its message")
        yield number, wire, start, pos


def _bytes_list(buf: Buffer, pos: int, end: int) -> list[bytes]:
    return [bytes(buf[s:e]) for n, w, s, e in _fields(buf, pos, end) if n == 1 and w == _LENGTH]


def _float_list(buf: Buffer, pos: int, end: int) -> list[float]:
    values: list[float] = []
    for number, wire, start, stop in _fields(buf, pos, end):
        if number != 1:
            continue
        if wire == _LENGTH:  # packed: little-endian float32s back to back
            if (stop - start) % 4:
                raise DatasetError(f"malformed tf.train.Example: a packed float list of {stop - start} bytes")
            values.extend(struct.unpack_from(f"<{(stop - start) // 4}f", buf, start))
        elif wire == _FIXED32:
            values.append(_FLOAT.unpack_from(buf, start)[0])
    return values


def _int64_list(buf: Buffer, pos: int, end: int) -> list[int]:
    values: list[int] = []
    for number, wire, start, stop in _fields(buf, pos, end):
        if number != 1:
            continue
        if wire == _VARINT:
            values.append(_signed(start))
        elif wire == _LENGTH:  # packed: varints back to back
            while start < stop:
                value, start = _varint(buf, start, stop)
                values.append(_signed(value))
    return values


_LISTS = {1: _bytes_list, 2: _float_list, 3: _int64_list}


def _feature(buf: Buffer, pos: int, end: int) -> Values:
    """A ``tf.train.Feature``'s values; an empty feature (no kind set) reads as an empty list."""
    values: Values = []
    for number, wire, start, stop in _fields(buf, pos, end):
        if wire == _LENGTH and number in _LISTS:
            values = _LISTS[number](buf, start, stop)  # oneof: the last kind given wins
    return values


def _entry(buf: Buffer, pos: int, end: int, skip: Collection[str]) -> tuple[str, Values | None]:
    """One ``map<string, Feature>`` entry: its key and values (None when the key is skipped)."""
    key, value = "", None
    for number, wire, start, stop in _fields(buf, pos, end):
        if wire != _LENGTH:
            continue
        if number == 1:
            key = bytes(buf[start:stop]).decode("utf-8", errors="replace")
        elif number == 2:
            value = (start, stop)
    if key in skip:
        return key, None
    return key, _feature(buf, value[0], value[1]) if value is not None else []


def parse_example(record: Buffer, skip: Collection[str] = ()) -> dict[str, Values]:
    """Decodes one serialized ``tf.train.Example`` into its features.

    Args:
        record: the serialized message (bytes, or a memoryview to avoid a copy).
        skip: feature names left out of the result; their payload is stepped over, not copied
            (pass ``{IMAGE_FEATURE}`` to read a record's metadata without its image).

    Returns:
        Feature name -> its values: a list of bytes, of floats or of ints (int64s, negatives
        included), as the feature's kind; a feature with no kind set is an empty list. When a name
        repeats, the last entry wins, as in protobuf's maps.

    Raises:
        DatasetError: the bytes are not a well-formed ``tf.train.Example``.
    """
    out: dict[str, Values] = {}
    end = len(record)
    for number, wire, start, stop in _fields(record, 0, end):
        if number != 1 or wire != _LENGTH:  # Example.features
            continue
        for entry_number, entry_wire, entry_start, entry_stop in _fields(record, start, stop):
            if entry_number != 1 or entry_wire != _LENGTH:  # Features.feature
                continue
            key, values = _entry(record, entry_start, entry_stop, skip)
            if values is not None:
                out[key] = values
    return out


def read_shard(path: str, compression: str | None = None) -> bytes:
    """A shard's uncompressed bytes (local or gs://).

    Raises:
        DatasetError: the shard is missing, or not valid GZIP when ``compression`` says it is.
    """
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError:
        raise DatasetError(f"shard {path} is missing; re-run the convert step") from None
    if compression == "GZIP":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as err:
            raise DatasetError(f"shard {path} is not valid GZIP ({err}); re-run the convert step") from None
    return data


def iter_split_features(
    info: DatasetInfo, split: str, skip: Collection[str] = (IMAGE_FEATURE,)
) -> Iterator[dict[str, Values]]:
    """Every record's features of one split, shard after shard, in order.

    Args:
        info: the dataset (read by :func:`trainer.tfrecords.load_dataset_info`).
        split: the split; a split with no records yields nothing.
        skip: feature names left out (by default the image bytes).

    Yields:
        One record's features, as :func:`parse_example` returns them.

    Raises:
        DatasetError: a missing split or shard, a corrupt record (CRC, framing) or a malformed one;
            the message names the shard.
    """
    if split not in info.splits:
        info.split_count(split)  # the one "split is not in" error
    if not info.splits[split].shards:
        return
    for path in info.shard_paths(split):
        data = read_shard(path, info.compression)
        try:
            for record in iter_records(data):
                yield parse_example(record, skip)
        except DatasetError as err:
            raise DatasetError(f"{path}: {err}; re-run the convert step") from None
