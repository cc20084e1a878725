"""Splitting by content keeps copies of an image in one split; ``dataset.json`` names the extra columns."""

import csv
import json
import random

import numpy as np
import pytest
from PIL import Image

from components.convert.config import ConvertConfig
from components.convert.convert import convert
from components.convert.plan import assign_splits
from components.convert.publish import extra_columns
from components.image_input.sources import ConvertError, Item
from components.validate.run import validate
from trainer.tfrecords import DatasetInfo


def _folder_with_copies(root, images=60, copies=2):
    """A class folder per class, each image saved ``copies`` times under other names."""
    rng = np.random.default_rng(0)
    for i in range(images):
        pixels = rng.integers(0, 255, size=(8, 8, 3), dtype=np.uint8)
        for c in range(copies):
            folder = root / f"class_{i % 3}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels).save(folder / f"copy{c}_of_{i}.png")
    return root


@pytest.mark.parametrize("stratify", [False, True])
def test_copies_land_in_one_split_by_content_and_leak_by_path(tmp_path, stratify):
    source = _folder_with_copies(tmp_path / "photos")
    results = {}
    for split_by in ("path", "content"):
        out = tmp_path / f"{split_by}-{stratify}"
        config = ConvertConfig(source=str(source), split_by=split_by, stratify=stratify, workers=1)
        convert(config, str(out), log=lambda _: None)
        results[split_by] = [f.kind for f in validate(str(out)).findings]
    assert "leakage" in results["path"]  # 60 pairs over 80/10/10 splits: some pair straddles two
    assert "leakage" not in results["content"]


def test_equal_images_get_equal_orders_whatever_their_keys():
    items = [Item(f"k{i}", i % 2, f"/x/{i}.png") for i in range(200)]
    hashed = {i: f"sha{i // 2}" for i in range(200)}  # items 2n and 2n+1 are one image
    splits = assign_splits(items, {"train": 0.5, "validation": 0.25, "test": 0.25}, hashed=hashed)
    where = {it.key: name for name, members in splits.items() for it in members}
    assert all(where[f"k{2 * n}"] == where[f"k{2 * n + 1}"] for n in range(100))


def test_array_sources_cannot_be_split_by_content(tmp_path):
    with pytest.raises(ConvertError, match="split_by=content needs a source of image files"):
        convert(ConvertConfig(source="digits", split_by="content", workers=1), str(tmp_path / "d"), log=print)


def test_dataset_json_names_the_manifest_s_extra_columns_and_their_kinds(tmp_path):
    images = tmp_path / "img"
    images.mkdir()
    rows = []
    for i in range(6):
        Image.fromarray(np.full((8, 8), i * 40, np.uint8)).save(images / f"{i}.png")
        rows.append({"path": f"img/{i}.png", "label": f"c{i % 2}", "camera": random.choice(["a", "b"])})
    with open(tmp_path / "list.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, ["path", "label", "camera"])
        writer.writeheader()
        writer.writerows(rows)
    info = convert(ConvertConfig(source=str(tmp_path / "list.csv"), workers=1), str(tmp_path / "csv"), log=print)
    assert info["schema_version"] == 2 and info["columns"] == {"camera": "string"}
    # JSONL keeps the values' JSON types
    items = [
        Item("a", 0, "a.png", extra={"site": 3, "exposure": 0.5, "tag": "x", "odd": 1}),
        Item("b", 0, "b.png", extra={"site": 4, "exposure": 1, "odd": "y"}),
    ]
    assert extra_columns(items) == {"exposure": "float", "odd": "mixed", "site": "int", "tag": "string"}


def test_a_dataset_of_schema_version_1_reads_as_having_no_columns(tmp_path):
    info = convert(ConvertConfig(source="digits", limit_per_split=5, workers=1), str(tmp_path / "d"), log=print)
    older = {**info, "schema_version": 1}
    older.pop("columns", None)
    assert DatasetInfo.from_json(json.loads(json.dumps(older))).columns == {}
