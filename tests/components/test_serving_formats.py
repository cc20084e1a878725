"""A stage serving a portable format: the local model server answers ``:predict`` as the SavedModel
does (same signatures, keys, shapes, top-1), promotion serves the chosen form with its checks, a
canary and sampled traffic, a rollback returns to the previous form, and batch prediction scores
in a format. One tiny classifier (tests/eval_bench_fixtures.py), exported once for the module.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from components.serving.checks import http_json
from components.serving.config import LoadTestConfig, PromoteConfig
from components.serving.portable import publish_format, served_format
from components.serving.stages import StageRegistry
from trainer.export.serving import ServingFormatError

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FORMATS = ("litert", "onnx", "openvino", "openvino_int8")
# How far a format's probabilities may be from the (float32) SavedModel's: float32 runtimes agree
# to rounding; OpenVINO's CPU plugin computes in bf16 where the CPU has bf16 units (8 significant
# bits: 4e-3 of a probability near 1 from one rounding; measured 1e-4 here, 7e-3 on make run's
# classifier), and its int8 IR (measured 2e-3 here, 0.024 on make run's classifier).
ATOL = {"litert": 1e-4, "onnx": 1e-4, "openvino": 1e-2, "openvino_int8": 5e-2}
METRICS = {"accuracy": 1.0}  # the evaluation's, recorded as given (not scored again)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from components.export import run as export_run
    from components.export.config import ExportConfig
    from tests.eval_bench_fixtures import tiny_assets

    assets = tiny_assets()
    model = tmp_path_factory.mktemp("formats") / "model"
    shutil.copytree(assets["model"], model)
    quick = ExportConfig(export_formats=FORMATS, eval_images=20, calibration_images=8, batch_size=8, timed_batches=1)
    record = export_run.run_export(str(model), assets["dataset"], quick, log=lambda line: None)
    # OpenVINO's CPU plugin dies on some virtual machines' CPUs (its child process does, not this
    # one): there its formats are refused naming the signal, and every other format passes.
    rows = {r["format"]: r for r in record["rows"]}
    crashed = tuple(f for f in FORMATS if "plugin crashed (SIG" in rows[f]["reason"])
    assert set(crashed) <= {"openvino", "openvino_int8"}
    served = tuple(f for f in FORMATS if f not in crashed)
    assert sorted(record["passed"]) == sorted(served)
    return {"model": str(model), "dataset": assets["dataset"], "record": record, "served": served, "crashed": crashed}


def test_openvino_is_converted_from_the_onnx_files_and_runs_in_bf16_where_the_cpu_has_bf16_units(exported):
    """Both IRs come from the export's ONNX files (model_int8.onnx kept though onnx_int8 was not asked
    for); the row records the precision the plugin ran the model in, not its hint."""
    from trainer.export.formats import FORMATS as ALL

    rows, folder = {r["format"]: r for r in exported["record"]["rows"]}, Path(exported["model"]) / "export"
    if exported["crashed"]:  # this machine's OpenVINO dies compiling: both refused, nothing half-written kept
        assert exported["crashed"] == ("openvino", "openvino_int8")
        assert all(rows[f]["status"] == "refused" and not (folder / ALL[f].file).exists() for f in exported["crashed"])
        return
    flags = set(Path("/proc/cpuinfo").read_text().split()) if Path("/proc/cpuinfo").exists() else set()
    ov, int8 = rows["openvino"], rows["openvino_int8"]
    assert ov["precision"] == ("bf16" if {"avx512_bf16", "amx_bf16"} & flags else "float32")
    assert int8["precision"] == "int8"  # onnxruntime's QDQ pairs run as int8 convolutions: no NNCF, no recalibration
    assert ov["output_error"] < ATOL["openvino"] and int8["output_error"] < ATOL["openvino_int8"]
    for row in (ov, int8):
        assert row["agreement_served"] == row["agreement_rebuild"] == 1.0
        assert row["metrics"]["accuracy"] == rows["float32"]["metrics"]["accuracy"]
        assert row["size_bytes"] == sum((folder / f).stat().st_size for f in ALL[row["format"]].files)
    assert (folder / "model_int8.onnx").exists() and "onnx_int8" not in rows
    assert [r["format"] for r in rows.values() if r["precision"]] == ["openvino", "openvino_int8"]


def _encoded(dataset, count=20):
    from trainer.evaluate import read_encoded_split

    return read_encoded_split(dataset, "test", count)[0]


def _answers(base_path, instances):
    from components.serving.server import ModelServer

    with ModelServer(base_path, "clf") as server:
        url = f"{server.url}/v1/models/clf"
        metadata = http_json("GET", f"{url}/metadata")[1]["metadata"]
        spec = metadata["signature_def"]["signature_def"]["serving_tensors"]["inputs"]["images"]["tensor_shape"]
        shape = [3, *(int(d["size"]) for d in spec["dim"][1:])]
        images = np.random.default_rng(0).random(shape, dtype=np.float32)
        by_bytes = http_json("POST", f"{url}:predict", {"instances": instances})[1]
        columns = {"signature_name": "serving_tensors", "inputs": {"images": images.tolist()}}
        by_tensors = http_json("POST", f"{url}:predict", columns)[1]
        status, bad = http_json("POST", f"{url}:predict", {"instances": [{"b64": base64.b64encode(b"no").decode()}]})
    assert status == 400 and "error" in bad
    return by_bytes["predictions"], by_tensors["outputs"], metadata


def test_the_server_answers_predict_in_each_format_as_the_saved_model_does(exported, tmp_path):
    stages = StageRegistry(str(tmp_path / "stages"))
    version = stages.publish(f"{exported['model']}/saved_model", "demo", "clf")
    folder = stages.version_path("demo", "clf", version)
    encoded = _encoded(exported["dataset"])
    instances = [{"b64": base64.b64encode(e).decode()} for e in encoded]
    reference = _answers(stages.model_base_path("demo", "clf"), instances)
    for fmt in exported["served"]:
        sources = [f"{exported['model']}/export"]
        publish_format(folder, fmt, sources, "classification", {}, None)
        assert served_format(folder) == fmt
        rows, columns, metadata = _answers(stages.model_base_path("demo", "clf"), instances)
        assert metadata == reference[2]  # the same signatures, inputs, outputs, dtypes and shapes
        assert [sorted(r) for r in rows] == [sorted(r) for r in reference[0]] == [["classes", "probabilities"]] * 20
        assert [r["classes"] for r in rows] == [r["classes"] for r in reference[0]]  # top-1 agreement: all
        assert columns["classes"] == reference[1]["classes"]
        _assert_close(fmt, [r["probabilities"] for r in rows], [r["probabilities"] for r in reference[0]])
        _assert_close(fmt, columns["probabilities"], reference[1]["probabilities"])
    publish_format(folder, "saved_model", [], "classification", {}, None)
    assert served_format(folder) == "saved_model"


def _assert_close(fmt, got, want):
    """A float format's every probability within its tolerance; an int8 format's on average (its
    kernels differ by CPU and batch shape: on AVX2 without VNNI one probability in 30 moved 0.07)."""
    if fmt.endswith("_int8"):
        assert np.mean(np.abs(np.asarray(got) - np.asarray(want))) < ATOL[fmt] / 5
    else:
        np.testing.assert_allclose(got, want, atol=ATOL[fmt])


def _config(root, fmt, **kw):
    options = {"traffic_sample_rate": 1.0}
    load = LoadTestConfig(clients=2, max_requests=40, max_seconds=0.5)  # concurrent requests, briefly
    return PromoteConfig(
        stages_root=str(root), model_name="clf", serving_format=fmt, serving_options=options, load_test=load,
        smoke_examples=8, **kw,
    )  # fmt: skip


def test_promotion_serves_the_chosen_form_and_a_rollback_returns_to_the_previous_one(exported, tmp_path):
    from components.promote.rollback import rollback
    from components.promote.run import promote

    model, dataset, root = exported["model"], exported["dataset"], tmp_path / "stages"
    stages = StageRegistry(str(root))
    ipd = {r["format"]: r["images_per_dollar"] for r in exported["record"]["rows"]}
    best = max(["saved_model", *exported["served"]], key=ipd.get)  # timed in the fixture's run: either may win
    other = next(f for f in exported["served"] if f != best)

    first = promote(model, dataset, _config(root, "auto"), "run-1", metrics=METRICS)
    assert (first.version, first.serving_format) == (1, best)
    assert all(c.passed for c in first.checks) and [c.name for c in first.checks][-1] == "load"
    assert stages.read_current("demo", "clf").serving_format == best
    assert promote(model, dataset, _config(root, "auto"), "run-1b", metrics=METRICS).no_op  # same model, same form

    # Another form of the same model is another version, rolled out through a canary.
    second = promote(model, dataset, _config(root, other, canary_steps=(50, 100)), "run-2", metrics=METRICS)
    assert (second.version, second.serving_format, second.previous_version) == (2, other, 1)
    assert all(c.passed for c in second.checks)
    assert served_format(stages.version_path("demo", "clf", 2)) == other

    # Sampled traffic keeps working with a portable format behind the server.
    lines = [json.loads(x) for f in sorted((root / "demo" / "traffic" / "clf").glob("*.jsonl")) for x in open(f)]
    assert {x["version"] for x in lines} >= {1, 2} and any(x["answer"].get("class") is not None for x in lines)

    back = rollback(_config(root, other), "run-3")
    assert (back.version, back.serving_format) == (1, best)
    assert all(c.passed for c in back.checks) and stages.read_current("demo", "clf").serving_format == best

    # A format the export did not pass: refused before anything is published.
    with pytest.raises(ServingFormatError, match="'litert_int8': the model's export has no such file; the choices"):
        promote(model, dataset, _config(root, "litert_int8"), "run-4", metrics=METRICS)
    assert stages.list_versions("demo", "clf") == [1]


def test_batch_prediction_scores_in_a_format_as_in_the_saved_model(exported, tmp_path):
    from components.batch_predict.__main__ import main

    top1 = {}
    for fmt in ("saved_model", "litert"):
        out = tmp_path / fmt
        args = ["run", "--data", exported["dataset"], "--model-dir", exported["model"], "--output-uri", str(out)]
        assert main([*args, "--serving-format", fmt]) == 0
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["model"].get("serving_format") == (None if fmt == "saved_model" else fmt)
        rows = [json.loads(x) for x in (out / "shard-00000.jsonl").read_text().splitlines()]
        top1[fmt] = [r["classes"][0]["index"] for r in rows]
    assert len(top1["litert"]) == 60 and top1["litert"] == top1["saved_model"]
