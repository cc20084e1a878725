"""The strict COCO reader: each real-world defect is an error naming the fix, or a counted, listed rejection."""

import io
import json

import numpy as np
import pytest
from PIL import Image

from components.convert import ConvertError, convert
from components.convert.config import ConvertConfig
from components.convert.run import summarize
from trainer.tfrecord_wire import iter_records
from trainer.tfrecords import REJECTED_NAME, DatasetInfo

W, H = 10, 8  # every test image: 10 wide, 8 high


def _png(seed=0, size=(W, H)):
    arr = np.random.default_rng(seed).integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return buf.getvalue()


def _coco(folder, images, annotations, categories=None, sizes=None):
    """Writes the images (true size ``sizes[name]`` or W x H) and instances.json; returns its path."""
    for n, img in enumerate(images):
        (folder / img["file_name"]).write_bytes(_png(n, (sizes or {}).get(img["file_name"], (W, H))))
    categories = categories or [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}]
    path = folder / "instances.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}))
    return path


def _img(i, width=W, height=H):
    return {"id": i, "file_name": f"im{i}.png", "width": width, "height": height}


def _ann(i, image_id, bbox, category=1, crowd=0):
    return {"id": i, "image_id": image_id, "category_id": category, "bbox": bbox, "iscrowd": crowd}


def _convert(path, out, **kw):
    return convert(
        ConvertConfig(source=str(path), splits={"train": 1.0}, workers=1, **kw), str(out), log=lambda _: None
    )


def _records(out, manifest):
    tf = pytest.importorskip("tensorflow")
    from trainer.tfrecords import decode_example

    files = [sh["file"] for s in manifest["splits"].values() for sh in s["shards"]]
    examples = [decode_example(tf.constant(r)) for f in files for r in iter_records((out / f).read_bytes())]
    return {ex["image/source_key"].numpy().decode(): ex for ex in examples}


def _boxes(ex):
    keys = ("ymin", "xmin", "ymax", "xmax")
    cols = [ex[f"image/object/bbox/{k}"].numpy().tolist() for k in keys]
    return np.array(cols, dtype=np.float64).T.reshape(-1, 4)  # [n, 4]: pytest.approx compares arrays


def _rejected(out):
    return [json.loads(line) for line in (out / REJECTED_NAME).read_text().splitlines()]


def test_boxes_partly_outside_are_clipped_and_counted(tmp_path):
    path = _coco(tmp_path, [_img(1)], [_ann(1, 1, [6, 4, 8, 6]), _ann(2, 1, [-2, 1, 4, 2]), _ann(3, 1, [1, 1, 2, 2])])
    out = tmp_path / "out"
    manifest = _convert(path, out)
    assert manifest["task"] == "detection"
    assert manifest["boxes"]["clipped"] == 2 and manifest["boxes"]["kept"] == 3
    ex = _records(out, manifest)["im1.png"]
    assert _boxes(ex) == pytest.approx(
        np.array([[0.5, 0.6, 1.0, 1.0], [1 / 8, 0.0, 3 / 8, 0.2], [1 / 8, 0.1, 3 / 8, 0.3]])
    )
    _, metrics = summarize(DatasetInfo.from_json(manifest), str(out), verify=False, seconds=0.0)
    assert metrics["boxes_clipped"] == 2.0 and metrics["boxes_dropped"] == 0.0
    assert _rejected(out) == []  # clipped boxes are kept, not rejected


def test_empty_inverted_malformed_and_outside_boxes_are_dropped_each_with_its_reason(tmp_path):
    anns = [
        _ann(1, 1, [1, 1, 0, 3]),  # zero width
        _ann(2, 1, [5, 2, -3, 2]),  # inverted: negative width
        _ann(3, 1, [1, 2, 3]),  # three numbers
        _ann(4, 1, [12, 9, 2, 2]),  # wholly outside the 10 x 8 image
        _ann(5, 1, [2, 2, 4, 4], category=2),  # good
    ]
    path = _coco(tmp_path, [_img(1)], anns)
    out = tmp_path / "out"
    manifest = _convert(path, out)
    assert manifest["boxes"]["dropped"] == 4 and manifest["boxes"]["kept"] == 1
    assert manifest["boxes"]["dropped_reasons"] == {
        "zero-area box": 1,
        "negative-size box": 1,
        "malformed box": 1,
        "box outside the image": 1,
    }
    assert manifest["rejected"] == 0  # the image itself is kept, with its good box
    rows = {r["annotation_id"]: r for r in _rejected(out)}
    assert sorted(rows) == [1, 2, 3, 4]
    assert rows[2]["reason"].startswith("negative-size box") and rows[2]["bbox"] == [5, 2, -3, 2]
    assert rows[3]["key"] == "im1.png" and rows[3]["reason"].startswith("malformed box")
    ex = _records(out, manifest)["im1.png"]
    assert _boxes(ex) == pytest.approx(np.array([[0.25, 0.2, 0.75, 0.6]]))
    assert ex["image/object/class/text"].numpy().tolist() == [b"dog"]
    _, metrics = summarize(DatasetInfo.from_json(manifest), str(out), verify=False, seconds=0.0)
    assert metrics["boxes_dropped"] == 4.0
    assert metrics["boxes_dropped_zero_area_box"] == 1.0 and metrics["boxes_dropped_negative_size_box"] == 1.0


def test_annotations_of_missing_images_are_counted_and_listed(tmp_path):
    path = _coco(tmp_path, [_img(1)], [_ann(1, 1, [1, 1, 2, 2]), _ann(2, 99, [1, 1, 2, 2])])
    out = tmp_path / "out"
    manifest = _convert(path, out)
    assert manifest["boxes"]["orphan_annotations"] == 1
    (row,) = _rejected(out)
    assert row["annotation_id"] == 2 and "image_id 99" in row["reason"] and row["path"] == str(path)
    _, metrics = summarize(DatasetInfo.from_json(manifest), str(out), verify=False, seconds=0.0)
    assert metrics["annotations_orphaned"] == 1.0


def test_annotations_that_match_no_image_at_all_are_an_error(tmp_path):
    path = _coco(tmp_path, [_img(1), _img(2)], [_ann(1, 101, [1, 1, 2, 2]), _ann(2, 102, [1, 1, 2, 2])])
    with pytest.raises(ConvertError, match=r"none of the 2 annotations .* fix the image_id"):
        _convert(path, tmp_path / "out")


def test_an_image_id_listed_twice_is_an_error_naming_both_files(tmp_path):
    twice = {"id": 1, "file_name": "im2.png", "width": W, "height": H}
    path = _coco(tmp_path, [_img(1), twice], [])
    with pytest.raises(ConvertError, match=r"image id 1 is listed twice \('im1.png' and 'im2.png'\).*own id"):
        _convert(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # systemic: nothing written


def test_a_declared_size_that_differs_from_the_file_rejects_the_image(tmp_path):
    images = [_img(1, width=20, height=16), _img(2), _img(3, width=H, height=W)]
    anns = [_ann(1, 1, [2, 2, 4, 4]), _ann(2, 2, [2, 2, 4, 4]), _ann(3, 3, [1, 1, 2, 2])]
    path = _coco(tmp_path, images, anns)
    out = tmp_path / "out"
    manifest = _convert(path, out)
    assert manifest["splits"]["train"]["count"] == 1 and manifest["rejected"] == 2
    assert manifest["rejected_reasons"] == {"size mismatch": 2}
    rows = {r["key"]: r["reason"] for r in _rejected(out)}
    assert "declares 20x16 (width x height), the image file is 10x8" in rows["im1.png"]
    assert "EXIF" in rows["im3.png"]  # width and height swapped: the likely cause is named
    assert list(_records(out, manifest)) == ["im2.png"]
    _, metrics = summarize(DatasetInfo.from_json(manifest), str(out), verify=False, seconds=0.0)
    assert metrics["rejected_size_mismatch"] == 2.0


def test_boxes_are_normalised_by_the_files_size_when_none_is_declared(tmp_path):
    path = _coco(tmp_path, [{"id": 1, "file_name": "im1.png"}], [_ann(1, 1, [2, 2, 4, 4])], sizes={"im1.png": (20, 10)})
    out = tmp_path / "out"
    manifest = _convert(path, out)
    assert _boxes(_records(out, manifest)["im1.png"]) == pytest.approx(np.array([[0.2, 0.1, 0.6, 0.3]]))


def test_an_undeclared_category_is_an_error_that_says_how_to_fix_it(tmp_path):
    path = _coco(tmp_path, [_img(1)], [_ann(7, 1, [1, 1, 2, 2], category=5)])
    with pytest.raises(ConvertError, match=r"annotation 7 has category_id 5, not among .*\[1, 2\]; declare it"):
        _convert(path, tmp_path / "out")


@pytest.mark.parametrize(
    "images, annotations, message",
    [
        ([{"file_name": "im0.png"}], [], r"image #0 .* has no 'id'"),
        ([_img(1)], [{"id": 1, "image_id": 1, "bbox": [1, 1, 2, 2]}], r"annotation #0 .* has no 'category_id'"),
    ],
)
def test_missing_required_fields_are_errors(tmp_path, images, annotations, message):
    path = _coco(tmp_path, images, annotations)
    with pytest.raises(ConvertError, match=message):
        _convert(path, tmp_path / "out")


def test_crowd_boxes_are_kept_and_flagged_and_images_without_boxes_are_negatives(tmp_path):
    anns = [_ann(1, 1, [1, 1, 4, 4], crowd=1), _ann(2, 1, [5, 2, 3, 3], category=2)]
    path = _coco(tmp_path, [_img(1), _img(2)], anns)
    out = tmp_path / "out"
    manifest = _convert(path, out)
    assert manifest["splits"]["train"]["count"] == 2
    assert manifest["boxes"]["crowd"] == 1 and manifest["boxes"]["negatives"] == 1
    records = _records(out, manifest)
    assert records["im1.png"]["image/object/is_crowd"].numpy().tolist() == [1, 0]
    assert records["im1.png"]["image/object/class/label"].numpy().tolist() == [0, 1]
    assert _boxes(records["im2.png"]).shape == (0, 4)  # a negative: kept, without boxes
    _, metrics = summarize(DatasetInfo.from_json(manifest), str(out), verify=False, seconds=0.0)
    assert metrics["negatives"] == 1.0 and metrics["boxes_crowd"] == 1.0


def test_resizing_a_detection_source_is_refused(tmp_path):
    path = _coco(tmp_path, [_img(1)], [_ann(1, 1, [1, 1, 2, 2])])
    with pytest.raises(ConvertError, match=r"resize .* letterboxes"):
        _convert(path, tmp_path / "out", resize=(4, 4))


def test_the_task_is_recorded_and_a_rerun_is_a_no_op(tmp_path):
    path = _coco(tmp_path, [_img(1)], [_ann(1, 1, [1, 1, 2, 2])])
    out = tmp_path / "out"
    first = _convert(path, out)
    stamp = (out / "dataset.json").stat().st_mtime_ns
    again = _convert(path, out)
    assert again["plan_key"] == first["plan_key"] and (out / "dataset.json").stat().st_mtime_ns == stamp
    assert json.loads((out / "dataset.json").read_text())["task"] == "detection"


def test_classification_datasets_say_so_and_older_manifests_without_the_task_stay_up_to_date(tmp_path):
    for i in range(3):
        (tmp_path / "c" / f"k{i % 2}").mkdir(parents=True, exist_ok=True)
        (tmp_path / "c" / f"k{i % 2}" / f"{i}.png").write_bytes(_png(i))
    out = tmp_path / "out"
    manifest = _convert(tmp_path / "c", out)
    assert manifest["task"] == "classification"
    older = {k: v for k, v in manifest.items() if k != "task"}  # as written before the task was recorded
    (out / "dataset.json").write_text(json.dumps(older))
    stamp = (out / "dataset.json").stat().st_mtime_ns
    again = _convert(tmp_path / "c", out)
    assert again["task"] == "classification"
    assert (out / "dataset.json").stat().st_mtime_ns == stamp and "task" not in json.loads(
        (out / "dataset.json").read_text()
    )
