"""Manifests, arrays, IDX and COCO sources; splits; shard sizing; compression; systemic errors."""

import collections
import gzip
import io
import json
import struct

import numpy as np
import pytest
from PIL import Image

from components.convert import ConvertError, convert, make_plan
from components.convert.config import ConvertConfig
from components.convert.plan import assign_splits, shard_count
from components.image_input.sources import Item
from trainer.config import ConfigError
from trainer.tfrecord_wire import iter_records


def _png(seed=0, size=(6, 5)):
    arr = np.random.default_rng(seed).integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture
def pictures(tmp_path):
    for i in range(6):
        (tmp_path / f"p{i}.png").write_bytes(_png(i))
    return tmp_path


def _all_records(out, manifest):
    files = [sh["file"] for s in manifest["splits"].values() for sh in s["shards"]]
    return [r for f in files for r in iter_records((out / f).read_bytes())]


def test_csv_manifest_with_names_splits_and_extra_fields(pictures, tmp_path):
    rows = ["path,label,split,photographer"]
    rows += [f"p{i}.png,{'cat' if i % 2 else 'dog'},{'train' if i < 4 else 'test'},ann{i}" for i in range(6)]
    (pictures / "m.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "out"
    manifest = convert(ConvertConfig(source=str(pictures / "m.csv"), workers=1), str(out))
    assert manifest["classes"] == ["cat", "dog"]
    # The source gives train and test; validation is carved out of train (possibly empty).
    assert manifest["splits"]["test"]["count"] == 2
    assert manifest["splits"]["train"]["count"] + manifest["splits"]["validation"]["count"] == 4
    assert any(b"extra/photographer" in r and b"ann3" in r for r in _all_records(out, manifest))


def test_jsonl_manifest_with_index_labels_and_declared_classes(pictures, tmp_path):
    lines = [json.dumps({"path": str(pictures / f"p{i}.png"), "label": i % 3}) for i in range(6)]
    (pictures / "m.jsonl").write_text("\n".join(lines))
    config = ConvertConfig(source=str(pictures / "m.jsonl"), classes=("a", "b", "c"), splits={"train": 1.0})
    manifest = convert(config.replace(workers=1), str(tmp_path / "out"))
    assert manifest["splits"]["train"]["class_counts"] == {"a": 2, "b": 2, "c": 2}


@pytest.mark.parametrize(
    "content, message",
    [
        ("file,class\np0.png,cat\n", r"bad manifest header .*expected columns path,label.*got \['file', 'class'\]"),
        ("path,label\np0.png,cat\nmissing.png,dog\n", r"1 rows point nowhere \(e.g. \['missing.png'\]\)"),
        ("path,label\np0.png,7\n", None),
    ],
    ids=["header", "nowhere", "label-outside-classes"],
)
def test_manifest_errors(pictures, tmp_path, content, message):
    (pictures / "m.csv").write_text(content)
    config = ConvertConfig(source=str(pictures / "m.csv"))
    if message is None:
        config = config.replace(classes=("cat", "dog"))
        message = r"label '7' is outside the declared classes \['cat', 'dog'\]"
    with pytest.raises(ConvertError, match=message):
        convert(config, str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_unknown_format_and_bad_split_shares(tmp_path):
    (tmp_path / "data.parquet").write_bytes(b"PAR1")
    with pytest.raises(ConvertError, match="unknown source format"):
        convert(ConvertConfig(source=str(tmp_path / "data.parquet")), str(tmp_path / "out"))
    with pytest.raises(ConfigError, match="shares must add up to 1"):
        ConvertConfig(splits={"train": 0.8, "test": 0.1})


def test_npz_with_train_and_test_arrays_and_class_names(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(
        tmp_path / "d.npz",
        x_train=rng.random((20, 7, 5, 3)),  # floats in [0, 1], RGB
        y_train=np.arange(20) % 2,
        x_test=rng.integers(0, 255, (6, 7, 5, 3), dtype=np.uint8),
        y_test=np.arange(6) % 2,
        classes=np.array(["no", "yes"]),
    )
    manifest = convert(ConvertConfig(source=str(tmp_path / "d.npz"), workers=1), str(tmp_path / "out"))
    assert manifest["classes"] == ["no", "yes"]
    assert manifest["splits"]["test"]["count"] == 6
    assert manifest["image"] == {"height": 7, "width": 5, "channels": 3}


def _idx(path, arr):
    code = {np.uint8: 0x08}[arr.dtype.type]
    header = struct.pack(">BBBB", 0, 0, code, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    path.write_bytes(gzip.compress(header + arr.tobytes()))


def test_generic_idx_folder(tmp_path):
    src = tmp_path / "idx"
    src.mkdir()
    _idx(src / "train-images-idx3-ubyte.gz", np.full((12, 4, 4), 200, np.uint8))
    _idx(src / "train-labels-idx1-ubyte.gz", (np.arange(12) % 3).astype(np.uint8))
    config = ConvertConfig(source=str(src), splits={"train": 0.5, "test": 0.5}, workers=1)
    manifest = convert(config, str(tmp_path / "o"))
    assert manifest["source"]["format"] == "idx"
    assert manifest["classes"] == ["0", "1", "2"]
    assert sum(s["count"] for s in manifest["splits"].values()) == 12


def test_coco_boxes_are_normalised(pictures, tmp_path):
    coco = {
        "images": [{"id": 1, "file_name": "p0.png", "width": 6, "height": 5}],
        "annotations": [
            {"id": 9, "image_id": 1, "category_id": 7, "bbox": [3, 1, 3, 4], "iscrowd": 1},
        ],
        "categories": [{"id": 7, "name": "person"}, {"id": 3, "name": "bike"}],
    }
    (pictures / "coco.json").write_text(json.dumps(coco))
    out = tmp_path / "out"
    manifest = convert(ConvertConfig(source=str(pictures / "coco.json"), splits={"train": 1.0}, workers=1), str(out))
    assert manifest["classes"] == ["bike", "person"]
    tf = pytest.importorskip("tensorflow")
    from trainer.tfrecords import decode_example

    ex = decode_example(tf.constant(_all_records(out, manifest)[0]))
    assert ex["image/object/bbox/xmin"].numpy().tolist() == pytest.approx([0.5])
    assert ex["image/object/bbox/ymax"].numpy().tolist() == pytest.approx([1.0])
    assert ex["image/object/class/text"].numpy().tolist() == [b"person"]
    assert ex["image/object/class/label"].numpy().tolist() == [1]
    assert ex["image/object/is_crowd"].numpy().tolist() == [1]
    assert int(ex["image/class/label"]) == -1


def _items(n, classes=3):
    return [Item(f"k{i}", i % classes, None) for i in range(n)]


def test_hashed_splits_are_deterministic_and_near_the_shares():
    shares = {"train": 0.8, "validation": 0.1, "test": 0.1}
    a = assign_splits(_items(5000), shares, seed=1)
    b = assign_splits(list(reversed(_items(5000))), shares, seed=1)
    assert {s: [it.key for it in v] for s, v in a.items()} == {s: [it.key for it in v] for s, v in b.items()}
    assert abs(len(a["train"]) - 4000) < 150
    c = assign_splits(_items(5000), shares, seed=2)
    assert [it.key for it in c["test"]] != [it.key for it in a["test"]]


def test_stratified_splits_keep_the_class_balance_exactly():
    out = assign_splits(_items(300, classes=3), {"train": 0.8, "test": 0.2}, stratify=True)
    for split, n in (("train", 80), ("test", 20)):
        assert collections.Counter(it.label for it in out[split]) == {0: n, 1: n, 2: n}


def test_shard_count_targets_size_power_of_two_and_never_empty():
    assert shard_count(250_000_000, 1000, 100.0, False) == 3
    assert shard_count(250_000_000, 1000, 100.0, True) == 4
    assert shard_count(10, 2, 0.000001, False) == 2
    assert shard_count(0, 0, 100.0, False) == 0


def test_many_shards_and_gzip(tmp_path):
    config = ConvertConfig(
        source="digits", limit_per_split=100, target_shard_mb=0.02, power_of_two_shards=True, compression="GZIP"
    )
    plan = make_plan(config)
    assert len(plan.splits["train"]) == 4
    manifest = convert(config.replace(workers=2), str(tmp_path))
    files = [s["file"] for s in manifest["splits"]["train"]["shards"]]
    assert files == [f"train-0000{i}-of-00004.tfrecord.gz" for i in range(4)]
    assert sum(s["count"] for s in manifest["splits"]["train"]["shards"]) == 100
    data = gzip.decompress((tmp_path / files[0]).read_bytes())
    assert len(list(iter_records(data))) == manifest["splits"]["train"]["shards"][0]["count"]


def test_idx_images_decode_in_the_background_to_the_same_array(tmp_path):
    from components.image_input.sources import IdxImages, read_idx

    src = tmp_path / "idx"
    src.mkdir()
    images = np.random.default_rng(0).integers(0, 255, (70, 6, 5), dtype=np.uint8)
    _idx(src / "train-images-idx3-ubyte.gz", images)
    lazy = IdxImages.open(str(src / "train-images-idx3-ubyte.gz"))
    assert len(lazy) == 70 and lazy.shape == (70, 6, 5)
    assert np.array_equal(lazy.head, images[:32])  # what the shard sizes are estimated from
    assert np.array_equal(lazy.array(), images)
    assert np.array_equal(read_idx(str(src / "train-images-idx3-ubyte.gz")), images)


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda raw: raw[: len(raw) // 2], "not a readable gzip file"),  # cut short while downloading
        (lambda raw: gzip.compress(gzip.decompress(raw)[:-7]), "truncated IDX file"),  # fewer pixels than the header
    ],
)
def test_corrupt_idx_images_fail_before_anything_changes(tmp_path, damage, message):
    src = tmp_path / "idx"
    src.mkdir()
    _idx(src / "train-images-idx3-ubyte.gz", np.full((40, 4, 4), 9, np.uint8))
    _idx(src / "train-labels-idx1-ubyte.gz", (np.arange(40) % 2).astype(np.uint8))
    out = tmp_path / "out"
    config = ConvertConfig(source=str(src), splits={"train": 1.0}, workers=1)
    convert(config, str(out))
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    image_file = src / "train-images-idx3-ubyte.gz"
    image_file.write_bytes(damage(image_file.read_bytes()))
    with pytest.raises(ConvertError, match=message):
        convert(config, str(out))
    # The earlier dataset is still whole: its manifest and shards are untouched.
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_png_batches_are_byte_identical_to_one_image_at_a_time():
    from components.image_input.imaging import encode_png, encode_png_batch

    rng = np.random.default_rng(1)
    for shape in [(9, 28, 28), (5, 7, 3, 1), (4, 6, 5, 2), (3, 5, 4, 3), (2, 3, 3, 4), (0, 4, 4)]:
        batch = rng.integers(0, 255, shape, dtype=np.uint8)
        assert encode_png_batch(batch) == [encode_png(x) for x in batch]
    with pytest.raises(ValueError, match="uint8"):
        encode_png_batch(np.zeros((2, 3, 3), np.float32))
    with pytest.raises(ValueError, match="C<=4"):
        encode_png_batch(np.zeros((2, 3, 3, 5), np.uint8))


def test_the_registry_names_every_kind_once_and_the_cli_offers_them(tmp_path, capsys):
    from components.convert.__main__ import main
    from components.image_input import sources

    names = sources.kind_names()
    assert names == tuple(k.name for k in sources.kinds()) and len(set(names)) == len(names)
    assert all(k.description in sources.expected() for k in sources.kinds())
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "{" + ",".join(names) + "}" in capsys.readouterr().out.replace("\n", "").replace(" ", "")
    (tmp_path / "cls" / "a").mkdir(parents=True)
    (tmp_path / "table.CSV").write_text("path,label\n")
    (tmp_path / "coco.json").write_text("{}")
    (tmp_path / "mnist").mkdir()
    (tmp_path / "mnist" / "train-images-idx3-ubyte.gz").write_bytes(b"")
    found = {name: sources.detect(str(tmp_path / name)) for name in ("cls", "table.CSV", "coco.json", "mnist")}
    assert found == {"cls": "folder", "table.CSV": "csv", "coco.json": "coco", "mnist": "idx"}
    assert [sources.detect(b) for b in ("digits", "fashion-mnist", "shapes:10")] == [
        "digits",
        "fashion-mnist",
        "shapes",
    ]
    with pytest.raises(sources.SourceError, match="unknown source format 'tiff'; expected one of folder, csv"):
        sources.open_source(str(tmp_path / "cls"), "tiff")


def test_coco_boxes_are_typed_and_frozen(pictures, tmp_path):
    import dataclasses

    from components.image_input import sources

    coco = {
        "images": [{"id": 1, "file_name": "p0.png", "width": 5, "height": 4}],
        "annotations": [{"id": 7, "image_id": 1, "category_id": 3, "bbox": [1, 1, 2, 2], "iscrowd": 1}],
        "categories": [{"id": 3, "name": "dot"}],
    }
    path = pictures / "boxes.json"
    path.write_text(json.dumps(coco))
    (item,) = sources.open_source(str(path)).items
    assert item.boxes == sources.ImageBoxes((sources.Box([1, 1, 2, 2], 7, 0, 1),), (5, 4))
    with pytest.raises(dataclasses.FrozenInstanceError):
        item.boxes.boxes[0].label = 1
