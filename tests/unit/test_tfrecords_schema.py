"""The record schema: hand-made protobuf and framing against TensorFlow's own."""

import dataclasses
import json

import pytest

from tests.datasets import write_test_dataset
from trainer import tfrecord_wire, tfrecords


def _example(**overrides):
    args = dict(
        image=b"\x89PNG fake\x00\x00",
        image_format="png",
        height=28,
        width=27,
        channels=1,
        label=3,
        label_text="Dress",
        source_key="idx:train:7",
        sha256="ab" * 32,
    )
    args.update(overrides)
    return tfrecord_wire.encode_example(**args)


def test_importing_the_module_does_not_import_tensorflow():
    import subprocess
    import sys

    code = "import sys, trainer.tfrecords; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_encode_example_is_a_valid_tf_example_with_every_field():
    tf = pytest.importorskip("tensorflow")
    blob = _example(
        boxes=[[0.1, 0.2, 0.5, 0.6], [0.0, 0.0, 1.0, 1.0]],
        box_labels=[1, 0],
        box_texts=["cat", "dog"],
        is_crowd=[0, 1],
        extra={"photographer": "ann", "rating": 4, "score": 0.5},
    )
    ex = tf.train.Example.FromString(blob)
    f = ex.features.feature
    assert f["image/encoded"].bytes_list.value == [b"\x89PNG fake\x00\x00"]  # trailing zeros kept
    assert f["image/height"].int64_list.value == [28]
    assert f["image/class/text"].bytes_list.value == [b"Dress"]
    assert list(f["image/object/bbox/xmin"].float_list.value) == pytest.approx([0.2, 0.0])
    assert f["image/object/class/text"].bytes_list.value == [b"cat", b"dog"]
    assert f["image/object/is_crowd"].int64_list.value == [0, 1]
    assert f["extra/photographer"].bytes_list.value == [b"ann"]
    assert f["extra/rating"].int64_list.value == [4]
    # Same content as TensorFlow's own serialization of the parsed message.
    assert tf.train.Example.FromString(ex.SerializeToString()) == ex


def test_negative_label_round_trips():
    tf = pytest.importorskip("tensorflow")
    parsed = tfrecords.decode_example(tf.constant(_example(label=tfrecords.NO_LABEL, label_text="")))
    assert int(parsed["image/class/label"]) == -1


def test_decode_and_parse_batch_read_what_encode_wrote():
    tf = pytest.importorskip("tensorflow")
    one = tfrecords.decode_example(tf.constant(_example()))
    assert one["image/width"].numpy() == 27
    assert one["image/object/bbox/xmin"].shape == (0,)
    batch = tfrecords.parse_batch(tf.constant([_example(), _example(boxes=[[0, 0, 1, 1]], label=5)]))
    assert batch["image/class/label"].numpy().tolist() == [3, 5]
    assert batch["image/object/bbox/ymax"].to_list() == [[], [1.0]]
    assert tfrecords.FEATURE_SPEC["image/encoded"].dtype == tf.string


def test_framing_is_byte_identical_to_tfrecordwriter(tmp_path):
    tf = pytest.importorskip("tensorflow")
    # Trailing and embedded zero bytes, the empty record, and a large one: the cases a fixed-width
    # NumPy bytes array would corrupt.
    records = [b"", b"\x00", b"abc\x00\x00", b"\x00" * 3 + b"x", bytes(range(256)) * 300, _example()]
    path = str(tmp_path / "tf.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for r in records:
            w.write(r)
    ours = b"".join(tfrecord_wire.frame_record(r) for r in records)
    assert ours == open(path, "rb").read()
    pieces = []
    for r in records:  # the writer's path: a record given as parts, framed without joining them
        tfrecord_wire.frame_parts([r[:3], r[3:7], r[7:]], pieces)
    assert b"".join(pieces) == ours
    assert list(tfrecord_wire.iter_records(ours)) == records


def test_iter_records_detects_corruption():
    data = bytearray(tfrecord_wire.frame_record(b"hello world"))
    data[14] ^= 0xFF
    with pytest.raises(tfrecords.DatasetError, match="CRC"):
        list(tfrecord_wire.iter_records(bytes(data)))


def test_load_dataset_info_errors_say_what_to_do(tmp_path):
    with pytest.raises(tfrecords.DatasetError, match="has no dataset.json; run the convert step first"):
        tfrecords.load_dataset_info(str(tmp_path))
    (tmp_path / "dataset.json").write_text(json.dumps({"schema_version": 99, "classes": [], "splits": {}}))
    with pytest.raises(tfrecords.DatasetError, match="schema_version 99"):
        tfrecords.load_dataset_info(str(tmp_path))
    write_test_dataset(tmp_path, {"train": 3, "validation": 0}, num_classes=1, shards=1)
    info = tfrecords.load_dataset_info(str(tmp_path))
    assert info.classes == ("class_0",) and info.location == str(tmp_path)
    assert info.shard_paths("train") == [f"{tmp_path}/train-00000-of-00001.tfrecord"]
    assert info.split_count("train") == 3
    with pytest.raises(tfrecords.DatasetError, match=f"split 'test' is not in {tmp_path}; it has"):
        info.shard_paths("test")
    assert info.shard_paths("validation") == []  # an empty split has no shards; split_count refuses it
    with pytest.raises(tfrecords.DatasetError, match=f"split 'validation' of {tmp_path} is empty"):
        info.split_count("validation")


def test_shards_dir_and_location(tmp_path):
    info = tfrecords.load_dataset_info(str(write_test_dataset(tmp_path, {"train": 2}, shards=1)))
    elsewhere = dataclasses.replace(info, shards_dir="gs://bucket/data")
    assert elsewhere.shard_paths("train") == ["gs://bucket/data/train-00000-of-00001.tfrecord"]
    made = tfrecords.DatasetInfo.from_json(info.to_json())  # not read from a folder: no location
    assert made.location is None and made == info
    with pytest.raises(ValueError, match="no location and no shards_dir"):
        made.shard_paths("train")
    with pytest.raises(tfrecords.DatasetError, match="split 'test' is not in the dataset"):
        made.split_count("test")


def test_crc32c_combine_gives_the_checksum_of_the_concatenation():
    import os
    import random

    import google_crc32c

    rng = random.Random(0)
    for _ in range(100):
        a = os.urandom(rng.randint(0, 3000))
        b = os.urandom(rng.choice([0, 1, 7, rng.randint(0, 70000)]))
        got = tfrecord_wire.crc32c_combine(google_crc32c.value(a), google_crc32c.value(b), len(b))
        assert got == google_crc32c.value(a + b)
    # The manifest's form is Cloud Storage's: base64 of the big-endian CRC (gsutil hash -c).
    assert tfrecord_wire.shard_checksum(b"hello") == "mnG7TA=="
    assert tfrecord_wire.shard_checksum(bytearray(b"hello")) == "mnG7TA=="


def test_dataset_info_round_trips_and_refuses_unknown_or_missing_keys(tmp_path):
    write_test_dataset(tmp_path, {"train": 4, "test": 2}, num_classes=2)
    info = tfrecords.load_dataset_info(str(tmp_path))
    assert tfrecords.DatasetInfo.from_json(info.to_json()) == info
    assert info.splits["train"].count == 4 and info.image == tfrecords.ImageShape(28, 28, 1)
    assert "location" not in info.to_json()  # the folder is the loader's, not a key of the file
    data = info.to_json()
    with pytest.raises(tfrecords.DatasetError, match=r"colour: unknown key in DatasetInfo; known keys: schema_version"):
        tfrecords.DatasetInfo.from_json({**data, "colour": "red"})
    with pytest.raises(tfrecords.DatasetError, match=r"location: unknown key in DatasetInfo; .*re-run the convert"):
        tfrecords.DatasetInfo.from_json({**data, "location": "/elsewhere"})
    bad_count = json.loads(json.dumps(data))
    bad_count["splits"]["train"]["count"] = "x"
    with pytest.raises(tfrecords.DatasetError, match=r"dataset.json: splits.train.count: expected an integer, got 'x'"):
        tfrecords.DatasetInfo.from_json(bad_count)
    del data["plan_key"]
    with pytest.raises(tfrecords.DatasetError, match=r"dataset.json: missing keys \['plan_key'\] of DatasetInfo"):
        tfrecords.DatasetInfo.from_json(data)
    shard = info.to_json()
    shard["splits"]["train"]["shards"][0]["size"] = 1
    with pytest.raises(tfrecords.DatasetError, match=r"splits.train.shards\[0\].size: unknown key in ShardInfo"):
        tfrecords.DatasetInfo.from_json(shard)
