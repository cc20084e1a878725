"""Datasets that grow by deltas: a conversion with a parent writes only the items the parent lacks.

One folder of PNG digits, converted; 10 % more images; a delta with the first dataset as its
parent; then a delta of the delta. The union is read back through the one reader of datasets.
"""

import json
import os
import shutil

import numpy as np
import pytest
from PIL import Image

from components.convert.config import ConvertConfig
from components.convert.convert import convert
from components.convert.run import run_step
from components.convert.surface import headline
from components.image_input.sources import ConvertError
from components.surface import StepOutputs
from tests.promote_models import digits
from trainer.tfrecord_read import iter_split_features
from trainer.tfrecords import KEYS_NAME, DatasetError, load_dataset_info

FIRST, GROWN, AGAIN = 200, 220, 240  # images in the folder: then 10 % more, then 10 % more again


def _write_pngs(folder, start, stop):
    images, labels = digits()
    for i in range(start, stop):
        (folder / str(labels[i])).mkdir(parents=True, exist_ok=True)
        Image.fromarray(images[i].reshape(8, 8).astype(np.uint8)).save(folder / str(labels[i]) / f"{i:04d}.png")


def _keys(dataset):
    """key -> split, from a dataset's own ``keys.jsonl``."""
    lines = (dataset / KEYS_NAME).read_text().splitlines()
    return {row["key"]: row["split"] for row in map(json.loads, lines)}


def _config(photos, **kw):
    return ConvertConfig(source=str(photos), workers=1, **kw)


@pytest.fixture(scope="module")
def grown(tmp_path_factory):
    """A dataset of 200 PNGs, and a delta of it after the folder grew by 20 (10 %)."""
    root = tmp_path_factory.mktemp("delta")
    photos = root / "photos"
    _write_pngs(photos, 0, FIRST)
    convert(_config(photos), str(root / "first"), log=lambda _: None)
    first_files = {p.name: p.stat().st_mtime_ns for p in (root / "first").iterdir()}
    _write_pngs(photos, FIRST, GROWN)
    # An old image's bytes garbled at the same size: read again, it would be rejected.
    old = photos / "0" / "0000.png"
    old.write_bytes(b"\0" * old.stat().st_size)
    lines = []
    convert(_config(photos, parent=str(root / "first")), str(root / "delta"), log=lines.append)
    metadata, metrics = run_step(_config(photos, parent=str(root / "first")), str(root / "delta"), verify=True)
    return {
        "root": root,
        "photos": photos,
        "first_files": first_files,
        "lines": lines,
        "metadata": metadata,
        "metrics": metrics,
    }


def test_a_delta_writes_only_the_new_items_and_counts_what_it_reused(grown):
    root = grown["root"]
    assert grown["lines"][-1].endswith(
        f"a delta of {root / 'first'}: {GROWN - FIRST} records written, {FIRST} reused (not read)"
    )
    metrics = grown["metrics"]
    assert metrics["records_written"] == GROWN - FIRST and metrics["records_reused"] == FIRST
    assert metrics["images"] == GROWN and metrics["verified_records"] == GROWN - FIRST  # verify reads its own only
    assert metrics["rejected"] == 0  # the garbled old image was not read
    labels = digits()[1]
    assert set(_keys(root / "delta")) == {f"{labels[i]}/{i:04d}.png" for i in range(FIRST, GROWN)}
    # the parent is untouched
    assert {p.name: p.stat().st_mtime_ns for p in (root / "first").iterdir()} == grown["first_files"]
    info = json.loads((root / "delta" / "dataset.json").read_text())
    assert info["parent"]["uri"] == str(root / "first") and info["parent"]["records"] == FIRST
    assert info["parent"]["fingerprint"] == json.loads((root / "first" / "dataset.json").read_text())["plan_key"]
    assert grown["metadata"]["parent"]["records"] == FIRST
    step = StepOutputs({"metrics": metrics}, {})
    assert headline(step) == f"{GROWN - FIRST} images converted (a delta: {FIRST} reused, not read), 0 rejected"
    assert not any(p.name.startswith("_") for p in (root / "delta").iterdir())


def test_no_item_moves_split_and_the_union_reads_back_through_the_one_reader(grown):
    root = grown["root"]
    placed = {**_keys(root / "first"), **_keys(root / "delta")}
    # a whole conversion of the grown folder puts every item where the delta's union has it
    whole = root / "whole"
    convert(_config(grown["photos"]), str(whole), log=lambda _: None)
    assert _keys(whole) == placed
    info = load_dataset_info(str(root / "delta"))
    assert sum(s.count for s in info.splits.values()) == GROWN
    for split, part in info.splits.items():
        paths = info.shard_paths(split)
        assert any(str(root / "first") in p for p in paths) and any(str(root / "delta") in p for p in paths)
        read = [r["image/source_key"][0].decode() for r in iter_split_features(info, split)]
        assert sorted(read) == sorted(k for k, s in placed.items() if s == split) and len(read) == part.count
        assert sum(part.class_counts.values()) == part.count


def test_the_union_feeds_tf_data_and_the_data_checks(grown):
    from components.validate.run import validate
    from trainer.data import make_dataset
    from trainer.tasks import get_task

    delta = str(grown["root"] / "delta")
    ds = make_dataset(delta, "train", 64, training=False, task=get_task("classification"))
    assert sum(int(labels.shape[0]) for _, labels in ds) == load_dataset_info(delta).split_count("train")
    result = validate(delta)
    assert sum(s.count for s in result.stats.splits.values()) == GROWN
    assert "leakage" not in [f.kind for f in result.findings]


def test_a_delta_of_a_delta_and_a_re_run_that_is_up_to_date(grown):
    root, photos = grown["root"], grown["photos"]
    _write_pngs(photos, GROWN, AGAIN)
    lines = []
    info = convert(_config(photos, parent=str(root / "delta")), str(root / "delta2"), log=lines.append)
    assert lines[-1].endswith(f"{AGAIN - GROWN} records written, {GROWN} reused (not read)")
    assert sum(s["count"] for s in info["splits"].values()) == AGAIN
    dirs = {s.get("dir") for part in info["splits"].values() for s in part["shards"]}
    assert dirs == {str(root / "first"), str(root / "delta"), None}
    assert len(load_dataset_info(str(root / "delta2")).shard_paths("train")) == 3
    again = []
    convert(_config(photos, parent=str(root / "delta")), str(root / "delta2"), log=again.append)
    assert again[-1].startswith(f"convert: {root / 'delta2'} is up to date ({AGAIN} images")


def test_a_missing_or_changed_parent_is_one_line_naming_the_fix(grown, tmp_path):
    photos = grown["photos"]
    with pytest.raises(ConvertError) as err:
        convert(_config(photos, parent=str(tmp_path / "nope")), str(tmp_path / "out"), log=lambda _: None)
    assert str(err.value) == (
        f"convert.parent {tmp_path / 'nope'} is not a dataset (no dataset.json): give the folder of the dataset "
        "this conversion grows from, or no parent"
    )
    # a parent converted again with other settings is another dataset: its deltas say so when read
    parent = tmp_path / "parent"
    shutil.copytree(grown["root"] / "first", parent)
    convert(_config(photos, parent=str(parent)), str(tmp_path / "child"), log=lambda _: None)
    convert(_config(photos, seed=1), str(parent), log=lambda _: None)
    with pytest.raises(DatasetError) as err:
        load_dataset_info(str(tmp_path / "child"))
    message = str(err.value)
    assert "\n" not in message and f"is a delta of {parent}, which changed since" in message
    assert message.endswith("restore it, or convert " + str(photos) + " again without a parent")
    shutil.rmtree(parent)
    with pytest.raises(DatasetError, match=r"which is not there \(no dataset.json\); restore it"):
        load_dataset_info(str(tmp_path / "child"))


def test_a_parent_converted_before_deltas_and_a_changed_item_are_refused(grown, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(grown["root"] / "first", old)
    os.remove(old / KEYS_NAME)
    with pytest.raises(ConvertError, match=r"lists no keys \(keys.jsonl: converted before datasets could grow"):
        convert(_config(grown["photos"], parent=str(old)), str(tmp_path / "d"), log=lambda _: None)
    photos = tmp_path / "photos"
    shutil.copytree(grown["photos"], photos)
    changed = photos / str(digits()[1][1]) / "0001.png"
    changed.write_bytes(changed.read_bytes() + b"\0")
    with pytest.raises(ConvertError, match=r"^1 items of .* changed since the parent .*: a delta only adds items"):
        convert(_config(photos, parent=str(grown["root"] / "first")), str(tmp_path / "e"), log=lambda _: None)
    with pytest.raises(ConvertError, match="is the output folder itself"):
        convert(_config(photos, parent=str(tmp_path / "e")), str(tmp_path / "e"), log=lambda _: None)


def test_a_manifest_with_its_own_splits_grows_and_a_changed_row_is_refused(grown, tmp_path):
    import csv

    images = [p for p in sorted(grown["photos"].glob("*/*.png")) if p.name != "0000.png"][:12]  # not the garbled one

    def manifest(rows):
        path = tmp_path / "list.csv"
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["path", "label", "split"])
            writer.writerows(rows)
        return ConvertConfig(source=str(path), workers=1)

    # the two rows added are both train: the delta carves validation out of train alone, as the whole source's
    rows = [[str(p), p.parent.name, "train" if i % 3 else "test"] for i, p in enumerate(images[:10])]
    rows += [[str(p), p.parent.name, "train"] for p in images[10:]]
    convert(manifest(rows[:10]), str(tmp_path / "v1"), log=lambda _: None)
    lines = []
    info = convert(manifest(rows).replace(parent=str(tmp_path / "v1")), str(tmp_path / "v2"), log=lines.append)
    assert lines[-1].endswith("2 records written, 10 reused (not read)")
    counts = {k: v["count"] for k, v in info["splits"].items()}
    assert counts["test"] == 4 and counts["train"] + counts.get("validation", 0) == 8  # validation: carved from train
    convert(manifest(rows), str(tmp_path / "whole"), log=lambda _: None)
    assert _keys(tmp_path / "whole") == {**_keys(tmp_path / "v1"), **_keys(tmp_path / "v2")}
    rows[0][2] = "train"  # an item of v1 moved to another split by the source: not a delta's to do
    with pytest.raises(ConvertError, match=r"^1 items of .* changed since the parent"):
        convert(manifest(rows).replace(parent=str(tmp_path / "v1")), str(tmp_path / "v3"), log=lambda _: None)


def test_a_coco_file_grows_its_boxes_add_up_and_an_edited_box_is_refused(tmp_path):
    def coco(count, shift=0):
        for i in range(count):
            Image.fromarray(np.full((8, 10, 3), i * 20, np.uint8)).save(tmp_path / f"im{i}.png")
        images = [{"id": i, "file_name": f"im{i}.png", "width": 10, "height": 8} for i in range(count)]
        bbox = [[1 + shift * (i == 0), 1, 4, 4] for i in range(count)]  # shift moves image 0's box
        boxes = [{"id": i, "image_id": i, "category_id": 1, "bbox": bbox[i]} for i in range(count)]
        path = tmp_path / "instances.json"
        path.write_text(json.dumps({"images": images, "annotations": boxes, "categories": [{"id": 1, "name": "cat"}]}))
        return ConvertConfig(source=str(path), workers=1)

    convert(coco(10), str(tmp_path / "v1"), log=lambda _: None)
    info = convert(coco(11).replace(parent=str(tmp_path / "v1")), str(tmp_path / "v2"), log=lambda _: None)
    assert info["task"] == "detection" and info["boxes"]["kept"] == 11 and info["parent"]["records"] == 10
    assert sum(s["unlabelled"] for s in info["splits"].values()) == 11
    with pytest.raises(ConvertError, match=r"^1 items of .* changed since the parent .*: a delta only adds items"):
        convert(coco(11, shift=1).replace(parent=str(tmp_path / "v1")), str(tmp_path / "v3"), log=lambda _: None)


def test_split_by_content_puts_a_new_copy_of_an_old_image_in_the_old_image_s_split(tmp_path):
    photos = tmp_path / "photos"
    _write_pngs(photos, 0, 30)
    config = _config(photos, split_by="content")
    convert(config, str(tmp_path / "v1"), log=lambda _: None)
    for old in sorted(photos.glob("*/*.png")):
        shutil.copy(old, old.with_name("copy-" + old.name))
    convert(config.replace(parent=str(tmp_path / "v1")), str(tmp_path / "v2"), log=lambda _: None)
    before, added = _keys(tmp_path / "v1"), _keys(tmp_path / "v2")
    assert len(added) == 30 and set(added).isdisjoint(before)
    assert all(split == before[key.replace("copy-", "")] for key, split in added.items())
