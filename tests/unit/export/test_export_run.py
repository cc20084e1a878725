"""The export step on tiny real models: each format converted, run through its own runtime, gated.

One export per task, sharing the suite's tiny models (tests/eval_bench_fixtures.py,
tests/detection_fixtures.py), copied first: the step writes into the model folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from components.export import run as export_run
from components.export.config import ExportConfig
from trainer.export import formats
from trainer.export.formats import ExportRow

pytestmark = pytest.mark.slow

QUICK = {"timed_batches": 1, "batch_size": 32, "calibration_images": 32}


def _rows(record: dict) -> dict[str, ExportRow]:
    return {r["format"]: ExportRow.from_dict(r) for r in record["rows"]}


@pytest.fixture(scope="module")
def classifier_export(tmp_path_factory):
    from tests.eval_bench_fixtures import tiny_assets

    assets = tiny_assets()
    model = tmp_path_factory.mktemp("export") / "model"
    shutil.copytree(assets["model"], model)
    config = ExportConfig(export_formats=("litert", "onnx_int8"), eval_images=60, **QUICK)
    record = export_run.run_export(str(model), assets["dataset"], config, log=lambda line: None)
    return model, assets["dataset"], record


def test_the_classifier_s_formats_are_written_checked_timed_and_priced(classifier_export):
    model, _, record = classifier_export
    rows = _rows(record)
    assert list(rows) == ["saved_model", "float32", "litert", "onnx_int8"]
    assert record["headline"] == "accuracy" and record["price_key"] == "cpu-8"
    litert = rows["litert"]  # a float format: the rebuild's outputs, the served model's answers
    assert litert.passed, litert.reason
    assert litert.output_error < 1e-4 and litert.agreement_rebuild == 1.0 and litert.agreement_served >= 0.995
    assert litert.metrics["accuracy"] == pytest.approx(rows["float32"].metrics["accuracy"])
    assert litert.flex_ops == 0
    int8 = rows["onnx_int8"]
    assert int8.status in ("passed", "refused") and "accuracy" in int8.metrics and int8.agreement_rebuild > 0.5
    assert int8.size_bytes < litert.size_bytes  # int8 weights
    for row in rows.values():
        assert [s.batch_size for s in row.speeds] == [1, 32] and row.images_per_dollar > 0
    assert rows["saved_model"].vs_served == 1.0
    assert record["passed"] == formats.passed(list(rows.values()))
    folder = model / formats.EXPORT_DIR
    assert json.loads((folder / formats.RECORD).read_text()) == json.loads(json.dumps(record))
    for name in ("litert", "onnx_int8"):
        assert (folder / formats.FORMATS[name].file).stat().st_size == rows[name].size_bytes
    assert (folder / "model.onnx").exists() and not (folder / "model.keras").exists()


def test_the_detector_s_bad_int8_is_refused_by_its_gate_and_litert_int8_passes(tmp_path):
    """onnxruntime's QOperator u8s8 loses the detector's AP@0.5; LiteRT's full-integer int8 keeps it.

    Both with the project's letterbox, decoding and per-class NMS after the runtime.
    """
    from tests.detection_fixtures import tiny_detection

    assets = tiny_detection()
    model = tmp_path / "model"
    shutil.copytree(assets["model"], model, ignore=shutil.ignore_patterns("checkpoints", "logs"))
    config = ExportConfig(export_formats=("litert_int8", "onnx_int8"), onnx_scheme="qoperator", **QUICK)
    record = export_run.run_export(str(model), assets["dataset"], config, log=lambda line: None)
    rows = _rows(record)
    assert record["headline"] == "ap50" and record["agreement"] == "matched-box IoU"
    reference = rows["float32"].metrics["ap50"]
    assert abs(rows["saved_model"].metrics["ap50"] - reference) < 0.02  # bf16 served vs its float32 rebuild
    litert = rows["litert_int8"]
    assert litert.passed and litert.flex_ops == 0 and abs(litert.metrics["ap50"] - reference) <= 0.02
    bad = rows["onnx_int8"]
    assert bad.status == "refused" and "beyond the tolerance of 2" in bad.reason, bad.reason
    assert bad.agreement_rebuild < litert.agreement_rebuild
    assert record["passed"] == ["litert_int8"]


def test_the_model_card_gets_the_format_table_once(classifier_export):
    model, _, record = classifier_export
    rows = [ExportRow.from_dict(r) for r in record["rows"]]
    export_run._card(str(model), rows, export_run.trained_task(str(model)).portable())  # a re-run's card
    card = (model / "model_card.md").read_text()
    assert card.count(export_run.CARD_SECTION) == 1
    assert "| litert | passed |" in card and "top-1 agreement vs served" in card


def test_a_runtime_not_installed_is_one_line_before_any_conversion(monkeypatch):
    missing = formats.Format("litert", "ai-edge-litert", "no_such_runtime_module", "model.tflite", False)
    monkeypatch.setitem(formats.FORMATS, "litert", missing)
    with pytest.raises(formats.ExportError, match=r"runtime ai-edge-litert is not installed in this image"):
        export_run.check_runtimes(("litert",))


def test_calibration_on_a_dataset_without_a_training_split_is_refused(tmp_path, classifier_export):
    from tests.eval_bench_fixtures import write_dataset

    model, _, _ = classifier_export
    dataset = write_dataset(tmp_path / "no-train", {"test": 4})
    facet = export_run.trained_task(str(model)).portable()
    with pytest.raises(formats.ExportError, match="needs the dataset's train split"):
        export_run._calibration(facet, str(dataset), ExportConfig(), (28, 28, 1))


def test_a_model_not_blessed_gets_an_empty_export(tmp_path, classifier_export):
    model, dataset, _ = classifier_export
    record = export_run.run_export(str(model), dataset, ExportConfig(export_formats=()))
    assert record["rows"] == [] and "not blessed" in record["note"]
    assert json.loads((Path(model) / "export" / "export.json").read_text())["rows"] == []
