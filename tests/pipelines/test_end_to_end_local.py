"""The main pipeline, whole, under kfp.local: the very YAML-compiled steps, each in a subprocess.

One run on a tiny real Fashion-MNIST subset (the demo data of ``make run``), through prod, behind
the quiet console of ``make run`` (``run_local.run_pipeline``), then assertions on what it left:
shards that read back, metrics in range, servers that answered, the console's few lines, and the
run report, opened in headless Chromium as a person would open it.
"""

import io
import os
import re
from pathlib import Path

import pytest

from pipelines.tools import run_local

pytestmark = [pytest.mark.slow, pytest.mark.integration]

FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


# The console's budget for a whole successful run (the issue: under 40 lines after setup).
LINE_BUDGET = 40


@pytest.fixture(scope="module")
def console_run(tmp_path_factory):
    if not FASHION_MNIST.is_dir():
        pytest.fail("the demo data is missing: run 'make data' (Debian package dataset-fashion-mnist)")
    root = tmp_path_factory.mktemp("pipeline_root")
    stages_root = root / "stages"
    out = io.StringIO()
    result = run_local.run_pipeline(
        dict(
            source="fashion-mnist",
            limit_per_split=400,
            epochs=2,
            steps_per_epoch=40,
            batch_size_per_replica=64,
            # Low enough for 80 steps of training to pass, so the gated branches run too.
            value_thresholds={"accuracy": 0.3},
            change_thresholds={},
            benchmark_images=256,
            benchmark_batch_size=64,
            export_formats=["litert_int8"],  # one conversion: the export step's own tests cover the others
            promote_to_prod=True,
        ),
        root,
        stages_root,
        out=out,
        tty=False,
    )
    return result, stages_root, out.getvalue()


@pytest.fixture(scope="module")
def local_run(console_run):
    result, stages_root, _ = console_run
    assert result.ok, f"the run failed; see {result.run_dir}/logs"
    return result.run_dir, stages_root, run_local.task_outputs(result.run_dir)


def _task(outputs, prefix):
    matches = [name for name in outputs if name.startswith(prefix)]
    assert matches, f"no task {prefix}* in {sorted(outputs)}"
    return outputs[sorted(matches)[0]]


def test_shards_exist_and_read_back_with_tf_data(local_run):
    import tensorflow as tf

    from trainer import tfrecords

    run_dir, _, _ = local_run
    dataset_dir = next(run_dir.glob("convert-to-tfrecords*/dataset"))
    info = tfrecords.load_dataset_info(str(dataset_dir))
    assert set(info.splits) >= {"train", "test"}
    for split, split_info in info.splits.items():
        paths = [str(dataset_dir / s.file) for s in split_info.shards]
        assert all(os.path.getsize(p) > 0 for p in paths)
        count = sum(1 for _ in tf.data.TFRecordDataset(paths, compression_type=info.compression or ""))
        assert count == split_info.count <= 400, split


def test_training_and_evaluation_metrics_are_in_range(local_run):
    _, _, outputs = local_run
    train = _task(outputs, "train-model")["metrics"]
    assert train["images_per_sec"] > 0
    evaluation = _task(outputs, "evaluate-model")
    accuracy = evaluation["metrics"]["accuracy"]
    # 10 classes: chance is 0.1; 80 steps of the notebook's CNN get well above it.
    assert 0.3 <= accuracy <= 1.0
    assert evaluation["parameters"]["Output"] is True
    # about 40 test images per class: the classes with 30 or more are scored and recorded (accuracy
    # and loss) for the next gate's comparison slice by slice
    per_class = {k: v for k, v in evaluation["metrics"].items() if k.startswith("slice/class:")}
    assert len(per_class) >= 2 * 6 and len(per_class) % 2 == 0
    assert all(0.0 <= v <= 1.0 for k, v in per_class.items() if k.endswith("/accuracy"))


def test_the_data_checks_ran_before_training_and_are_in_the_model_card(local_run):
    run_dir, stages_root, outputs = local_run
    checked = _task(outputs, "validate-dataset")["parameters"]["Output"]
    assert checked["passed"] is True and not [f for f in checked["findings"] if f["severity"] == "error"]
    card = (run_dir / "train-model" / "model" / "model_card.md").read_text()
    assert "## Data checks" in card and "- passed:" in card
    # what prod records keeps the slices: the next run's gate compares slice by slice
    from components.serving.stages import StageRegistry

    prod = StageRegistry(str(stages_root)).read_current("prod", "classifier")
    assert any(k.startswith("slice/class:") for k in prod.metrics), prod.metrics


def test_benchmark_timed_real_inference(local_run):
    _, _, outputs = local_run
    bench = _task(outputs, "benchmark-inference")["metrics"]
    assert bench["images_per_sec"] > 0
    assert bench["latency_p50_ms"] > 0


def test_the_blessed_model_gets_its_checked_portable_form_and_its_card_says_so(local_run):
    run_dir, stages_root, outputs = local_run
    record = _task(outputs, "export-model")["parameters"]["Output"]
    rows = {row["format"]: row for row in record["rows"]}
    assert list(rows) == ["saved_model", "float32", "litert_int8"] and record["passed"] == ["litert_int8"]
    assert rows["litert_int8"]["flex_ops"] == 0 and rows["litert_int8"]["agreement_served"] > 0.9
    model = run_dir / "train-model" / "model"
    assert (model / "export" / "model_int8.tflite").is_file()
    assert "## Portable formats" in (model / "model_card.md").read_text()
    from components.serving.stages import STAGES, StageRegistry

    for stage in STAGES:  # each stage's entry says which forms passed (it serves the SavedModel)
        assert StageRegistry(str(stages_root)).read_current(stage, "classifier").formats == tuple(record["passed"])


def test_every_stage_serves_the_model_after_its_checks_passed(local_run):
    from components.serving import stages

    run_dir, stages_root, outputs = local_run
    evaluated = _task(outputs, "evaluate-model")["metrics"]
    for stage in stages.STAGES:
        current = stages.StageRegistry(str(stages_root)).read_current(stage, "classifier")
        assert current is not None, f"{stage} serves nothing"
        # The evaluation's metrics travel with the model: prod's are the next run's gate baseline.
        assert current.metrics["accuracy"] == pytest.approx(evaluated["accuracy"])
        assert current.version >= 1
        history = stages.StageRegistry(str(stages_root)).read_history(stage, "classifier")
        assert history[-1].version == current.version
        assert current.checks_passed  # the serving checks' record travels with the promotion


def test_summary_names_accuracy_speed_and_stages(local_run):
    from components.serving import stages

    run_dir, stages_root, _ = local_run
    text = run_local.summarize(run_dir, stages_root, "classifier")
    assert str(run_dir) in text
    assert "test accuracy:      0." in text
    assert "make serve" in text  # how to look at what the run promoted
    stage_lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ")}
    for stage in stages.STAGES:
        assert "classifier version" in stage_lines[stage], text


def test_the_console_is_short_and_names_every_step_with_its_figures(console_run, local_run):
    result, _, text = console_run
    _, _, outputs = local_run
    lines = text.splitlines()
    assert len(lines) == result.printed < LINE_BUDGET, text
    assert "executor_input" not in text and "@@progress" not in text and "oneDNN" not in text
    ended = {m.group(1).strip(): line for line in lines if (m := re.match(r"^ok (.+?)\s{2,}\d", line))}
    for step in ("Convert to TFRecords", "Train", "Evaluate and gate", "Benchmark inference", "Promote to demo",
                 "Promote to staging", "Promote to prod", "Run report", "Export portable formats"):  # fmt: skip
        assert step in ended, text
    assert any(line.startswith("   litert_int8: passed: accuracy ") for line in lines), text  # one line a format
    assert "1,200 images converted, 0 rejected" in ended["Convert to TFRecords"]  # 400 per split
    accuracy = _task(outputs, "evaluate-model")["metrics"]["accuracy"]
    assert f"accuracy {accuracy:.4f}, blessed" in ended["Evaluate and gate"]
    assert "prod serves version" in ended["Promote to prod"]
    # progress from the train step's own lines: steps done, and the time left
    assert any(line.startswith("   train: ") and " steps (" in line and "left" in line for line in lines), text
    assert f"report:             {result.report}" in text and f"logs:               {result.run_dir}/logs/" in text


def test_every_step_has_its_whole_log_in_the_run_folder(console_run):
    result, _, _ = console_run
    logs = result.run_dir / "logs"
    for task in ("convert-to-tfrecords", "train-model", "evaluate-model", "benchmark-inference", "build-report"):
        text = (logs / f"{task}.log").read_text()
        assert "Got executor_input:" in text and "finished with status SUCCESS" in text, task
    assert "@@progress" in (logs / "convert-to-tfrecords.log").read_text()
    assert (result.run_dir.parent / "latest" / "report.html").read_bytes() == result.report.read_bytes()


def test_the_report_step_publishes_the_page_as_an_html_artifact(local_run):
    run_dir, _, outputs = local_run
    page = (run_dir / "build-report" / "report").read_text()
    assert page.startswith("<!DOCTYPE html>") and 'id="evaluation"' in page
    assert "Step status and times are in the Kubeflow UI" in page  # a cluster step cannot see them
    assert _task(outputs, "build-report")["report"]["bytes"] == len(page.encode())


def test_the_report_opens_in_a_browser_with_every_section_and_the_run_s_figures(
    console_run, local_run, tmp_path_factory
):
    from tests.browser import Browser, chromium_path

    if chromium_path() is None:
        pytest.fail("chromium is missing: run 'make browser' (Debian package chromium)")
    result, _, _ = console_run
    _, _, outputs = local_run
    size = result.report.stat().st_size
    assert size < 2 * 1024 * 1024
    with Browser(width=1200, height=900) as browser:
        browser.open(result.report)
        shot = browser.screenshot(tmp_path_factory.mktemp("browser") / "report.png", full_page=True, scale=0.5)
        if os.environ.get("LTP_REPORT_SCREENSHOT"):  # regenerate docs/report.png (README)
            from PIL import Image

            readme = browser.screenshot(Path(os.environ["LTP_REPORT_SCREENSHOT"]), full_page=True, scale=0.5)
            Image.open(readme).convert("RGB").quantize(128).save(readme, optimize=True)  # small enough to commit
        sections = browser.evaluate(
            "Object.fromEntries([...document.querySelectorAll('section')].map(s => [s.id, s.innerText]))"
        )
        charts = browser.evaluate("[...document.querySelectorAll('svg.chart')].map(s => s.getAttribute('aria-label'))")
        images = browser.evaluate("[...document.images].filter(i => i.complete && i.naturalWidth > 0).length")
    errors = [m for m in browser.console if m["type"] in ("error", "exception", "assert")]
    assert errors == []
    assert [u for u in browser.requests if not u.startswith(("file:", "data:"))] == []
    assert shot.stat().st_size > 10_000  # a page was drawn
    assert list(sections) == ["steps", "parameters", "dataset", "training", "evaluation", "gate", "benchmark", "stages"]
    assert "Convert to TFRecords" in sections["steps"] and "succeeded" in sections["steps"]
    assert "400" in sections["dataset"] and "Ankle boot" in sections["dataset"]
    assert "Data checks" in sections["dataset"] and "passed: " in sections["dataset"]
    assert "Slices, worst first" in (result.run_dir / "evaluate-model" / "page").read_text()
    evaluation = _task(outputs, "evaluate-model")["metrics"]
    assert f"{evaluation['accuracy']:.4f}" in sections["evaluation"]
    assert "true: " in sections["evaluation"] and "pred: " in sections["evaluation"]
    assert "BLESSED" in sections["gate"] and "PASS: accuracy" in sections["gate"]
    bench = _task(outputs, "benchmark-inference")["metrics"]
    assert f"{bench['images_per_sec']:,.0f}" in sections["benchmark"]
    assert "prod: serves classifier version" in sections["stages"]
    assert {
        "loss per epoch",
        "accuracy per epoch",
        "Confusion matrix",
        "Throughput",
        "Images per class and split",
    } <= set(charts)
    assert 16 <= images <= 48  # the sample grid (and the heatmap's colour bar), all decoded


def test_make_predict_scores_what_staging_serves_in_shards_under_kfp_local(local_run, tmp_path, capsys):
    """The batch_predict pipeline, whole, on the classifier this run promoted: the test split in two shards."""
    import json

    from components.serving import stages
    from pipelines.tools import run_predict

    run_dir, stages_root, _ = local_run
    dataset_dir = next(run_dir.glob("convert-to-tfrecords*/dataset"))
    out = tmp_path / "predictions"
    count = json.loads((dataset_dir / "dataset.json").read_text())["splits"]["test"]["count"]
    half = f"images_per_shard={-(-count // 2)}"  # two shards, which kfp.local runs at once
    status = run_predict.main(
        ["--data", str(dataset_dir), "--stage", "staging", "--model", "classifier", "--stages", str(stages_root),
         "--output-uri", str(out), "--pipeline-root", str(tmp_path / "root"), "--set", half]
    )  # fmt: skip
    console = capsys.readouterr().out
    assert status == 0, console
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] and summary["scored"] == count and summary["shards"] == 2
    version = stages.StageRegistry(str(stages_root)).read_current("staging", "classifier").version
    rows = [json.loads(line) for f in sorted(out.glob("shard-*.jsonl")) for line in f.read_text().splitlines()]
    assert len(rows) == count and {r["model_version"] for r in rows} == {f"staging/classifier v{version}"}
    right = sum(r["classes"][0]["class"] == r["label"] for r in rows)
    assert summary["metrics"]["accuracy"] == pytest.approx(right / count)
    assert console.count("ok Score a shard") == summary["shards"] and "FAILED" not in console
    assert f"predictions: {out}/shard-*.jsonl ({count:,} images)" in console
