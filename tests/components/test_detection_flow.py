"""Detection through every step on a real (small) RetinaNet: export, evaluation and gate, serving
and its checks, REST against in-process mAP, the benchmark, weights from a path.

A killed training's resumption is tested once for the process (tests/unit/train/test_train_resume.py:
killed by SIGKILL at its first checkpoint, resumed by another) and once for the detector's state
(tests/unit/train/test_multiworker_train.py: a detector worker killed after the first checkpoint, the
set resuming from it to the same weights on both workers)."""

import base64
import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests.detection_fixtures import tiny_detection
from trainer.tasks import get_task

pytestmark = pytest.mark.slow

TASK = get_task("detection")


@pytest.fixture(scope="module")
def det():
    return tiny_detection()


@pytest.fixture(scope="module")
def served(det):
    from components.serving.server import ModelServer

    with ModelServer(os.path.join(det["model"], "saved_model"), "detector") as server:
        yield server


def _post(url, images):
    from components.serving.checks import http_json

    body = {"instances": [{"b64": base64.b64encode(b).decode()} for b in images]}
    status, answer = http_json("POST", url, body, timeout_s=120)
    assert status == 200, answer
    return answer["predictions"]


def test_the_model_folder_says_detection_and_serves_the_detection_outputs(det):
    import tensorflow as tf

    summary = json.loads(Path(det["model"], "training.json").read_text())
    assert summary["task"] == "detection" and summary["model"] == "retinanet" and summary["steps"] == 48
    assert summary["image_shape"] == [64, 64, 3] and summary["class_names"] == ["square", "circle", "triangle"]
    loaded = tf.saved_model.load(os.path.join(det["model"], "saved_model"))
    outputs = loaded.signatures["serving_default"].structured_outputs
    assert set(outputs) == set(TASK.serving.outputs)
    assert "detection_boxes" in Path(det["model"], "model_card.md").read_text()


def test_boxes_are_normalised_to_the_original_image_whatever_its_size(det):
    # A property of the export, whatever the weights: a 64 x 40 picture and the same picture
    # padded with black to 64 x 64 by hand letterbox to the very same model input (the letterbox
    # pads bottom and right with black), so the model sees identical tensors, and the served boxes,
    # normalised to the image sent, must differ exactly by the ratio of the two heights (and the
    # same for widths with a 40 x 64 picture).
    import io

    import numpy as np
    from PIL import Image

    from trainer.tasks.detection.export import predict_in_process
    from trainer.tasks.detection.input import read_detection_split
    from trainer.tfrecords import load_dataset_info

    info = load_dataset_info(det["dataset"])
    _loaded, fn = TASK.serving_function(os.path.join(det["model"], "saved_model"), info)
    record = next(r for r in read_detection_split(info, "test", 50) if r["boxes"])
    pixels = np.asarray(Image.open(io.BytesIO(record["encoded"])).convert("RGB"))[:64, :64]

    def png(array):
        out = io.BytesIO()
        Image.fromarray(array).save(out, format="PNG")
        return out.getvalue()

    for axis in (0, 1):  # 0: a short picture (padded below), 1: a narrow one (padded right)
        part = pixels[:40] if axis == 0 else pixels[:, :40]
        padded = np.zeros_like(pixels)
        padded[: part.shape[0], : part.shape[1]] = part
        sent, square = predict_in_process(fn, [png(part), png(padded)], 2)
        TASK.check_prediction(sent)
        count = int(sent["num_detections"])
        assert count == int(square["num_detections"]) > 0
        boxes = np.asarray(sent["detection_boxes"])[:count]
        expected = np.asarray(square["detection_boxes"])[:count]
        expected[:, [axis, axis + 2]] *= 64 / 40  # normalised to 40 px instead of 64 along the axis
        np.testing.assert_allclose(boxes, np.clip(expected, 0.0, 1.0), atol=1e-4)
        np.testing.assert_allclose(sent["detection_scores"][:count], square["detection_scores"][:count], atol=1e-5)


def test_evaluation_gate_and_report_through_the_exported_model(det, tmp_path):
    from components.evaluate.run import run_evaluation
    from trainer.config import EvaluateConfig

    outcome = run_evaluation(det["model"], det["dataset"], EvaluateConfig(value_thresholds={"ap50": 0.0}))
    assert outcome.task == "detection" and outcome.confusion is None
    assert set(outcome.metrics) == {"ap", "ap50", "ap75", "ar100", "num_examples"}
    assert 0.0 <= outcome.metrics["ap"] <= outcome.metrics["ap50"] <= 1.0 and outcome.decision.blessed
    assert "| square |" in outcome.report and "AP@0.5" in outcome.report  # the task's metric labels
    # The HTML page: precision-recall curves and test images with true and predicted boxes.
    page = outcome.page
    assert (
        "Precision-recall at IoU 0.5" in page
        and page.count("data:image/png;base64,") == len(outcome.result.examples) > 0
    )
    assert "<script" not in page
    assert outcome.blessing["task"] == "detection"  # the record names its task: readers ask it
    strict = run_evaluation(det["model"], det["dataset"], EvaluateConfig(value_thresholds={"ap50": 1.01}))
    assert not strict.decision.blessed and any("FAIL: ap50" in r for r in strict.decision.reasons)
    with pytest.raises(ValueError, match="unknown metric 'accuracy'"):
        run_evaluation(det["model"], det["dataset"], EvaluateConfig(value_thresholds={"accuracy": 0.5}))


def test_served_map_from_rest_answers_equals_the_evaluation(det, served):
    from trainer.config import EvaluateConfig
    from trainer.tasks.detection.evaluation import coco_evaluate
    from trainer.tasks.detection.input import read_detection_split
    from trainer.tfrecords import load_dataset_info

    records = read_detection_split(load_dataset_info(det["dataset"]), "test")
    url = f"{served.url}/v1/models/detector:predict"
    rest = [
        p
        for start in range(0, len(records), 32)
        for p in _post(url, [r["encoded"] for r in records[start : start + 32]])
    ]
    over_rest = coco_evaluate(records, rest, ["square", "circle", "triangle"]).metrics
    in_process = TASK.evaluate(os.path.join(det["model"], "saved_model"), det["dataset"], EvaluateConfig()).metrics
    assert abs(over_rest["ap50"] - in_process["ap50"]) <= 0.005
    assert abs(over_rest["ap"] - in_process["ap"]) <= 0.005


def test_the_serving_checks_ask_the_detection_task(det, served):
    from components.serving.checks import KnownExample, run_checks

    examples = [KnownExample(image, expected) for image, expected in TASK.known_examples(det["dataset"], "test", 8)]
    report = run_checks(served.url, "detector", examples, 0.0, task=TASK, expected_version=1, load=None)
    passed = {c.name: c.passed for c in report.checks}
    assert passed["metadata"] and passed["predict_schema"] and passed["bad_requests"] and passed["prediction"]


def test_the_benchmark_times_the_detector_in_process_and_served(det):
    from components.benchmark.config import BenchmarkConfig
    from components.benchmark.run import run_benchmark

    row = run_benchmark(det["model"], det["dataset"], BenchmarkConfig(num_images=64, batch_size=16, rounds=1))
    assert row.timing.num_images == 64 and row.timing.images_per_sec > 0 and row.http.images_per_sec > 0


def test_a_detector_starts_from_saved_weights(det, tmp_path):
    import keras

    from trainer.config import TrainConfig
    from trainer.tasks.detection.model import build_detector
    from trainer.tasks.detection.options import DetectorOptions

    trained = keras.saving.load_model(os.path.join(det["model"], "model.keras"))
    path = str(tmp_path / "detector.weights.h5")
    trained.save_weights(path)
    # The options the fit resolved for that model (config.yaml holds them), not the "auto" defaults.
    fitted = TrainConfig.from_yaml(os.path.join(det["model"], "config.yaml")).model_options
    options = DetectorOptions.from_dict(dict(fitted))
    fresh = build_detector(options, 3)
    loaded = build_detector(dataclasses.replace(options, weights=path), 3)
    name = "classification_head"
    want = trained.get_layer(name).get_weights()[-1]
    assert np.allclose(loaded.get_layer(name).get_weights()[-1], want)
    assert not np.allclose(fresh.get_layer(name).get_weights()[-1], want)


@pytest.fixture(scope="module")
def report_part(det):
    """The evaluation and its part of the run report, made with the model's signature taken away."""
    from components.evaluate.run import run_evaluation, run_report_part
    from trainer.config import EvaluateConfig

    outcome = run_evaluation(det["model"], det["dataset"], EvaluateConfig(value_thresholds={"ap50": 0.0}))

    def no_second_run(*args, **kwargs):
        raise AssertionError("the sample must reuse the evaluation's predictions")

    outcome.evaluated.task.serving_function = no_second_run  # the model is not run again
    return outcome, run_report_part(outcome)


def test_the_run_report_part_is_the_detector_s_own(det, report_part):
    import io

    from PIL import Image

    from trainer.tasks.detection.input import read_detection_split
    from trainer.tfrecords import load_dataset_info

    outcome, part = report_part
    assert part["task"] == "detection" and part["scanned"] == 42 and set(part["sections"]) == {
        "dataset", "training", "evaluation",
    }  # fmt: skip
    tiles = part["images"]
    assert len(tiles) == len(outcome.result.examples) > 0
    f1 = [t["f1"] for t in tiles]
    assert f1 == sorted(f1) and all(t["caption"][0].startswith(f"F1 {t['f1']:.2f}") for t in tiles)
    assert all(t["ok"] == (t["missed"] == 0 and t["false"] == 0) for t in tiles)
    drawn = Image.open(io.BytesIO(base64.b64decode(tiles[0]["data"])))
    assert tiles[0]["mime"] == "image/png" and drawn.size == (256, 256)  # 64 px images drawn 4x
    # boxes per class and split: the records' own non-crowd boxes, counted here another way
    info = load_dataset_info(det["dataset"])
    boxes, images = [], []
    for split in info.splits:
        records = read_detection_split(info, split)
        labels = [[k for k, crowd in zip(r["labels"], r["crowd"], strict=True) if not crowd] for r in records]
        boxes.append(sum(len(ls) for ls in labels))
        images.append(sum(1 for ls in labels if ls))
    dataset = part["sections"]["dataset"]
    assert "<tr><td class=l>all</td>" + "".join(f"<td>{n}</td>" for n in [*boxes, *images]) + "</tr>" in dataset
    assert "Boxes per class and split" in dataset and "Box sizes" in dataset and "boxes kept" in dataset
    training = part["sections"]["training"]
    assert "validation box loss" in training and "<b>64 px</b><span>input size, fitted</span>" in training
    assert "accuracy" not in training
    assert "AP per class, weakest first" in part["sections"]["evaluation"]


def test_the_detection_run_report_opens_in_a_browser(det, report_part, tmp_path):
    from components.report.run import ReportInputs, write_report
    from tests.browser import Browser, chromium_path

    outcome, part = report_part
    inputs = ReportInputs(
        title="detection: run report", run="detection-test", dataset_dir=det["dataset"], model_dir=det["model"],
        evaluation=dict(outcome.metrics), blessing=outcome.blessing, samples=part,
    )  # fmt: skip
    page_path = tmp_path / "report.html"
    write_report(inputs, str(page_path))
    if chromium_path() is None:
        pytest.fail("chromium is missing: run 'make browser' (Debian package chromium)")
    with Browser(width=1200, height=900) as browser:
        browser.open(page_path)
        shot = os.environ.get("LTP_DETECTION_REPORT_SCREENSHOT") or str(tmp_path / "report.png")
        browser.screenshot(Path(shot), full_page=True, scale=0.6)
        sections = browser.evaluate(
            "Object.fromEntries([...document.querySelectorAll('section')].map(s => [s.id, s.innerText]))"
        )
        charts = browser.evaluate("[...document.querySelectorAll('svg.chart')].map(s => s.getAttribute('aria-label'))")
        tiles = browser.evaluate(
            "[...document.querySelectorAll('#samples img')].filter(i => i.naturalWidth > 0).length"
        )
    assert [m for m in browser.console if m["type"] in ("error", "exception", "assert")] == []
    assert [u for u in browser.requests if not u.startswith(("file:", "data:"))] == []
    assert tiles == len(part["images"]) > 0
    assert {"Boxes per class and split", "Box sizes (square root of the area, px)"} <= set(charts)
    assert "Images per class and split" not in charts
    assert "validation box loss" in sections["training"] and "accuracy" not in sections["training"]
    assert "No image sample" not in sections["evaluation"] and "worst first" in sections["evaluation"]
