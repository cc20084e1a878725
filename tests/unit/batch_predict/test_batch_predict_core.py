"""Batch prediction's scoring core: records equal the served model's, failures listed, COCO results, metrics.

The tiny classifier (tests/eval_bench_fixtures.py) and the tiny detector (tests/detection_fixtures.py)
are each loaded once for the module; their ``serving_default`` on the same bytes is the reference.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.detection_fixtures import tiny_detection
from tests.eval_bench_fixtures import tiny_assets
from trainer import model_folder
from trainer.batch_predict import BatchPredictError, load_predictor, score_encoded, score_images
from trainer.tasks import Task, TaskError, get_task
from trainer.tasks.base import Prediction

THRESHOLD = 0.2  # the detector's, low enough for a few boxes per shapes image after 48 steps


@pytest.fixture(scope="module")
def classifier():
    task = get_task("classification")
    return task, load_predictor(model_folder.saved_model_dir(tiny_assets()["model"]), task)


@pytest.fixture(scope="module")
def detector():
    task = get_task("detection")
    return task, load_predictor(model_folder.saved_model_dir(tiny_detection()["model"]), task)


def _encode(image: Image.Image, fmt: str) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt)
    return buf.getvalue()


def _write(folder: Path, images: list[bytes]) -> list[str]:
    paths = []
    for i, data in enumerate(images):
        path = folder / f"{i:03d}.img"
        path.write_bytes(data)
        paths.append(str(path))
    return paths


def _served(predictor, images: list[bytes]) -> dict[str, np.ndarray]:
    import tensorflow as tf

    out = predictor.input.loaded.signatures["serving_default"](image_bytes=tf.constant(images, dtype=tf.string))
    return {k: v.numpy() for k, v in out.items()}


def _shapes_images(count: int) -> list[bytes]:
    """The shapes COCO folder's first images (64 x 64 PNG), then the same pictures at other sizes and formats."""
    folder = Path(tiny_detection()["coco"]).parent / "images"
    files = sorted(folder.glob("*.png"))
    images = [f.read_bytes() for f in files[:count]]
    sizes = [((96, 64), "JPEG"), ((50, 120), "PNG"), ((200, 130), "JPEG"), ((30, 20), "PNG")]
    for (size, fmt), f in zip(sizes, files[count:], strict=False):
        images.append(_encode(Image.open(f).convert("RGB").resize(size), fmt))
    return images


def test_classifier_records_equal_serving_default(classifier, tmp_path):
    from trainer.evaluate import read_encoded_split

    task, predictor = classifier
    images, _, _ = read_encoded_split(tiny_assets()["dataset"], "test", 11)
    gray = Image.open(io.BytesIO(images[0]))
    images += [_encode(gray.convert("RGB").resize((40, 33)), "JPEG"), _encode(gray.resize((50, 50)), "PNG")]
    result = score_images(predictor, task, _write(tmp_path, images), batch_size=5, score_threshold=0.0, top_k=3)

    assert result.failures == [] and [i for i, _ in result.records] == list(range(len(images)))
    probabilities = _served(predictor, images)["probabilities"]
    for (_, record), served in zip(result.records, probabilities, strict=True):
        picked = [c["index"] for c in record["classes"]]
        assert [c["class"] for c in record["classes"]] == [f"class_{i}" for i in picked]
        np.testing.assert_allclose([c["score"] for c in record["classes"]], served[picked], atol=1e-5)
        # the top 3 of the served scores, up to ties within the tolerance
        assert min(served[picked]) >= np.delete(served, picked).max() - 1e-5
        assert task.prediction().predicted_classes(record) == [record["classes"][0]["class"]]


def _served_boxes(served: dict[str, np.ndarray], i: int, names: tuple[str, ...], size: tuple[int, int]) -> list:
    """Image ``i``'s served detections at or over the threshold as ``(class, [xmin, ymin, xmax, ymax] px, score)``."""
    height, width = size
    found = []
    for j in range(int(served["num_detections"][i])):
        ymin, xmin, ymax, xmax = served["detection_boxes"][i, j].astype(np.float64)
        score = float(served["detection_scores"][i, j])
        if score >= THRESHOLD:
            box = [xmin * width, ymin * height, xmax * width, ymax * height]
            found.append((names[int(served["detection_classes"][i, j]) - 1], box, score))
    return found


def _assert_same_detections(ours: list, theirs: list, side: float) -> int:
    """Every detection matched (same class, coordinates within 1e-4 of the side, same score) but
    those within 1e-4 of the threshold, which may be on one side only; returns the matches."""
    left = list(theirs)
    matched = 0
    for name, box, score in ours:
        same = [
            t
            for t in left
            if t[0] == name and max(abs(a - b) for a, b in zip(box, t[1], strict=True)) <= 1e-4 * side
            and abs(t[2] - score) <= 1e-4
        ]  # fmt: skip
        if same:
            left.remove(same[0])
            matched += 1
        else:
            assert abs(score - THRESHOLD) <= 1e-4, f"{name} {box} {score} not served: {theirs}"
    assert all(abs(t[2] - THRESHOLD) <= 1e-4 for t in left), f"served but not predicted: {left}"
    return matched


def test_detector_boxes_equal_serving_default_on_images_of_any_size(detector, tmp_path):
    task, predictor = detector
    images = _shapes_images(7)
    result = score_images(predictor, task, _write(tmp_path, images), batch_size=4, score_threshold=THRESHOLD, top_k=100)

    assert result.failures == [] and len(result.records) == len(images) == 11
    served = _served(predictor, images)
    for (i, record), data in zip(result.records, images, strict=True):
        width, height = Image.open(io.BytesIO(data)).size
        assert (record["width"], record["height"]) == (width, height)
        ours = [(d["class"], d["box"], d["score"]) for d in record["detections"]]
        found = record["detections"]
        assert [d["score"] for d in found] == sorted((d["score"] for d in found), reverse=True)
        assert all(
            0 <= d["box"][0] <= d["box"][2] <= width and 0 <= d["box"][1] <= d["box"][3] <= height for d in found
        )
        assert all(d["class_id"] == predictor.input.class_names.index(d["class"]) + 1 for d in found)
        theirs = _served_boxes(served, i, predictor.input.class_names, (height, width))
        assert _assert_same_detections(ours, theirs, max(width, height)) > 0  # boxes compared on every image
        assert task.prediction().predicted_classes(record) == [d["class"] for d in record["detections"]]

    top = score_encoded(predictor, task, images[:2], score_threshold=0.0, top_k=2)
    assert [len(r["detections"]) for _, r in top.records] == [2, 2]


def test_unreadable_and_undecodable_images_are_listed_and_the_rest_scored(detector, tmp_path):
    task, predictor = detector
    good = _shapes_images(5)[:5]
    jpeg = _encode(Image.open(io.BytesIO(good[0])).convert("RGB"), "JPEG")
    bad = {1: b"not an image", 4: jpeg[: len(jpeg) // 2], 6: b""}
    images = list(good)
    for index in sorted(bad):
        images.insert(index, bad[index])
    paths = _write(tmp_path, images)
    paths.insert(3, str(tmp_path / "missing.png"))  # indices of bad from 3 on move by one
    progress = []
    result = score_images(
        predictor,
        task,
        paths,
        batch_size=3,
        score_threshold=THRESHOLD,
        top_k=100,
        on_batch=lambda *a: progress.append(a),
    )

    reasons = dict(result.failures)
    assert sorted(reasons) == [1, 3, 5, 7]
    assert reasons[3].startswith("cannot read: FileNotFoundError") and "missing.png" in reasons[3]
    assert reasons[1].startswith("cannot decode: Unknown image file format")
    assert reasons[5].startswith("cannot decode: ") and reasons[7] == "cannot decode: Input is empty."
    assert [i for i, _ in result.records] == [0, 2, 4, 6, 8]
    alone = score_encoded(predictor, task, good, batch_size=5, score_threshold=THRESHOLD, top_k=100)
    for (_, ours), (_, clean) in zip(result.records, alone.records, strict=True):
        assert [d["class"] for d in ours["detections"]] == [d["class"] for d in clean["detections"]]
        scores = [[d["score"] for d in r["detections"]] for r in (ours, clean)]
        np.testing.assert_allclose(*scores, atol=1e-5)
    assert progress[-1] == (9, 9) and result.images_per_sec > 0

    store = {"gs://bucket/a.png": good[0]}  # what storage.read_bytes gives for gs:// URIs, faked
    uris = ["gs://bucket/a.png", "gs://bucket/gone.png"]
    fake = score_images(
        predictor, task, uris, score_threshold=0.5, top_k=1, read_bytes=store.__getitem__, read_threads=2
    )
    assert [i for i, _ in fake.records] == [0] and fake.failures == [
        (1, "cannot read: KeyError: 'gs://bucket/gone.png'")
    ]

    given = score_encoded(predictor, task, [good[0], "not bytes", bad[1]], score_threshold=0.5, top_k=1)
    assert [i for i, _ in given.records] == [0] and [i for i, _ in given.failures] == [1, 2]
    assert given.failures[0][1].startswith("cannot read: expected encoded image bytes, got str")


def test_coco_results_load_in_pycocotools_and_a_classifier_writes_none(detector, classifier):
    from pycocotools.coco import COCO

    task, predictor = detector
    coco_file = Path(tiny_detection()["coco"])
    info = json.loads(coco_file.read_text())
    chosen = info["images"][:6]
    images = [(coco_file.parent / image["file_name"]).read_bytes() for image in chosen]
    result = score_encoded(predictor, task, images, score_threshold=THRESHOLD, top_k=100)
    category_ids = {c["name"]: c["id"] for c in info["categories"]}
    results = [
        entry
        for i, record in result.records
        for entry in task.prediction().coco_results(record, chosen[i]["id"], category_ids=category_ids)
    ]
    assert results and set(results[0]) == {"image_id", "category_id", "bbox", "score"}
    detections = COCO(str(coco_file)).loadRes(results)
    assert len(detections.getAnnIds()) == len(results)
    first = result.records[0][1]["detections"][0]
    x, y, w, h = task.prediction().coco_results(result.records[0][1], 7)[0]["bbox"]
    assert [x, y, x + w, y + h] == pytest.approx(first["box"])

    refused = "classification' writes no COCO results: only a detection task has boxes; leave coco off"
    with pytest.raises(TaskError, match=refused):
        classifier[0].prediction().coco_results({"classes": []}, 1)
    with pytest.raises(TaskError, match="writes no COCO results"):
        classifier[0].prediction().check(coco=True)
    task.prediction().check(coco=True)


def test_prediction_metrics_on_known_cases():
    classification = get_task("classification")
    records = [
        {"classes": [{"class": "a", "index": 0, "score": 0.9}, {"class": "b", "index": 1, "score": 0.1}]},
        {"classes": [{"class": "b", "index": 1, "score": 0.6}, {"class": "a", "index": 0, "score": 0.4}]},
        {"classes": []},
    ]
    assert classification.prediction().metrics(records, ["a", "a", "b"], ["a", "b"]) == {
        "accuracy": pytest.approx(1 / 3),
        "top_k_accuracy": pytest.approx(2 / 3),
        "num_examples": 3.0,
        "recall/a": 0.5,
        "recall/b": 0.0,
    }
    with pytest.raises(TaskError, match=r"labels \['c'\] are not classes of the model"):
        classification.prediction().metrics(records[:1], ["c"], ["a", "b"])

    detection = get_task("detection")
    names = ["square", "circle", "triangle"]
    found = {"box": [10.0, 20.0, 50.0, 40.0], "class": "square", "class_id": 1, "score": 0.9}
    wrong = {"box": [5.0, 5.0, 30.0, 30.0], "class": "triangle", "class_id": 3, "score": 0.8}
    records = [
        {"detections": [found], "width": 80, "height": 60},
        {"detections": [wrong], "width": 40, "height": 40},
    ]
    truths = [[{"box": [10, 20, 50, 40], "class": "square"}], [{"box": [5, 5, 30, 30], "class": "circle"}]]
    metrics = detection.prediction().metrics(records, truths, names)
    # square found exactly (AP 1), circle missed (AP 0), triangle has no true box (left out)
    assert metrics["ap50"] == pytest.approx(0.5) and metrics["ap"] == pytest.approx(0.5)
    assert metrics["num_examples"] == 2.0
    with pytest.raises(TaskError, match="1 labels for 2 scored images"):
        detection.prediction().metrics(records, truths[:1], names)


def _bare_task() -> Task:
    """A task from outside the tree that does everything but batch prediction."""
    from trainer.configbase import ConfigBase
    from trainer.tasks import RunDefaults

    stubs = {name: (lambda *args, **kwargs: None) for name in Task.__abstractmethods__}
    run_defaults = RunDefaults(data="x", limit=0, epochs=1, served_model_name="bare", model="m")
    bare = type("Bare", (Task,), {**stubs, "name": "bare", "options_type": ConfigBase, "run_defaults": run_defaults})
    return bare()


def test_a_task_without_batch_prediction_is_refused_by_name_and_bad_settings_and_folders_too(classifier, tmp_path):
    bare = _bare_task()
    missing = r"task 'bare' does no batch prediction: its prediction\(\) gives no Prediction; give the task a"
    assert bare.prediction() is None
    with pytest.raises(TaskError, match=missing):
        score_images(str(tmp_path), bare, [], score_threshold=0.5, top_k=1)
    with pytest.raises(TaskError, match=missing):
        load_predictor(str(tmp_path), bare)

    # A facet must load an export and make records; the rest has defaults a task may leave.
    class Partial(Prediction):
        def load(self, saved_model_dir):
            return None

    with pytest.raises(TypeError, match="abstract method.*records"):
        Partial(bare)
    facet = type("Minimal", (Partial,), {"records": lambda self, *args, **kwargs: []})(bare)
    assert (facet.predicted_classes({}), facet.truth({}), facet.metrics([{}], ["a"], ["a"])) == ([], None, {})
    with pytest.raises(TaskError, match="task 'bare' writes no COCO results: only a detection task has boxes"):
        facet.check(coco=True)

    task, predictor = classifier
    with pytest.raises(BatchPredictError, match="score_threshold must be in"):
        score_images(predictor, task, [], score_threshold=1.5, top_k=1)
    with pytest.raises(TaskError, match="no SavedModel at"):
        load_predictor(str(tmp_path), task)
    with pytest.raises(TaskError, match="labels.txt not found"):
        load_predictor(model_folder.saved_model_dir(tiny_detection()["model"]), task)
    with pytest.raises(TaskError, match="a detector's takes square images and returns"):
        load_predictor(model_folder.saved_model_dir(tiny_assets()["model"]), get_task("detection"))
    empty = score_images(predictor, task, [], score_threshold=0.5, top_k=1)
    assert empty.records == [] and empty.failures == []
