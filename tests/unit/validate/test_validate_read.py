"""The TensorFlow-free Example decoder (trainer/tfrecord_read.py) against the project's writer and by hand."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.validate_fixtures import Rec, balanced, write_dataset
from trainer.tfrecord_read import IMAGE_FEATURE, iter_split_features, parse_example
from trainer.tfrecord_wire import encode_example
from trainer.tfrecords import DatasetError, load_dataset_info

ROOT = Path(__file__).resolve().parents[3]


def _fields(**extra):
    return dict(
        image=b"\x89PNG not really" * 100,
        image_format="png",
        height=7,
        width=9,
        channels=3,
        label=2,
        label_text="cat",
        source_key="photos/cat/1.png",
        sha256="ab" * 32,
        **extra,
    )


def test_a_written_record_reads_back_with_every_kind_of_value():
    boxes = [(0.1, 0.2, 0.5, 0.75), (0.0, 0.0, 1.0, 1.0)]
    record = encode_example(
        **_fields(
            boxes=boxes,
            box_labels=[1, 0],
            box_texts=["dog", "cat"],
            is_crowd=[0, 1],
            extra={"negative": -5, "big": -(2**63), "score": 0.25, "tags": ["x", "y"], "empty": []},
        )
    )
    got = parse_example(record)
    assert got["image/encoded"] == [_fields()["image"]]
    assert got["image/format"] == [b"png"] and got["image/source_key"] == [b"photos/cat/1.png"]
    assert (got["image/height"], got["image/width"], got["image/class/label"]) == ([7], [9], [2])
    assert got["image/object/bbox/xmin"] == pytest.approx([0.2, 0.0])
    assert got["image/object/bbox/ymax"] == pytest.approx([0.5, 1.0])
    assert got["image/object/class/label"] == [1, 0] and got["image/object/is_crowd"] == [0, 1]
    assert got["image/object/class/text"] == [b"dog", b"cat"]
    assert got["extra/negative"] == [-5] and got["extra/big"] == [-(2**63)]
    assert got["extra/score"] == [0.25] and got["extra/tags"] == [b"x", b"y"] and got["extra/empty"] == []


def test_skip_leaves_the_image_out():
    got = parse_example(encode_example(**_fields()), skip={IMAGE_FEATURE})
    assert IMAGE_FEATURE not in got and got["image/sha256"] == [b"ab" * 32]
    # a memoryview works too: nothing of the record is copied but the values kept
    assert parse_example(memoryview(encode_example(**_fields())), skip={IMAGE_FEATURE}) == got


# A hand-made encoder, independent of the writer: unpacked lists, value before key, unknown fields.
def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def _len(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _example(entries: list[tuple[str, bytes]], value_first: bool = False) -> bytes:
    body = b""
    for key, feature in entries:
        parts = [_len(1, key.encode()), _len(2, feature)]
        body += _len(1, b"".join(reversed(parts) if value_first else parts))
    unknown = _varint(7 << 3 | 0) + _varint(300)  # a field Example does not have: skipped
    return unknown + _len(1, body)


def test_unpacked_and_packed_numbers_and_any_field_order_are_read():
    unpacked_floats = b"".join(_varint(1 << 3 | 5) + struct.pack("<f", v) for v in (1.5, -2.0))
    unpacked_ints = b"".join(_varint(1 << 3 | 0) + _varint(v) for v in (3, -1, 2**40))
    packed_ints = _len(1, b"".join(_varint(v) for v in (-7, 0)))
    record = _example(
        [
            ("f", _len(2, unpacked_floats)),
            ("i", _len(3, unpacked_ints)),
            ("p", _len(3, packed_ints)),
            ("b", _len(1, _len(1, b"one") + _len(1, b""))),
            ("none", b""),  # a Feature with no kind set
        ],
        value_first=True,
    )
    got = parse_example(record)
    assert got == {"f": [1.5, -2.0], "i": [3, -1, 2**40], "p": [-7, 0], "b": [b"one", b""], "none": []}


def test_a_malformed_record_is_named():
    with pytest.raises(DatasetError, match="malformed tf.train.Example"):
        parse_example(encode_example(**_fields())[:-3])
    with pytest.raises(DatasetError, match="wire type 3"):
        parse_example(_varint(1 << 3 | 3))


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_a_split_s_features_are_read_shard_by_shard(tmp_path, compression):
    recs = balanced("train", 5, 2, extra={"who": "ann"})
    folder = write_dataset(tmp_path / "d", {"train": recs, "test": []}, ("a", "b"), compression=compression)
    info = load_dataset_info(str(folder))
    got = list(iter_split_features(info, "train"))
    assert sorted(g["image/source_key"][0].decode() for g in got) == [r.key for r in recs]
    assert all(IMAGE_FEATURE not in g and g["extra/who"] == [b"ann"] for g in got)
    assert list(iter_split_features(info, "test")) == []
    with pytest.raises(DatasetError, match="split 'nope' is not in"):
        list(iter_split_features(info, "nope"))


def test_a_corrupt_shard_is_named(tmp_path):
    folder = write_dataset(tmp_path / "d", {"train": [Rec("k", 0)]}, ("a",), shards=1)
    shard = folder / "train-00000-of-00001.tfrecord"
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(DatasetError, match="train-00000-of-00001.tfrecord: corrupt TFRecord data CRC"):
        list(iter_split_features(load_dataset_info(str(folder)), "train"))


def test_the_reader_and_the_step_import_no_tensorflow():
    code = (
        "import sys, components.validate.run, components.validate.__main__, trainer.tfrecord_read; "
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)
