"""The local model server's REST path in each form of one model: the SavedModel (the baseline, in
the same run) against its LiteRT, ONNX and OpenVINO exports, float and int8.

The suite's tiny classifier (tests/eval_bench_fixtures.py) is exported, published to a stage once
per form, and each form gets its own loopback server; 64-image ``:predict`` requests go to the
servers in turns (one each per round, a pause between), so a busy neighbour slows them alike.
Prints images/s and the ratio to the SavedModel's; no timing is asserted, only that the forms
agree on the top-1 class.
"""

import base64
import contextlib
import shutil
import statistics
import time

import pytest

pytestmark = pytest.mark.benchmark

FORMATS = ("litert", "litert_int8", "onnx", "onnx_int8", "openvino", "openvino_int8")
BATCH = 64
ROUNDS = 30


def test_bench_serving_formats_rest_path(tmp_path):
    from components.export import run as export_run
    from components.export.config import ExportConfig
    from components.serving.checks import http_json
    from components.serving.portable import publish_format
    from components.serving.server import ModelServer
    from components.serving.stages import StageRegistry
    from tests.eval_bench_fixtures import tiny_assets
    from trainer.evaluate import read_encoded_split

    assets = tiny_assets()
    model = tmp_path / "model"
    shutil.copytree(assets["model"], model)
    export_run.run_export(str(model), assets["dataset"], ExportConfig(export_formats=FORMATS), log=lambda line: None)
    encoded = read_encoded_split(assets["dataset"], "test", BATCH)[0]
    body = {"instances": [{"b64": base64.b64encode(e).decode()} for e in (encoded * BATCH)[:BATCH]]}
    stages = StageRegistry(str(tmp_path / "stages"))
    urls, took, top1 = {}, {}, {}
    with contextlib.ExitStack() as stack:
        for form in ("saved_model", *FORMATS):
            name = form.replace("_", "-")
            version = stages.publish(str(model / "saved_model"), "demo", name, form)
            publish_format(
                stages.version_path("demo", name, version), form, [str(model / "export")], "classification", {}, None
            )
            server = stack.enter_context(ModelServer(stages.model_base_path("demo", name), "m"))
            urls[form], took[form] = f"{server.url}/v1/models/m:predict", []
        for round_ in range(ROUNDS + 1):  # the first round warms up
            for form, url in urls.items():
                time.sleep(0.05)
                start = time.perf_counter()
                status, answer = http_json("POST", url, body)
                assert status == 200, answer
                if round_:
                    took[form].append(time.perf_counter() - start)
                top1[form] = [p["classes"] for p in answer["predictions"]]
    base = BATCH / statistics.median(took["saved_model"])
    print(f"\nlocal model server, {BATCH} images per :predict, {ROUNDS} rounds in turns:")
    for form, times in took.items():
        rate = BATCH / statistics.median(times)
        agree = sum(a == b for a, b in zip(top1[form], top1["saved_model"], strict=True)) / BATCH
        print(f"  {form:12s} {rate:8,.0f} images/s  {rate / base:5.2f}x the SavedModel  top-1 agreement {agree:.3f}")
    assert all(top1[f] == top1["saved_model"] for f in ("litert", "onnx", "openvino"))
