"""Choosing the form a stage serves (``serving_format``): the choice as a pure function, and every
bad input refused in one line that names the valid choices, before anything is published. No TensorFlow.
"""

import pytest

from components.batch_predict.config import PredictConfig
from components.serving.config import PromoteConfig
from components.serving.pinned import ModelRef, with_format
from components.serving.stages import StageEntry
from components.serving.targets import get_target
from trainer.configbase import ConfigError
from trainer.export import serving
from trainer.export.serving import ServingFormatError, choose

EVERYTHING = ("saved_model", "litert", "litert_int8", "onnx", "onnx_int8", "openvino", "openvino_int8")
TF_SERVING = ("saved_model",)


def row(fmt, ipd, status="passed", reason=""):
    return {"format": fmt, "status": status, "reason": reason, "images_per_dollar": ipd, "vs_served": ipd / 100.0}


# The export.json of a model: LiteRT int8 the cheapest to serve, ONNX int8 refused by its gate.
RECORD = {
    "passed": ["litert_int8", "onnx", "litert"],
    "rows": [
        row("saved_model", 100.0, "baseline"),
        row("float32", 60.0, "baseline"),
        row("litert", 80.0),
        row("litert_int8", 133.0),
        row("onnx", 90.0),
        row("onnx_int8", 160.0, "refused", "accuracy 0.610 vs 0.857 (float32 rebuild): -24.7 points, beyond 2"),
    ],
}


def test_auto_serves_the_best_images_per_dollar_that_passed_and_the_target_can_serve():
    choice = choose("auto", RECORD, "local", EVERYTHING)
    assert choice.format == "litert_int8"  # onnx_int8 would be cheaper: its gate refused it
    assert "1.33x" in choice.reason
    # Formats that passed but are all dearer than the SavedModel: the SavedModel.
    dear = {"passed": ["onnx"], "rows": [row("saved_model", 100.0, "baseline"), row("onnx", 90.0)]}
    assert choose("auto", dear, "local", EVERYTHING).format == "saved_model"
    # TensorFlow Serving serves SavedModels only; a runtime missing here leaves its formats out.
    on_tf_serving = choose("auto", RECORD, "kubernetes", TF_SERVING)
    assert on_tf_serving.format == "saved_model" and "kubernetes" in on_tf_serving.reason
    missing = choose("auto", RECORD, "local", EVERYTHING, lambda f: f != "litert_int8")
    assert missing.format == "saved_model" and "litert_int8 passed; target 'local' or this image" in missing.reason
    # No export at all (a model of an earlier version, or one not blessed): the SavedModel.
    assert choose("auto", None, "local", EVERYTHING).format == "saved_model"
    assert choose("saved_model", RECORD, "kubernetes", TF_SERVING).format == "saved_model"
    assert choose("onnx", RECORD, "local", EVERYTHING).format == "onnx"
    # OpenVINO's formats are weighed as the others: its bf16 IR beats the SavedModel on this record.
    bf16 = {**RECORD, "passed": [*RECORD["passed"], "openvino"], "rows": [*RECORD["rows"], row("openvino", 149.0)]}
    assert choose("auto", bf16, "local", EVERYTHING).format == "openvino"
    assert choose("auto", bf16, "local", EVERYTHING, lambda f: f != "openvino").format == "litert_int8"


@pytest.mark.parametrize(
    ("asked", "target", "formats", "installed", "message"),
    [
        ("tflite", "local", EVERYTHING, True, "'tflite' does not exist; the choices are auto, saved_model, litert,"),
        ("tensorrt", "local", EVERYTHING, True, r"'tensorrt' is not built \(no export writes it\); the choices"),
        ("onnx_int8", "local", EVERYTHING, True, r"the export refused it \(accuracy 0.610 .*choices for this model"),
        ("onnx", "kubernetes", TF_SERVING, True, "target 'kubernetes' serves only saved_model; choose auto, saved_m"),
        ("litert", "local", EVERYTHING, False, "runtime ai-edge-litert is not installed in this image; install it"),
    ],
)
def test_a_form_that_cannot_be_served_is_one_line_naming_the_choices(
    asked, target, formats, installed, message, monkeypatch
):
    monkeypatch.setitem(serving.NOT_BUILT, "tensorrt", "no export writes it")  # a name readers may expect
    with pytest.raises(ServingFormatError, match=message) as err:
        choose(asked, RECORD, target, formats, lambda f: installed)
    assert "\n" not in str(err.value)
    if asked == "onnx_int8":
        assert str(err.value).endswith("the choices for this model are auto, saved_model, litert_int8, onnx, litert")


def test_a_format_the_export_never_wrote_is_refused():
    with pytest.raises(ServingFormatError, match="'litert': the model's export has no such file"):
        choose("litert", {"passed": [], "rows": [row("saved_model", 1.0, "baseline")]}, "local", EVERYTHING)


def test_the_configs_refuse_a_bad_name_when_they_are_loaded():
    with pytest.raises(ConfigError, match="'onnx-int8' does not exist; the choices are auto"):
        PromoteConfig(serving_format="onnx-int8")
    assert PromoteConfig().serving_format == "saved_model"  # what was served before, unless asked
    predict = {"data": "d", "output_uri": "o", "stage": "demo"}
    with pytest.raises(ConfigError, match="predict.serving_format: scores one form: choose one of saved_model"):
        PredictConfig(**predict, serving_format="auto")
    with pytest.raises(ConfigError, match="'openvino-int8' does not exist"):
        PredictConfig(**predict, serving_format="openvino-int8")
    assert PredictConfig(**predict, serving_format="litert_int8").serving_format == "litert_int8"
    assert PredictConfig(**predict, serving_format="openvino").serving_format == "openvino"


def test_the_targets_say_which_forms_they_serve(tmp_path):
    from components.serving.stages import StageRegistry

    stages = StageRegistry(str(tmp_path))
    assert get_target("kubernetes", stages).serving_formats == TF_SERVING
    assert set(get_target("local", stages).serving_formats) == set(EVERYTHING)
    assert set(get_target("kserve", stages, api_client=object()).serving_formats) == set(EVERYTHING)
    assert set(serving.CHOICES) == {"auto", *EVERYTHING}


def test_batch_prediction_pins_a_format_only_where_the_model_has_its_file(tmp_path):
    model = tmp_path / "model"
    (model / "export").mkdir(parents=True)
    (model / "export" / "model.onnx").write_bytes(b"onnx")
    ref = ModelRef(str(model / "saved_model"), "0" * 64, "classification", model_uri=str(model))
    assert with_format(ref, "onnx").serving_format == "onnx"
    assert with_format(ref, None) is ref and with_format(ref, "saved_model").serving_format is None
    with pytest.raises(ServingFormatError, match="has no model_int8.tflite .*choose a format its export passed"):
        with_format(ref, "litert_int8")
    assert ModelRef.from_dict(with_format(ref, "onnx").to_dict()).serving_format == "onnx"
    assert "serving_format" not in ref.to_dict()  # manifests written before keep their plan id


def test_a_stage_entry_records_the_form_and_older_entries_read_none():
    entry = StageEntry("promote", 2, "m", "run-2", model_name="clf", serving_format="litert_int8")
    assert StageEntry.from_json(entry.to_json()).serving_format == "litert_int8"
    older = StageEntry("promote", 1, "m", "run-1", model_name="clf")
    assert "serving_format" not in older.to_dict() and StageEntry.from_json(older.to_json()).serving_format is None


def test_the_console_line_of_a_promotion_names_a_portable_form():
    from components.promote.surface import headline
    from components.surface import StepOutputs

    def line(**report):
        return headline(StepOutputs({"report": {"stage": "demo", "version": 3, **report}}, {}))

    assert line(serving_format="litert_int8") == "demo serves version 3 as litert_int8"
    assert line(serving_format="saved_model") == line() == "demo serves version 3"


def test_the_run_report_names_the_form_each_stage_serves(tmp_path):
    from components.report.records import RunRecords, read_stages
    from components.report.sections import stages
    from components.serving.stages import StageRegistry

    registry = StageRegistry(str(tmp_path))
    registry.record("demo", StageEntry("promote", 1, "m", "run-1", model_name="clf"))
    registry.record("demo", StageEntry("promote", 2, "m", "run-2", model_name="clf", serving_format="litert_int8"))
    html = str(stages(RunRecords(stages=read_stages(str(tmp_path)))))
    assert "demo: serves clf version 2 as litert_int8 from run run-2" in html
    assert "<td class=l>2 as litert_int8</td>" in html and "<td class=l>1</td>" in html  # the history
