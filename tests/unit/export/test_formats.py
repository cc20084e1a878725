"""The export's formats, tolerances and per-format gate, and the step's console lines (no TensorFlow)."""

from __future__ import annotations

import pytest

from components.export.config import ExportConfig
from components.export.surface import headline
from components.surface import StepOutputs
from trainer.config import ConfigError
from trainer.export import formats
from trainer.export.formats import ExportRow, Speed


def _row(name: str, ap50: float, flex: int | None = None, ipd: float | None = None) -> ExportRow:
    return ExportRow(name, "", "", 1000, flex, {"ap50": ap50}, images_per_dollar=ipd, speeds=[Speed(64, 100.0, 9, 10)])


def test_a_format_that_does_not_exist_names_the_formats():
    with pytest.raises(ConfigError, match=r"export format 'tflite' does not exist; the formats are litert, "):
        ExportConfig(export_formats=("litert", "tflite"))
    with pytest.raises(formats.ExportError, match="openvino, openvino_int8"):
        formats.check_formats(["tensorrt"])
    assert formats.check_formats(["openvino", "openvino_int8"]) == ("openvino", "openvino_int8")


def test_an_openvino_ir_is_converted_from_the_onnx_file_and_has_its_weights_beside_it():
    assert formats.FORMATS["openvino"].files == ("model.xml", "model.bin")
    assert formats.FORMATS["openvino_int8"].source == "onnx_int8" and formats.FORMATS["openvino_int8"].int8
    assert formats.FORMATS["onnx"].files == ("model.onnx",) and formats.FORMATS["onnx"].source is None
    assert set(formats.DEFAULT_TOLERANCES) == set(formats.FORMATS)  # no format refused for want of one


@pytest.mark.parametrize("value", [-1.0, float("nan"), True])
def test_a_tolerance_must_be_a_number_of_points_of_zero_or_more(value):
    with pytest.raises(ConfigError, match=r"export_tolerances.onnx"):
        ExportConfig(export_tolerances={"onnx": value})


def test_a_tolerance_that_is_no_number_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match=r"export_tolerances.onnx: expected a number, got 'x'"):
        ExportConfig(export_tolerances={"onnx": "x"})


def test_the_gate_passes_within_the_tolerance_and_refuses_beyond_it():
    reference = {"ap50": 0.95}
    kept = formats.gate(_row("onnx_int8", 0.947), reference, "ap50", 2.0)
    assert kept.passed and "-0.3 points, within the tolerance of 2" in kept.reason
    # onnxruntime's QOperator u8s8 on a detector: AP@0.5 0.95 -> 0.75
    lost = formats.gate(_row("onnx_int8", 0.75), reference, "ap50", 2.0)
    assert lost.status == "refused" and "-20.0 points, beyond the tolerance of 2" in lost.reason


def test_the_gate_fails_closed_without_a_tolerance_and_refuses_flex_ops():
    none = formats.gate(_row("litert", 0.95), {"ap50": 0.95}, "ap50", None)
    assert none.status == "refused" and "set export_tolerances.litert" in none.reason
    flex = formats.gate(_row("litert", 0.95, flex=7), {"ap50": 0.95}, "ap50", 5.0)
    assert flex.status == "refused" and "7 Flex op(s)" in flex.reason
    crashed = ExportRow("onnx", "refused", "conversion or runtime failed: ValueError: bad")
    assert formats.gate(crashed, {"ap50": 0.95}, "ap50", 5.0).reason.startswith("conversion or runtime failed")


def test_passed_formats_come_best_images_per_dollar_first_and_rows_read_back():
    rows = [_row("litert", 0.9, ipd=10.0), _row("litert_int8", 0.9, ipd=30.0), _row("onnx", 0.5, ipd=50.0)]
    for row in rows[:2]:
        formats.gate(row, {"ap50": 0.9}, "ap50", 1.0)
    formats.gate(rows[2], {"ap50": 0.9}, "ap50", 1.0)
    assert formats.passed(rows) == ["litert_int8", "litert"]
    again = [ExportRow.from_dict({**r.to_dict(), "a_newer_key": 1}) for r in rows]
    assert again == rows
    table = formats.table(rows, "ap50", "matched-box IoU")
    assert len(table) == 5 and "| onnx | refused | 0.500 |" in table[-1]
    rows[0].precision = "bf16"  # what OpenVINO's CPU plugin computed in: beside the format's name
    assert "| litert (bf16) | passed |" in formats.table(rows, "ap50", "matched-box IoU")[2]


def test_the_console_says_one_line_per_format():
    rows = [_row("saved_model", 0.95, ipd=10.0), _row("litert_int8", 0.948, ipd=17.0), _row("onnx_int8", 0.75)]
    rows[0].status, rows[1].vs_served = "baseline", 1.7
    formats.gate(rows[1], {"ap50": 0.95}, "ap50", 2.0)
    formats.gate(rows[2], {"ap50": 0.95}, "ap50", 2.0)
    record = {"headline": "ap50", "rows": [r.to_dict() for r in rows], "passed": ["litert_int8"]}
    lines = headline(StepOutputs({}, {"Output": record})).splitlines()
    assert lines[0] == "passed: litert_int8 (best images per dollar first)"
    assert lines[1].startswith("   litert_int8: passed: ap50 0.948, 100 images/s, 1.70x the served model's")
    assert lines[2].startswith("   onnx_int8: refused: ap50 0.750") and "beyond the tolerance" in lines[2]
    assert headline(StepOutputs({}, {"Output": {"rows": [], "note": "no export: not blessed"}})) == (
        "no export: not blessed"
    )


def test_the_run_form_refuses_a_bad_format_or_tolerance_before_anything_runs():
    from pipelines import end_to_end
    from pipelines.tools import params
    from pipelines.tools.params import ParameterError

    for text, expected in (
        ("export_formats=[tflite]", "export format 'tflite' does not exist; the formats are litert, "),
        ("export_tolerances.onnx=-1", "export_tolerances.onnx: must be a number of points >= 0"),
    ):
        resolved = params.resolve(params.run_form(end_to_end.pipeline), [params.parse_set(text)], "classification")
        with pytest.raises(ParameterError) as caught:
            params.check_steps(end_to_end.pipeline, resolved.values, "classification")
        assert any(expected in problem for problem in caught.value.problems), caught.value.problems


def test_bodies_are_timed_in_turns_and_a_runtime_failing_then_is_reported_not_raised():
    import numpy as np

    from components.export.run import interleaved_speeds

    calls = []

    def fine(images):
        calls.append(("fine", len(images)))

    def broken(images):
        calls.append(("broken", len(images)))
        raise RuntimeError("invoke failed")

    speeds = interleaved_speeds({"fine": fine, "broken": broken}, np.zeros((8, 2, 2, 1)), [1, 4], calls=2)
    assert [s.batch_size for s in speeds["fine"]] == [1, 4] and all(s.images_per_sec > 0 for s in speeds["fine"])
    assert isinstance(speeds["broken"], RuntimeError)
    assert calls[:3] == [("fine", 1), ("broken", 1), ("fine", 1)]  # in turns; a failed one is not called again
    assert len(calls) == 1 + 3 * 2  # warm-up round and two timed rounds at each batch size, and one failure


def test_an_openvino_child_that_dies_by_a_signal_is_a_plugin_crash_naming_it_and_the_fix():
    """OpenVINO converts, compiles and first runs a model in a child process: its crash (a SIGFPE
    in compile_model on some virtual machines) refuses the format instead of killing the caller."""
    import signal
    import sys

    from trainer.export import openvino

    crash = f"import os, signal; os.kill(os.getpid(), signal.{signal.SIGFPE.name})"
    with pytest.raises(openvino.PluginCrash, match=r"crashed \(SIGFPE\) compiling model.xml .* serve another format"):
        openvino.in_child([sys.executable, "-c", crash], "compiling model.xml")
    with pytest.raises(openvino.PluginCrash, match=r"OpenVINO failed converting model.onnx: ValueError: bad graph"):
        openvino.in_child([sys.executable, "-c", "raise ValueError('bad graph')"], "converting model.onnx")
    openvino.in_child([sys.executable, "-c", "pass"], "compiling model.xml")  # a healthy child: no error
