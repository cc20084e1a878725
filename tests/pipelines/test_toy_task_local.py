"""The toy task (tests/toy_task.py) through the project's own steps under kfp.local, each a subprocess.

``LTP_EXTENSIONS=tests.toy_task`` is all it takes: every step's subprocess finds the task and its
source kind in the registries. The convert step turns the toy's built-in source
``brightness:<count>`` into records whose ``dataset.json`` says ``task: brightness``; train,
evaluate, benchmark, promotion and the report read the task from there, as for any dataset.
"""

import json
from pathlib import Path

import pytest
from kfp import dsl, local

from components.benchmark.component import benchmark_inference
from components.convert.component import convert_to_tfrecords
from components.evaluate.component import evaluate_model
from components.promote.component import promote_model
from components.report.component import build_report
from components.train.component import train_model
from trainer.extensions import EXTENSIONS_ENV

pytestmark = pytest.mark.slow


@dsl.pipeline(name="toy-task")
def toy_pipeline(source: str, stages_root: str):
    converted = convert_to_tfrecords(source=source, workers=1)
    dataset = converted.outputs["dataset"]
    trained = train_model(
        dataset=dataset, model_name="tiny", epochs=1, steps_per_epoch=4, batch_size_per_replica=16, accelerator="cpu"
    ).outputs["model"]
    evaluated = evaluate_model(
        model=trained,
        dataset=dataset,
        value_thresholds={"mae": 0.9},
        change_thresholds={},
        stages_root=stages_root,
        pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
        served_model_name="brightness",
    )
    benchmarked = benchmark_inference(
        model=trained, dataset=dataset, num_images=32, batch_size=16, http=False, warmup_batches=1
    )
    demo = promote_model(
        model=trained,
        dataset=dataset,
        evaluation=evaluated.outputs["metrics"],
        stage="demo",
        stages_root=stages_root,
        pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
        model_name="brightness",
        run_id="toy-run",
    ).after(benchmarked)
    build_report(
        dataset=dataset,
        model=trained,
        evaluation=evaluated.outputs["metrics"],
        confusion=evaluated.outputs["confusion"],
        blessing=evaluated.outputs["blessing"],
        samples=evaluated.outputs["samples"],
        benchmark=benchmarked.outputs["Output"],
        stages_root=stages_root,
        pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
        run_id="toy-run",
    ).after(demo)


def test_the_toy_task_runs_through_convert_train_evaluate_benchmark_promote_and_report(tmp_path, monkeypatch):
    monkeypatch.setenv(EXTENSIONS_ENV, "tests.toy_task")
    root, stages = tmp_path / "root", tmp_path / "stages"
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(root),
        workspace_root=str(tmp_path / "workspace"),
        raise_on_error=True,
    )
    toy_pipeline(source="brightness:200", stages_root=str(stages))
    manifest = json.loads(next(root.rglob("convert-to-tfrecords/dataset/dataset.json")).read_text())
    assert manifest["task"] == "brightness" and manifest["source"]["format"] == "brightness"
    assert manifest["classes"] == ["dark", "bright"] and sum(s["count"] for s in manifest["splits"].values()) == 200
    current = json.loads(next(stages.rglob("current.json")).read_text())
    assert "brightness" in json.dumps(current)
    evaluation = [json.loads(p.read_text()) for p in root.rglob("evaluate-model/executor_output.json")]
    metrics = evaluation[0]["artifacts"]["metrics"]["artifacts"][0]["metadata"]
    assert 0 <= metrics["mae"] <= 1 and metrics["num_examples"] == manifest["splits"]["test"]["count"]
    report = next(Path(root).rglob("build-report/report"))
    page = report.read_text() if report.is_file() else next(report.rglob("*")).read_text()
    assert "test MAE" in page and "brightness" in page
