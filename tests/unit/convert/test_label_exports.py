"""Predictions out to the labelling tools (``components.image_input.exports``), and the round trip:
1,000 random boxes on images of varied sizes, converted from YOLO, VOC and Label Studio, exported
back and read by our own importers, land within 0.5 px of where they were on every side.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from components.convert import convert
from components.convert.config import ConvertConfig
from components.image_input import exports, sources
from components.image_input.exports import ReviewBox, ReviewItem
from components.image_input.sources.label_studio import scan_label_studio
from components.image_input.sources.voc import scan_voc
from components.image_input.sources.yolo import scan_yolo
from tests import label_sets
from trainer.tfrecords import load_dataset_info

BOXES = 1000


def _convert(path: Path, out: Path) -> list[ReviewItem]:
    """The set converted, then read back from its records as review items (every split)."""
    convert(ConvertConfig(source=str(path), splits={"train": 1.0}, workers=1), str(out), log=lambda _: None)
    return [
        it for split in load_dataset_info(str(out)).splits for it in exports.review_items_of_dataset(str(out), split)
    ]


def _corners(orig: label_sets.Original) -> dict[str, np.ndarray]:
    """Image file name -> its boxes as pixel corners ``[x0, y0, x1, y1]``."""
    return {
        name: np.array([[x, y, x + w, y + h] for _, x, y, w, h in boxes]).reshape(-1, 4)
        for name, boxes in orig.boxes.items()
    }


def _scanned(items, sizes: dict[str, tuple[int, int]]) -> dict[str, np.ndarray]:
    """What an importer scanned, as pixel corners by image file name (YOLO's fractions scaled)."""
    out = {}
    for it in items:
        name = it.key.rsplit("/", 1)[-1]
        w, h = sizes[name] if it.boxes.normalized else (1, 1)
        out[name] = np.array(
            [[x * w, y * h, (x + bw) * w, (y + bh) * h] for x, y, bw, bh in (b.bbox for b in it.boxes.boxes)]
        ).reshape(-1, 4)
    return out


def _assert_within_half_a_pixel(found: dict[str, np.ndarray], orig: label_sets.Original) -> float:
    want = _corners(orig)
    assert sorted(found) == sorted(want)
    assert sum(len(v) for v in want.values()) >= BOXES
    worst = max((float(np.abs(found[n] - want[n]).max()) for n in want if len(want[n])), default=0.0)
    assert worst <= 0.5, f"a box side moved {worst:.3f} px"
    return worst


@pytest.fixture(scope="module")
def many() -> dict[bool, label_sets.Original]:
    """Over 1,000 random boxes on 120 images of 8 sizes (24x16 to 1280x720): integer pixels and not."""
    return {integer: label_sets.original(images=120, boxes=10, seed=11, integer=integer) for integer in (True, False)}


def _sizes(orig: label_sets.Original) -> dict[str, tuple[int, int]]:
    return {name: (w, h) for name, w, h, _ in orig.images}


def test_yolo_to_ours_to_yolo(many, tmp_path):
    orig = many[False]
    items = _convert(label_sets.yolo(tmp_path / "a", orig), tmp_path / "out")
    back = tmp_path / "b"
    for split in ("train", "val"):
        picked = [it for it in items if f"/{split}/" in it.image]
        exports.write_yolo_labels(picked, back / "labels" / split, classes=orig.classes)
    label_sets.link(tmp_path / "a" / "images", back / "images")
    (back / "data.yaml").write_text(
        f"path: {back}\ntrain: images/train\nval: images/val\nnames: {list(orig.classes)}\n"
    )
    line = (back / "labels" / "train" / "im0000.txt").read_text().splitlines()[0].split()
    assert len(line) == 6 and float(line[5]) == 1.0  # save_conf: the confidence is the sixth value
    _assert_within_half_a_pixel(_scanned(scan_yolo(str(back)).items, _sizes(orig)), orig)


def test_voc_to_ours_to_voc(many, tmp_path):
    orig = many[True]
    items = _convert(label_sets.voc(tmp_path / "a", orig), tmp_path / "out")
    exports.write_voc(items, tmp_path / "b", classes=orig.classes)
    label_sets.link(tmp_path / "a" / "JPEGImages", tmp_path / "b" / "JPEGImages")
    scanned = scan_voc(str(tmp_path / "b"))
    assert _assert_within_half_a_pixel(_scanned(scanned.items, {}), orig) == 0.0  # integer pixels come back exact
    text = (tmp_path / "b" / "Annotations" / "im0002.xml").read_text()
    assert "<filename>im0002.png</filename>" in text and "<width>100</width>" in text


def test_label_studio_to_ours_to_label_studio(many, tmp_path):
    orig = many[False]
    items = _convert(label_sets.label_studio(tmp_path / "a", orig), tmp_path / "out")
    path = exports.write_label_studio(
        items,
        tmp_path / "a" / "back.json",
        model_version="m1",
        classes=orig.classes,
        task="detection",
        annotations=True,
    )
    assert sources.detect(str(path)) == "label-studio"
    _assert_within_half_a_pixel(_scanned(scan_label_studio(str(path)).items, {}), orig)


def test_a_cvat_archive_holds_coco_that_our_coco_reader_reads_back(tmp_path):
    orig = label_sets.original(images=6, boxes=3, seed=2)
    items = _convert(label_sets.coco(tmp_path / "a", orig), tmp_path / "out")
    scored = [
        ReviewItem(
            it.image, it.width, it.height, tuple(ReviewBox(b.x, b.y, b.width, b.height, b.label, 0.5) for b in it.boxes)
        )
        for it in items
    ]
    archive = exports.write_cvat_coco(scored, tmp_path / "cvat.zip", classes=orig.classes)
    with zipfile.ZipFile(archive) as z:
        assert z.namelist() == ["annotations/instances_default.json"]
        data = json.loads(z.read("annotations/instances_default.json"))
    assert [c["name"] for c in data["categories"]] == list(orig.classes) and {
        a["score"] for a in data["annotations"]
    } == {0.5}
    (tmp_path / "a" / "cvat.json").write_text(json.dumps(data))
    source = sources.open_source(str(tmp_path / "a" / "cvat.json"), "coco")
    found = {it.key: [list(b.bbox) for b in it.boxes.boxes] for it in source.items}
    assert sorted(found) == sorted(orig.boxes)
    for name, boxes in orig.boxes.items():  # the records keep float32 fractions: pixels within 1e-3
        np.testing.assert_allclose(
            np.reshape(found[name], (-1, 4)), np.reshape([b[1:] for b in boxes], (-1, 4)), atol=1e-3
        )


def test_label_studio_predictions_carry_the_model_the_scores_and_the_reason(tmp_path):
    box = ReviewBox(10.0, 20.0, 30.0, 40.0, "dog", 0.42)
    items = [ReviewItem("/pool/img/a.jpg", 200, 100, (box,), score=0.9, reason="least confident")]
    path = exports.write_label_studio(
        items,
        tmp_path / "pick.json",
        model_version="det@3",
        classes=["cat", "dog"],
        task="detection",
        local_root="/pool",
    )
    (task,) = json.loads(path.read_text())
    assert task["data"] == {"image": "/data/local-files/?d=img/a.jpg", "reason": "least confident"}
    (prediction,) = task["predictions"]
    assert (prediction["model_version"], prediction["score"]) == ("det@3", 0.9)
    (result,) = prediction["result"]
    assert result["value"] == {
        "x": 5.0,
        "y": 20.0,
        "width": 15.0,
        "height": 40.0,
        "rotation": 0,
        "rectanglelabels": ["dog"],
    }
    assert (result["original_width"], result["score"], result["from_name"]) == (200, 0.42, "label")
    assert '<RectangleLabels name="label" toName="image">' in (tmp_path / "pick.xml").read_text()
    picks = [ReviewItem("b.png", 0, 0, label="cat", label_score=0.55, score=0.45)]
    path = exports.write_label_studio(
        picks, tmp_path / "cls.json", model_version="c@1", classes=["cat", "dog"], task="classification"
    )
    (result,) = json.loads(path.read_text())[0]["predictions"][0]["result"]
    assert (result["type"], result["value"], result["score"]) == ("choices", {"choices": ["cat"]}, 0.55)
    with pytest.raises(ValueError, match=r"labels \['cow'\] are not among the classes"):
        exports.write_label_studio(
            [ReviewItem("c.png", 1, 1, label="cow")],
            tmp_path / "x.json",
            model_version="",
            classes=["cat"],
            task="classification",
        )


def test_batch_prediction_rows_become_review_items(tmp_path):
    rows = [
        {
            "path": "a.png",
            "image_id": 1,
            "width": 20,
            "height": 10,
            "detections": [{"box": [1, 2, 5, 8], "class": "cat", "class_id": 1, "score": 0.7}],
        },
        {"path": "b.png", "image_id": 2, "classes": [{"class": "dog", "index": 1, "score": 0.6}], "score": 0.4},
        {"path": "c.png", "image_id": 3, "error": "unreadable"},
    ]
    det, cls = exports.review_items_of_predictions(rows, root="/pool")
    assert det == ReviewItem("/pool/a.png", 20, 10, (ReviewBox(1, 2, 4, 6, "cat", 0.7),))
    assert (cls.label, cls.label_score, cls.score) == ("dog", 0.6, 0.4)
    folder = exports.write_yolo_labels([det], tmp_path / "labels", classes=["cat"])
    assert (folder / "a.txt").read_text() == "0 0.15 0.5 0.2 0.6 0.7\n"
    with pytest.raises(ValueError, match="share a file name"):
        exports.write_yolo_labels([det, det], tmp_path / "labels", classes=["cat"])
