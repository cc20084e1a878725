"""The run report page, built from records shaped as the steps write them (no pipeline run)."""

import base64
import io
import json
import re

import numpy as np
import pytest
from PIL import Image

from components.evaluate.renderers import Evaluated
from components.evaluate.renderers import classification as sample_lib
from components.report import records as report_records
from components.report import run as report_run
from components.report import sections
from components.report.records import RunRecords
from components.report.run import Failure, ReportInputs, StepRecord
from components.serving import stages
from components.serving.checks import CheckResult
from tests.datasets import dataset_info
from trainer.tasks import get_task
from trainer.tasks.classification.evaluation import classification_metrics
from trainer.tfrecords import ImageShape, SourceInfo, SplitInfo, write_dataset_info

CLASSES = ["cat", "dog", "bird"]


def _png(value: int) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((8, 8), value, dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def records(tmp_path):
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    splits = {
        "train": SplitInfo(90, {"cat": 31, "dog": 29, "bird": 30}, ()),
        "test": SplitInfo(30, {"cat": 11, "dog": 9, "bird": 10}, ()),
    }
    info = dataset_info(
        splits,
        CLASSES,
        ImageShape(8, 8, 1),
        source=SourceInfo("/data/pets", "folder", "pets"),
        rejected=2,
        rejected_reasons={"undecodable": 2},
    )
    write_dataset_info(str(dataset), info)
    (dataset / "rejected.jsonl").write_text(
        json.dumps({"path": "/data/pets/cat/broken.png", "reason": "undecodable: truncated"})
        + "\n"
        + json.dumps({"path": "/data/pets/dog/empty.jpg", "reason": "undecodable: empty file"})
        + "\n"
    )
    model = tmp_path / "model"
    model.mkdir()
    history = [
        {
            "epoch": e,
            "step": 10 * e,
            "loss": 1.5 / e,
            "accuracy": 0.4 + 0.1 * e,
            "val_loss": 1.6 / e,
            "val_accuracy": 0.35 + 0.1 * e,
        }
        for e in (1, 2, 3)
    ]
    (model / "training.json").write_text(
        json.dumps(
            {
                "model": "mnist_cnn",
                "task": "classification",
                "images_per_sec": 4321.0,
                "epochs": 3,
                "steps_per_epoch": 10,
                "val_accuracy": 0.65,
                "history": history,
            }
        )  # fmt: skip
    )
    matrix = [[9, 1, 1], [2, 6, 1], [0, 1, 9]]
    confusion = {
        "confusionMatrix": {
            "annotationSpecs": [{"displayName": c} for c in CLASSES],
            "rows": [{"row": r} for r in matrix],
        }
    }
    blessing = {
        "blessed": False,
        "reasons": ["not blessed: 1 check failed", "FAIL: accuracy = 0.8000, required >= 0.9"],
        "checks": [
            {"kind": "value", "metric": "accuracy", "threshold": 0.9, "value": 0.8, "baseline": None, "passed": False}
        ],
        "baseline": None,
    }
    probabilities = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.6, 0.3, 0.1]])
    sample = sample_lib.sample_record([_png(10), _png(120), _png(240)], [0, 1, 1], probabilities, CLASSES, "test")
    # The evaluation's run-report part, as the evaluate step makes it: the classification renderers'
    # sections from the evaluation (whose confusion matrix is the one above) and the records.
    pairs = np.array([(t, p) for t, row in enumerate(matrix) for p, n in enumerate(row) for _ in range(n)])
    result = classification_metrics(pairs[:, 0], np.eye(3)[pairs[:, 1]], CLASSES)
    evaluated = Evaluated(get_task("classification"), result, str(model), str(dataset), "test")
    sample = {"task": "classification", **sample, "sections": sample_lib.sections(evaluated)}
    bench = {"accelerator": "cpu-8", "label": "CPU, 8 cores", "cores": 8, "price_per_hour": 0.28,
             "price_source": "case study",
             "num_images": 256, "batch_size": 64, "time_s": 0.05, "images_per_sec": 5120.0, "latency_p50_ms": 12.5,
             "latency_p95_ms": 13.0, "latency_p99_ms": 14.0, "images_per_dollar": 6.6e7, "http_num_images": 256,
             "http_batch_size": 64, "http_time_s": 0.1, "http_images_per_sec": 2560.0, "http_latency_p50_ms": 25.0,
             "http_latency_p95_ms": 27.0, "http_latency_p99_ms": 30.0}  # fmt: skip
    root = str(tmp_path / "stages")
    checks = (CheckResult("health", True, "ok"), CheckResult("prediction", True, "8/8"))
    for version, run, accuracy in ((1, "run-a", 0.81), (2, "run-b", 0.8)):
        entry = stages.StageEntry(
            action="promote", version=version, model_uri=f"/m/{version}", run=run, model_name="classifier",
            checks=checks, metrics={"accuracy": accuracy},
        )  # fmt: skip
        stages.StageRegistry(root).record("demo", entry)
    # Two monitor windows of demo's sampled traffic, the second darker than the reference.
    for hour, figure in ((1, 0.02), (2, 1.7)):
        check = {"name": "psi_brightness", "figure": figure, "threshold": 0.25, "minimum": 200, "samples": 400,
                 "state": "alarm" if figure > 0.25 else "ok"}  # fmt: skip
        drift = {"window": {"start": "", "end": f"2026-01-01T0{hour}:00:00Z"}, "samples": 400, "checks": [check]}
        folder = tmp_path / "stages" / "demo" / "drift" / "classifier"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"2026010{hour}T000000Z.json").write_text(json.dumps(drift))
    return ReportInputs(
        title="pets: run report",
        run="run-b",
        dataset_dir=str(dataset),
        model_dir=str(model),
        evaluation={"accuracy": 0.8, "macro_f1": 0.79, "num_examples": 30.0},
        confusion=confusion,
        blessing=blessing,
        samples=sample,
        benchmark=bench,
        stages_root=root,
        steps=[
            StepRecord(
                "Convert", "convert-to-tfrecords", "succeeded", 3.2, "120 images converted, 2 rejected", "logs/c.log"
            )
        ],
    )


def _section(page: str, anchor: str) -> str:
    match = re.search(rf'<section id="{anchor}">(.*?)</section>', page, re.S)
    assert match, f"no section {anchor}"
    return match.group(1)


def _one(anchor, **records):
    """One section of the page, rendered from the records given (the rest missing)."""
    return sections.section(anchor, RunRecords(**records))


def test_every_section_shows_the_run_s_figures(records):
    page = report_run.render(records)
    assert "<script" not in page and "<link" not in page and "@import" not in page
    assert not re.search(r'(src|href)="https?:', page)  # nothing is fetched
    steps = _section(page, "steps")
    assert "Convert" in steps and "3.2" in steps and "120 images converted" in steps and 'href="logs/c.log"' in steps
    dataset = _section(page, "dataset")
    assert "<td class=l>cat</td><td>31</td><td>11</td>" in dataset  # the classification renderers' part
    assert "undecodable: truncated" in dataset and "/data/pets/dog/empty.jpg" in dataset
    assert 'aria-label="Images per class and split"' in dataset
    training = _section(page, "training")
    assert 'aria-label="loss per epoch"' in training and 'aria-label="accuracy per epoch"' in training
    assert "4,321" in training
    # the task's cards, from a training.json written before the metrics mapping (val_accuracy at the top)
    assert "<b>0.6500</b><span>validation accuracy</span>" in training and "training accuracy" in training
    evaluation = _section(page, "evaluation")
    assert 'aria-label="Confusion matrix"' in evaluation and "0.8000" in evaluation
    # dog has the lowest F1 (6 of 9 right, taken for cat twice)
    worst = evaluation[evaluation.index("Worst classes") :]
    assert worst.index("<td class=l>dog</td>") < worst.index("<td class=l>cat</td>")
    assert "cat (2)" in worst
    assert evaluation.count("<img ") == 3 and evaluation.count('class="tile wrong"') == 1
    assert "true: dog<br>pred: cat" in evaluation
    assert evaluation.index("Worst classes") < evaluation.index('id="samples"')
    gate = _section(page, "gate")
    assert "NOT BLESSED" in gate and "FAIL: accuracy = 0.8000, required &gt;= 0.9" in gate
    benchmark = _section(page, "benchmark")
    assert "5,120" in benchmark and "2,560" in benchmark and "REST" in benchmark
    assert 'aria-label="Throughput"' in benchmark
    stage_html = _section(page, "stages")
    assert "demo: serves classifier version 2 from run run-b" in stage_html
    assert stage_html.index("run-b") < stage_html.index("run-a")  # newest first
    assert "staging: serves nothing" in stage_html
    assert "<b>Traffic</b> (demo: 400 samples in the window ending 2026-01-01T02:00:00Z; DRIFT: psi_brightness)" in (
        stage_html
    )
    assert 'aria-label="demo: psi_brightness"' in stage_html and "2 windows" in stage_html


def test_the_page_is_small(records, tmp_path):
    size = report_run.write_report(records, str(tmp_path / "out" / "report.html"))
    assert size == (tmp_path / "out" / "report.html").stat().st_size
    assert size < 2 * 1024 * 1024


def test_a_failed_run_gets_a_page_saying_what_failed():
    failure = Failure(
        "Train", "TrainingError: loss is NaN at step 40", "step 39\nTrainingError: loss is NaN", "logs/t.log"
    )
    steps = [
        StepRecord("Convert", "convert-to-tfrecords", "succeeded", 3.0, "9 images"),
        StepRecord("Train", "train-model", "failed", 5.0, "", "logs/t.log"),
        StepRecord("Run report", "build-report", "not run"),
    ]
    page = report_run.render(ReportInputs(run="r1", steps=steps, failure=failure))
    assert "failed at step “Train”: TrainingError: loss is NaN at step 40" in page
    assert "<pre>step 39\nTrainingError: loss is NaN</pre>" in page
    assert 'class="l bad">failed' in page and 'class="l warn">not run' in page
    for anchor in ("dataset", "training", "evaluation", "gate", "benchmark"):
        assert "did not finish" in _section(page, anchor), anchor


def test_names_from_the_records_are_escaped(records):
    confusion = {"classes": ["<script>", "b"], "matrix": [[1, 0], [0, 1]]}
    samples = {"images": [{"mime": "image/png", "data": "", "caption": ["<script>alert(1)</script>"], "ok": False}]}
    failure = Failure("<b>Train</b>", "<img src=x>", "<script>", "logs/<t>.log")
    inputs = ReportInputs(title="<t>", run="<r>", evaluation={"accuracy": 0.5}, confusion=confusion,
                          samples=samples, failure=failure, steps=[])  # fmt: skip
    page = report_run.render(inputs)
    assert "<script" not in page and "<img src=x>" not in page and "<b>Train" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<title>&lt;t&gt;</title>" in page


def test_a_confusion_matrix_that_is_not_square_is_refused():
    with pytest.raises(report_run.ReportError, match="not 2x2"):
        report_run.confusion_matrix({"classes": ["a", "b"], "matrix": [[1, 2]]})


def test_the_sample_keeps_mistakes_first_and_the_images_whole():
    assert sample_lib.pick([0, 1, 2, 0], [0, 2, 2, 1], kept=3, mistakes=1) == [1, 0, 2]
    png = _png(7)
    record = sample_lib.sample_record([png], [2], np.array([[0.1, 0.2, 0.7]]), CLASSES, "test")
    (item,) = record["images"]
    assert base64.b64decode(item["data"]) == png and item["mime"] == "image/png"
    assert item["true"] == item["predicted"] == "bird" and item["score"] == 0.7


def _executor_output(folder, artifacts=None, parameters=None):
    folder.mkdir(parents=True)
    data = {
        "artifacts": {
            name: {"artifacts": [{"name": name, "uri": uri, "metadata": metadata}]}
            for name, (uri, metadata) in (artifacts or {}).items()
        },
        "parameterValues": parameters or {},
    }
    (folder / "executor_output.json").write_text(json.dumps(data))


def test_the_command_line_builds_the_page_from_a_kfp_local_run_folder(records, tmp_path, capsys):
    from components.report.__main__ import main

    run = tmp_path / "end-to-end-2026-12-01-10-00-00-000000"
    blessing = tmp_path / "blessing.json"
    blessing.write_text(json.dumps(records.blessing))
    sample = tmp_path / "samples.json"
    sample.write_text(json.dumps(records.samples))
    _executor_output(run / "convert-to-tfrecords", {"dataset": (records.dataset_dir, {})})
    _executor_output(run / "train-model", {"model": (records.model_dir, {})})
    _executor_output(
        run / "evaluate-model",
        {
            "metrics": ("", dict(records.evaluation)),
            "confusion": ("", dict(records.confusion)),
            "blessing": (str(blessing), {}),
            "samples": (str(sample), {}),
        },
        {"Output": False},
    )
    _executor_output(run / "benchmark-inference", {}, {"Output": dict(records.benchmark)})
    out = tmp_path / "page" / "report.html"
    assert main(["--run-dir", str(run), "--stages-root", records.stages_root, "--output", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    page = out.read_text()
    assert "Run <code>end-to-end-2026-12-01-10-00-00-000000</code>" in page
    for figure in ("<td class=l>cat</td><td>31</td>", "4,321", "NOT BLESSED", "5,120", "version 2", "true: dog"):
        assert figure in page, figure
    assert main(["--run-dir", str(tmp_path / "nothing"), "--output", str(out)]) == 2
    assert "not a kfp.local run folder" in capsys.readouterr().err


def test_the_training_section_says_what_was_fitted_to_the_data(tmp_path):
    lines = ["input 128 px: objects 17-66 px", "anchors P3-P4: coverage 74.0% -> 99.5%", "warning: a <class> alone"]
    (tmp_path / "training.json").write_text(json.dumps({"model": "retinanet", "fit": {"lines": lines}}))
    training = report_run.training_section(str(tmp_path))
    assert "Fitted to the training data" in training and "coverage 74.0% -&gt; 99.5%" in training
    assert "a &lt;class&gt; alone" in training  # escaped
    (tmp_path / "training.json").write_text(json.dumps({"model": "mnist_cnn"}))
    assert "Fitted" not in report_run.training_section(str(tmp_path))


def test_each_headline_is_the_headline_of_the_task_the_record_names(records, tmp_path):
    page = report_run.render(records)
    # the run: its evaluation's record names the task, whose headline is accuracy
    glance = sections.glance(report_records.read_records(records))
    assert '<div class="card"><b>0.8000</b><span>test accuracy</span></div>' in glance
    # a stage's models: each record's model folder says its task (metrics alone are not asked)
    root = str(tmp_path / "mixed")
    for name, task, metrics in (("classifier", "classification", {"accuracy": 0.9}),
                                ("detector", "detection", {"ap50": 0.5, "accuracy": 0.1})):  # fmt: skip
        model = tmp_path / name
        model.mkdir()
        (model / "training.json").write_text(json.dumps({"task": task}))
        stages.StageRegistry(root).record(
            "demo", stages.StageEntry("promote", 1, str(model), "r", model_name=name, metrics=metrics)
        )
    stages.StageRegistry(root).record(
        "demo", stages.StageEntry("promote", 1, "/gone", "r", model_name="old", metrics={"ap50": 0.7})
    )
    stage_html = _one("stages", stages=report_records.read_stages(root))
    assert "serves classifier version 1 from run r, test accuracy 0.9000" in stage_html
    assert "serves detector version 1 from run r, test AP@0.5 0.5000" in stage_html
    assert "serves old version 1 from run r</h3>" in stage_html  # no task on record: no headline guessed
    assert "test accuracy" in page


def test_without_the_task_s_part_the_dataset_section_shows_no_per_class_counts(records):
    dataset = _one("dataset", dataset=report_records.read_dataset(records.dataset_dir))
    assert "Images per class and split" not in dataset and "<td class=l>cat</td>" not in dataset
    assert "Classes: cat, dog, bird" in dataset and "undecodable: truncated" in dataset
    training = report_run.training_section(records.model_dir)
    assert "validation accuracy" not in training and "4,321" in training
