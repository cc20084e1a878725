"""The built-in detection data ``shapes``: a deterministic generator, cached, converted through the COCO reader."""

import hashlib
import json

import numpy as np
import pytest

from components.convert import convert
from components.convert.config import ConvertConfig
from components.image_input import shapes, sources


def _digest(folder):
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def test_the_generator_is_deterministic_has_negatives_and_keeps_boxes_inside(tmp_path):
    a = shapes.generate(tmp_path / "a", count=60, seed=3)
    b = shapes.generate(tmp_path / "b", count=60, seed=3)
    c = shapes.generate(tmp_path / "c", count=60, seed=4)
    assert _digest(a.parent) == _digest(b.parent)  # same seed: the same bytes
    assert _digest(a.parent) != _digest(c.parent)
    coco = json.loads(a.read_text())
    assert len(coco["images"]) == 60
    per_image = {img["id"]: 0 for img in coco["images"]}
    for ann in coco["annotations"]:
        x, y, w, h = ann["bbox"]
        assert (
            0 <= x and 0 <= y and w >= shapes.MIN_SIDE and x + w <= shapes.DEFAULT_SIZE and y + h <= shapes.DEFAULT_SIZE
        )
        per_image[ann["image_id"]] += 1
    counts = list(per_image.values())
    assert 0 in counts and max(counts) <= shapes.MAX_OBJECTS  # negatives present
    assert {a["category_id"] for a in coco["annotations"]} == {1, 2, 3}
    # The objects are drawn where their boxes say: the box's centre differs from the plain background.
    from PIL import Image

    ann = coco["annotations"][0]
    img = next(i for i in coco["images"] if i["id"] == ann["image_id"])
    pixels = np.asarray(Image.open(a.parent / img["file_name"]))
    x, y, w, h = ann["bbox"]
    centre = pixels[y + h // 2, x + w // 2]
    assert set(centre.tolist()) <= {15, 240}  # an object's colour, not the textured background's


def test_a_generation_in_the_cache_is_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = shapes.cached(count=12, seed=1)
    assert first == tmp_path / "cache" / "lean-tpu-pipelines" / "shapes-v1-12-1" / "instances.json"
    stamp = first.stat().st_mtime_ns
    assert shapes.cached(count=12, seed=1).stat().st_mtime_ns == stamp  # not written again


def test_shapes_converts_through_the_coco_reader_and_reads_back_with_tf_data(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    out = tmp_path / "out"
    config = ConvertConfig(source="shapes:80", limit_per_split=10, workers=1)
    manifest = convert(config, str(out), log=lambda _: None)
    assert manifest["task"] == "detection" and manifest["source"]["format"] == "shapes"
    assert manifest["classes"] == list(shapes.CLASSES)
    assert manifest["image"] == {"height": 64, "width": 64, "channels": 3}
    counts = {name: s["count"] for name, s in manifest["splits"].items()}
    assert set(counts) == {"train", "validation", "test"} and max(counts.values()) == 10  # limit_per_split holds
    assert manifest["rejected"] == 0 and manifest["boxes"]["dropped"] == 0 and manifest["boxes"]["clipped"] == 0

    coco = json.loads((tmp_path / "cache" / "lean-tpu-pipelines" / "shapes-v1-80-0" / "instances.json").read_text())
    by_name = {img["file_name"]: img["id"] for img in coco["images"]}
    truth: dict[int, list] = {i: [] for i in by_name.values()}
    for ann in coco["annotations"]:
        x, y, w, h = ann["bbox"]
        truth[ann["image_id"]].append(([y / 64, x / 64, (y + h) / 64, (x + w) / 64], ann["category_id"] - 1))

    tf = pytest.importorskip("tensorflow")
    from trainer.tfrecords import load_dataset_info, parse_batch

    seen = 0
    info = load_dataset_info(str(out))
    for split in info.splits:
        for batch in tf.data.TFRecordDataset(info.shard_paths(split)).batch(4):
            parsed = parse_batch(batch)
            keys = parsed["image/source_key"].numpy()
            cols = [parsed[f"image/object/bbox/{k}"].to_list() for k in ("ymin", "xmin", "ymax", "xmax")]
            labels = parsed["image/object/class/label"].to_list()
            for i, key in enumerate(keys):
                expected = truth[by_name[key.decode()]]
                boxes = np.array([c[i] for c in cols]).T.reshape(-1, 4)
                assert boxes == pytest.approx(np.array([b for b, _ in expected]).reshape(-1, 4))
                assert labels[i] == [label for _, label in expected]
                seen += 1
    assert seen == sum(counts.values())
    # Converted again from the same cache: up to date; the fingerprint does not name the cache's place.
    assert convert(config, str(out), log=lambda _: None)["plan_key"] == manifest["plan_key"]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "elsewhere"))
    assert sources.open_source("shapes:80").fingerprint == manifest["source"]["fingerprint"]


def test_a_bad_shapes_count_is_an_error():
    with pytest.raises(sources.SourceError, match=r"expected 'shapes' or 'shapes:<count>'"):
        sources.open_source("shapes:many")
