"""A third task from outside trainer/ (tests/toy_task.py) goes through every step untouched by it.

``LTP_TASK_MODULES=tests.toy_task`` registers it; nothing outside tests/ names it. Its dataset is
written the way the converter writes classification records, its ``dataset.json`` naming the
toy task (the converter picks a dataset's task from its source kind and has no toy source).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.train_datasets import write_dataset
from trainer.tasks import TASK_MODULES_ENV

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_a_subprocess_sees_the_task_only_when_the_registry_is_looked_up():
    code = (
        "import sys\n"
        "import trainer.config, trainer.tasks\n"
        "assert 'tests.toy_task' not in sys.modules  # importing is not looking up\n"
        "from trainer.tasks import get_task, task_names\n"
        "print(task_names(), get_task('brightness', {'hidden': 2.0}).options.hidden)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), TASK_MODULES_ENV: "tests.toy_task"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['brightness',", "'classification',", "'detection']", "2"]


@pytest.fixture(scope="module")
def toy_dataset(tmp_path_factory):
    folder = write_dataset(tmp_path_factory.mktemp("toy") / "dataset", {"train": 64, "validation": 16, "test": 32})
    manifest = json.loads((folder / "dataset.json").read_text())
    (folder / "dataset.json").write_text(json.dumps({**manifest, "task": "brightness"}))
    return str(folder)


def test_train_evaluate_gate_benchmark_promote_and_report(toy_dataset, tmp_path, monkeypatch):
    monkeypatch.setenv(TASK_MODULES_ENV, "tests.toy_task")
    from components.benchmark.run import run_benchmark
    from components.evaluate.run import run_evaluation
    from components.promote.promote import promote
    from components.report.run import ReportInputs, render
    from trainer.config import BenchmarkConfig, EvaluateConfig, PromoteConfig, TrainConfig
    from trainer.train import train

    model_dir = str(tmp_path / "model")
    config = TrainConfig(model="tiny", epochs=1, steps_per_epoch=4, batch_size_per_replica=16, validation_steps=1)
    summary = train(toy_dataset, model_dir, config)
    assert summary.task == "brightness" and summary.train_accuracy is None

    outcome = run_evaluation(model_dir, toy_dataset, EvaluateConfig(value_thresholds={"mae": 0.9}))
    assert outcome.task == "brightness" and outcome.metrics["num_examples"] == 32
    assert outcome.decision.blessed and outcome.confusion is None
    assert "# Brightness evaluation (test)" in outcome.report and "MAE" in outcome.page

    row = run_benchmark(
        model_dir, toy_dataset, BenchmarkConfig(num_images=32, batch_size=16, warmup_batches=1, rounds=1, http=False)
    )
    assert row.timing.images_per_sec > 0 and row.timing.num_images == 32

    stages = str(tmp_path / "stages")
    result = promote(
        model_dir,
        toy_dataset,
        PromoteConfig(stage="demo", stages_root=stages, model_name="brightness", smoke_examples=4,
                      min_smoke_accuracy=0.0),
        run_id="toy-run",
        metrics=outcome.metrics,
    )  # fmt: skip
    assert result.stage == "demo" and result.version == 1

    page = render(
        ReportInputs(run="toy-run", model_dir=model_dir, evaluation=outcome.metrics, blessing=outcome.blessing,
                     benchmark=row.summary().to_dict(), stages_root=stages)
    )  # fmt: skip
    assert "test MAE" in page and "serves brightness version 1" in page
