"""Labelling tools' exports as sources (``yolo``, ``voc``, ``label-studio``): each converts to the
boxes of its COCO original, and each bad input is counted and listed or one line naming the fix.

The sets are written in each tool's documented layout (``tests/label_sets.py``); the records are
read back without TensorFlow (``trainer.tfrecord_read``).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from components.convert import ConvertError, convert
from components.convert.config import ConvertConfig
from components.convert.run import summarize
from components.image_input import sources
from tests import label_sets
from tests.label_sets import Original
from trainer.tfrecord_read import iter_split_features
from trainer.tfrecords import REJECTED_NAME, DatasetInfo, load_dataset_info

SMALL = label_sets.original(images=8, boxes=3, seed=3)


def _convert(path, out, **kw) -> dict:
    config = ConvertConfig(source=str(path), **{"splits": {"train": 1.0}, "workers": 1, **kw})
    return convert(config, str(out), log=lambda _: None)


def _boxes(out: Path) -> dict[str, list[tuple[str, tuple[float, ...]]]]:
    """Image file name -> its records' boxes ``(class, (xmin, ymin, xmax, ymax))``, normalised."""
    info = load_dataset_info(str(out))
    found = {}
    for split in info.splits:
        for f in iter_split_features(info, split):
            corners = zip(*(f[f"image/object/bbox/{k}"] for k in ("xmin", "ymin", "xmax", "ymax")), strict=True)
            texts = [t.decode() for t in f["image/object/class/text"]]
            found[f["image/source_key"][0].decode().rsplit("/", 1)[-1]] = list(zip(texts, corners, strict=True))
    return found


def _rejected(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / REJECTED_NAME).read_text().splitlines()]


WRITERS = {
    "yolo": lambda root, orig: label_sets.yolo(root / "yolo", orig),
    "voc": lambda root, orig: label_sets.voc(root / "voc", orig),
    "label-studio": lambda root, orig: label_sets.label_studio(root / "ls", orig),
}


@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_each_layout_converts_to_the_boxes_of_its_coco_original(kind, tmp_path):
    orig = label_sets.original(images=16, boxes=4, seed=7)
    coco = _convert(label_sets.coco(tmp_path / "coco", orig), tmp_path / "from_coco")
    path = WRITERS[kind](tmp_path, orig)
    assert sources.detect(str(path)) == kind
    made = _convert(path, tmp_path / "out")
    assert made["task"] == "detection" and coco["classes"] == list(orig.classes)
    assert made["classes"] == (sorted(orig.classes) if kind == "voc" else list(orig.classes))  # VOC: names sorted
    ours, theirs = _boxes(tmp_path / "out"), _boxes(tmp_path / "from_coco")
    per_class = Counter(c for boxes in ours.values() for c, _ in boxes)
    assert per_class == Counter(c for boxes in theirs.values() for c, _ in boxes)
    assert sum(per_class.values()) == sum(len(b) for b in orig.boxes.values()) > 40
    assert sorted(ours) == sorted(theirs)
    for name, boxes in theirs.items():
        assert [c for c, _ in ours[name]] == [c for c, _ in boxes]
        np.testing.assert_allclose([b for _, b in ours[name]], [b for _, b in boxes] or np.empty((0, 4)), atol=1e-6)
    assert made["source"]["labels"]["tool"] == kind and made["source"]["labels"]["rejected"] == 0
    assert made["boxes"]["negatives"] == coco["boxes"]["negatives"]


# ------------------------------------------------------------------------------------------------
# YOLO
# ------------------------------------------------------------------------------------------------


def _yolo(root: Path, lines: dict[str, str], names="[cat, dog]", splits=None) -> Path:
    """A YOLO set of 20x10 images named by ``lines`` (image stem -> its label file's text, None: no file)."""
    for stem, text in lines.items():
        split = (splits or {}).get(stem, "train")
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "images" / split / f"{stem}.png").write_bytes(label_sets.png(20, 10, len(stem)))
        if text is not None:
            (root / "labels" / split).mkdir(parents=True, exist_ok=True)
            (root / "labels" / split / f"{stem}.txt").write_text(text)
    used = sorted({(splits or {}).get(s, "train") for s in lines})
    (root / "data.yaml").write_text(f"path: .\nnames: {names}\n" + "".join(f"{s}: images/{s}\n" for s in used))
    return root


def test_yolo_names_mapping_confidence_polygon_and_images_without_labels(tmp_path):
    lines = {
        "a": "3 0.5 0.5 0.2 0.4 0.87\n0 0.1 0.2 0.3 0.2 0.3 0.6 0.1 0.6\n",  # a confidence; a polygon
        "b": "",  # an empty label file: no objects
        "c": None,  # no label file: no objects
    }
    root = _yolo(tmp_path / "y", lines, names="{0: cat, 3: dog}")
    manifest = _convert(root, tmp_path / "out")
    assert manifest["classes"] == ["cat", "dog"]
    assert manifest["source"]["labels"]["class_ids"] == {"cat": 0, "dog": 3}
    boxes = _boxes(tmp_path / "out")
    assert boxes["b.png"] == boxes["c.png"] == [] and manifest["boxes"]["negatives"] == 2
    (dog, box1), (cat, box2) = boxes["a.png"]
    assert (dog, cat) == ("dog", "cat")
    np.testing.assert_allclose(box1, [0.4, 0.3, 0.6, 0.7], atol=1e-6)  # cx cy w h -> corners
    np.testing.assert_allclose(box2, [0.1, 0.2, 0.3, 0.6], atol=1e-6)  # the polygon's bounding box


def test_yolo_bad_label_lines_are_counted_and_listed_with_their_file_and_line(tmp_path):
    text = "0 0.5 0.5 0.2\n1 0.5 0.5 0.2 0.2\n0 0.1 0.1 0.2 0.1 0.2 0.2 0.3\n0 0.5 0.5 1.5 0.2\nx 0.5 0.5 0.2 0.2\n"
    root = _yolo(tmp_path / "y", {"a": text, "b": "0 0.5 0.5 0.5 0.5\n"})
    out = tmp_path / "out"
    manifest = _convert(root, out)
    labels = manifest["source"]["labels"]
    assert labels["rejected"] == 4
    assert labels["rejected_reasons"] == {
        "fewer than 5 values": 1,
        "odd polygon": 1,
        "coordinates outside [0, 1]": 1,
        "not a number": 1,
    }
    rows = sorted(_rejected(out), key=lambda r: r["line"])
    assert [(r["file"], r["line"]) for r in rows] == [("labels/train/a.txt", n) for n in (1, 3, 4, 5)]
    assert rows[0]["key"] == "images/train/a.png" and manifest["boxes"]["kept"] == 2
    _, metrics = summarize(DatasetInfo.from_json(manifest), str(out), verify=False, seconds=0.0)
    assert metrics["labels_rejected"] == 4.0 and metrics["labels_rejected_odd_polygon"] == 1.0


def test_yolo_names_that_disagree_with_a_label_are_one_line_naming_the_class_and_the_file(tmp_path):
    root = _yolo(tmp_path / "y", {"a": "0 0.5 0.5 0.2 0.2\n", "b": "0 0.5 0.5 0.2 0.2\n5 0.5 0.5 0.2 0.2\n"})
    with pytest.raises(ConvertError, match=r"names has classes \[0, 1\], but labels/train/b.txt line 2 has class 5"):
        _convert(root, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_yolo_duplicates_across_splits_are_rejected_and_missing_images_are_one_line(tmp_path):
    root = _yolo(tmp_path / "y", {"a": "0 0.5 0.5 0.2 0.2\n", "b": ""}, splits={"b": "val"})
    (root / "images" / "val" / "a.png").write_bytes((root / "images" / "train" / "a.png").read_bytes())
    (root / "val.txt").write_text("./images/val/a.png\n./images/val/b.png\n./images/val/b.png\n")
    (root / "data.yaml").write_text("path: .\ntrain: images/train\nval: val.txt\nnames: [cat]\n")
    manifest = _convert(root, tmp_path / "out")
    rows = _rejected(tmp_path / "out")
    assert [r["key"] for r in rows] == ["images/val/a.png", "images/val/b.png"]
    assert "also in split train" in rows[0]["reason"] and "also listed in this split" in rows[1]["reason"]
    assert manifest["splits"]["validation"]["count"] == 1
    (root / "val.txt").write_text("images/val/b.png\nimages/val/gone.png\n")
    with pytest.raises(ConvertError, match=r"1 images it names do not exist \(e.g. \['images/val/gone.png'\]\)"):
        _convert(root, tmp_path / "out2")


def test_yolo_a_roboflow_export_with_parent_relative_splits(tmp_path):
    root = tmp_path / "rf"
    for shade, split in enumerate(("train", "valid")):
        (root / split / "images").mkdir(parents=True)
        (root / split / "labels").mkdir(parents=True)
        (root / split / "images" / "x.jpg.png").write_bytes(label_sets.png(8, 8, shade))
        (root / split / "labels" / "x.jpg.txt").write_text("0 0.5 0.5 0.5 0.5\n")
    (root / "data.yaml").write_text("train: ../train/images\nval: ../valid/images\nnc: 1\nnames: ['thing']\n")
    manifest = _convert(root / "data.yaml", tmp_path / "out")
    assert {s: v["count"] for s, v in manifest["splits"].items()} == {"train": 1, "validation": 1}
    assert manifest["boxes"]["kept"] == 2


def test_a_set_with_nothing_usable_fails_in_one_line(tmp_path):
    root = _yolo(tmp_path / "y", {"a": "0 0.5\n"})
    (root / "data.yaml").write_text("path: .\ntrain: images/val\nval: images/train\nnames: [cat]\n")
    (root / "images" / "val").mkdir()
    (root / "images" / "train" / "a.png").unlink()
    with pytest.raises(ConvertError, match=r"nothing usable: no image with labels in it"):
        _convert(root, tmp_path / "out")


# ------------------------------------------------------------------------------------------------
# Pascal VOC
# ------------------------------------------------------------------------------------------------


def _voc_object(name, box, difficult=0, truncated=0):
    xmin, ymin, xmax, ymax = box
    return (
        f"<object><name>{name}</name><difficult>{difficult}</difficult><truncated>{truncated}</truncated>"
        f"<bndbox><xmin>{xmin}</xmin><ymin>{ymin}</ymin><xmax>{xmax}</xmax><ymax>{ymax}</ymax></bndbox></object>"
    )


def test_voc_inverted_boxes_are_rejected_difficult_is_crowd_and_flags_are_kept(tmp_path):
    orig = Original(("cat",), (("a.png", 20, 10, "train"), ("b.png", 20, 10, "val")), {"a.png": (), "b.png": ()})
    root = label_sets.voc(tmp_path / "voc", orig, image_sets=False)
    objects = (
        _voc_object("cat", (1, 1, 10, 5)) + _voc_object("dog", (3, 2, 3, 8)) + _voc_object("dog", (2, 2, 6, 6), 1, 1)
    )
    (root / "Annotations" / "a.xml").write_text(
        f"<annotation><filename>a.png</filename><size><width>20</width><height>10</height></size>{objects}</annotation>"
    )
    out = tmp_path / "out"
    manifest = _convert(root, out)
    assert manifest["classes"] == ["cat", "dog"] and manifest["boxes"]["crowd"] == 1
    (row,) = _rejected(out)
    assert (row["file"], row["line"]) == ("Annotations/a.xml", 2) and row["reason"].startswith("empty or inverted box")
    (cat, box), (dog, crowd) = _boxes(out)["a.png"]
    np.testing.assert_allclose(box, [0.0, 0.0, 0.5, 0.5], atol=1e-6)  # 1-based inclusive 1..10 -> edges 0..10
    assert manifest["columns"] == {"difficult": "int", "truncated": "int"}
    info = load_dataset_info(str(out))
    flags = {f["image/source_key"][0]: f.get("extra/difficult") for f in iter_split_features(info, "train")}
    assert flags[b"JPEGImages/a.png"] == [0, 1]


def test_voc_image_sets_decide_the_splits_and_missing_images_are_one_line(tmp_path):
    root = label_sets.voc(tmp_path / "voc", SMALL)
    main = root / "ImageSets" / "Main"
    (main / "val.txt").rename(main / "test.txt")
    (main / "cat_train.txt").write_text("im0000  1\n")  # a per-class list: not a split
    manifest = _convert(root, tmp_path / "out", splits={"train": 0.8, "validation": 0.2})
    assert manifest["splits"]["test"]["count"] == 2 and sources.detect(str(root)) == "voc"
    (root / "JPEGImages" / "im0001.png").unlink()
    with pytest.raises(ConvertError, match=r"1 images it names do not exist \(e.g. \['JPEGImages/im0001.png'\]\)"):
        _convert(root, tmp_path / "out2")


# ------------------------------------------------------------------------------------------------
# Label Studio
# ------------------------------------------------------------------------------------------------


def _export(folder: Path, tasks: list, config: bool = True) -> Path:
    label_sets.label_studio(folder, SMALL, config=config)
    path = folder / "export.json"
    path.write_text(json.dumps(tasks))
    return path


def _task(n, result, **annotation):
    return {"id": n, "data": {"image": f"images/im{n:04d}.png"}, "annotations": [{"result": result, **annotation}]}


def _rect(label="cat", from_name="label", rotation=0, image=0):
    value = {"x": 10.0, "y": 10.0, "width": 20.0, "height": 50.0, "rotation": rotation, "rectanglelabels": [label]}
    size = dict(zip(("original_width", "original_height"), SMALL.images[image][1:3], strict=True))
    return {"id": "r", "type": "rectanglelabels", "from_name": from_name, "to_name": "image", **size, "value": value}


def test_label_studio_bad_results_are_counted_and_listed_and_cancelled_work_is_skipped(tmp_path):
    tasks = [
        _task(0, [_rect(), _rect(from_name="box"), _rect(label="horse"), _rect(rotation=30)]),
        _task(1, [_rect(label="dog")], was_cancelled=True),  # cancelled: not labelled yet
        {"id": 2, "data": {"image": "images/im0002.png"}, "annotations": []},  # not labelled yet
        _task(3, []),  # labelled: no objects
    ]
    out = tmp_path / "out"
    manifest = _convert(_export(tmp_path / "ls", tasks), out)
    assert manifest["splits"]["train"]["count"] == 2 and manifest["boxes"]["negatives"] == 1
    assert manifest["ignored"] == {"cancelled_annotations": 1, "unlabelled_tasks": 2}
    assert manifest["source"]["labels"]["rejected_reasons"] == {
        "unknown from_name": 1,
        "label not in the config": 1,
        "rotated rectangle": 1,
    }
    rows = _rejected(out)
    assert all(r["file"] == "export.json" and r["task"] == 0 for r in rows)
    listing = sources.prediction_listing(str(tmp_path / "ls" / "export.json"))
    assert [it.path for it in listing.items] == [f"images/im{n:04d}.png" for n in (0, 3, 1, 2)]
    assert [it.label is None for it in listing.items] == [False, False, True, True]


def test_label_studio_without_a_config_takes_the_labels_it_finds_and_choices_classify(tmp_path):
    tasks = [_task(0, [_rect("zebra"), _rect("ant")]), _task(1, [_rect("ant", image=1)])]
    manifest = _convert(_export(tmp_path / "ls", tasks, config=False), tmp_path / "out")
    assert manifest["classes"] == ["ant", "zebra"] and manifest["boxes"]["kept"] == 3

    def choice(n, name):
        return _task(n, [{"type": "choices", "from_name": "c", "to_name": "image", "value": {"choices": [name]}}])

    tasks = [choice(0, "indoor"), choice(1, "outdoor"), choice(2, "indoor")]
    manifest = _convert(_export(tmp_path / "cls", tasks, config=False), tmp_path / "out2")
    assert manifest["task"] == "classification"
    assert manifest["splits"]["train"]["class_counts"] == {"indoor": 2, "outdoor": 1}


def test_label_studio_local_storage_and_upload_urls_and_missing_images(tmp_path):
    export = label_sets.label_studio(tmp_path / "ls", SMALL, local_files=True)
    tasks = json.loads(export.read_text())
    (tmp_path / "ls" / "upload" / "7").mkdir(parents=True)
    (tmp_path / "ls" / "images" / "im0001.png").rename(tmp_path / "ls" / "upload" / "7" / "im0001.png")
    tasks[1]["data"]["image"] = "/data/upload/7/im0001.png"
    export.write_text(json.dumps(tasks))
    manifest = _convert(export, tmp_path / "out")
    assert manifest["splits"]["train"]["count"] == len(SMALL.images)
    tasks[2]["data"]["image"] = "/data/local-files/?d=images/gone.png"
    export.write_text(json.dumps(tasks))
    with pytest.raises(ConvertError, match=r"1 images it names do not exist \(e.g. \['images/gone.png'\]\)"):
        _convert(export, tmp_path / "out2")


# ------------------------------------------------------------------------------------------------
# Which kind claims what; dataset.json
# ------------------------------------------------------------------------------------------------


def test_the_label_kinds_claim_their_layouts_before_folder_and_coco(tmp_path):
    voc = label_sets.voc(tmp_path / "voc", SMALL)
    assert sources.detect(str(voc)) == "voc"  # not a folder with classes Annotations, ImageSets, JPEGImages
    yolo = label_sets.yolo(tmp_path / "yolo", SMALL)
    assert sources.detect(str(yolo.parent)) == sources.detect(str(yolo)) == "yolo"
    export = label_sets.label_studio(tmp_path / "ls", SMALL)
    coco = label_sets.coco(tmp_path / "coco", SMALL)
    assert (sources.detect(str(export)), sources.detect(str(coco))) == ("label-studio", "coco")
    (tmp_path / "photos" / "a").mkdir(parents=True)
    (tmp_path / "photos" / "a" / "x.png").write_bytes(label_sets.png(4, 4, 0))
    assert sources.detect(str(tmp_path / "photos")) == "folder"


def test_dataset_json_without_label_fields_still_loads(tmp_path):
    manifest = _convert(label_sets.coco(tmp_path / "coco", SMALL), tmp_path / "out")
    assert "labels" not in manifest["source"]  # written only for a labelling tool's export
    info = DatasetInfo.from_json(manifest)
    assert info.source.labels is None and DatasetInfo.from_json(info.to_json()) == info
