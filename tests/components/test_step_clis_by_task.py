"""Each step's command line on a classifier and on a detector, as a user runs it: the task decides.

``python -m components.convert`` on a COCO file and on a built-in classification source,
``python -m components.train`` for two steps, ``python -m components.benchmark inference`` and
``python -m components.promote promote`` on each task's tiny model (the session's: a classifier
from tests/eval_bench_fixtures.py, a detector from tests/detection_fixtures.py). Nothing names
the task on the command line except the model to train: the dataset's ``dataset.json`` and the
model's ``training.json`` say it. The runs call ``main()`` in process, as tests/components/
test_step_clis.py does (a subprocess would pay TensorFlow's import again); that file covers the
classifier's benchmark join, evaluate and sweep, tests/components/test_evaluate_cli.py evaluate
on both tasks.
"""

import json

import pytest
import yaml

from components.benchmark.__main__ import main as benchmark_main
from components.convert.__main__ import main as convert_main
from components.promote.__main__ import main as promote_main
from components.train.__main__ import main as train_main
from trainer.tasks import get_task

pytestmark = [pytest.mark.slow, pytest.mark.integration]

# The model each task trains, and the batch size two steps of it can afford on a CPU.
TRAINING = {"classification": ("mnist_cnn", 8), "detection": ("retinanet", 4)}


def _assets(task: str) -> dict[str, str]:
    """The task's tiny dataset and model folders (built once per test process)."""
    if task == "detection":
        from tests.detection_fixtures import tiny_detection

        return tiny_detection()
    from tests.eval_bench_fixtures import tiny_assets

    return tiny_assets()


def test_convert_writes_a_detection_dataset_from_a_coco_file(tmp_path, capsys):
    from components.image_input import shapes

    coco = shapes.generate(tmp_path / "coco", count=12, size=64, seed=3)
    out = tmp_path / "dataset"
    assert convert_main([str(coco), str(out), "--workers", "1", "--verify"]) == 0
    stdout = capsys.readouterr().out
    assert "verify: 12 records" in stdout and "kept" in stdout and "images without boxes" in stdout
    manifest = json.loads((out / "dataset.json").read_text())
    assert manifest["task"] == "detection" and manifest["source"]["format"] == "coco"
    assert sum(s["count"] for s in manifest["splits"].values()) == 12 and manifest["boxes"]["kept"] > 0
    # a detection source refuses a resize (it would cut the boxes): one line, exit 2, nothing written
    assert convert_main([str(coco), str(tmp_path / "resized"), "--resize", "32", "32"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: convert.resize [32, 32] with the detection source") and err.count("\n") == 1
    assert not (tmp_path / "resized" / "dataset.json").exists()


def test_convert_writes_a_classification_dataset_from_a_built_in_source(tmp_path, capsys):
    out = tmp_path / "dataset"
    assert convert_main(["digits", str(out), "--limit-per-split", "6", "--workers", "1"]) == 0
    assert "train=6, validation=6, test=6" in capsys.readouterr().out
    manifest = json.loads((out / "dataset.json").read_text())
    assert manifest["task"] == "classification" and manifest["classes"] == [str(i) for i in range(10)]
    assert "boxes" not in manifest or manifest["boxes"] is None


@pytest.mark.parametrize("task", ["classification", "detection"])
def test_train_runs_two_steps_of_the_dataset_s_task(task, tmp_path, capsys):
    model, batch = TRAINING[task]
    model_dir = tmp_path / "model"
    # no --model: the dataset's task says what it trains
    argv = ["--dataset", _assets(task)["dataset"], "--model-dir", str(model_dir)]
    argv += ["--epochs", "1", "--steps-per-epoch", "2", "--batch-size-per-replica", str(batch)]
    assert train_main([*argv, "--set", "validation_split=null"]) == 0
    stdout = capsys.readouterr().out
    summary = json.loads(stdout[stdout.index("{") :])  # the training summary, printed last
    assert summary["task"] == task and summary["steps"] == 2, summary
    training = json.loads((model_dir / "training.json").read_text())
    assert training["task"] == task and (model_dir / "saved_model" / "saved_model.pb").is_file()
    assert yaml.safe_load((model_dir / "config.yaml").read_text())["model"] == model


@pytest.mark.parametrize("task", ["classification", "detection"])
def test_benchmark_inference_times_the_task_s_model_in_process_and_served(task, tmp_path, capsys):
    assets = _assets(task)
    out = tmp_path / "bench"
    argv = ["inference", "--model-dir", assets["model"], "--dataset", assets["dataset"], "--output-dir", str(out)]
    assert benchmark_main([*argv, "--num-images", "16", "--batch-size", "8", "--warmup-batches", "1"]) == 0
    assert "served (REST, local Python server):" in capsys.readouterr().out
    row = json.loads((out / "row.json").read_text())
    assert row["num_images"] == 16 and row["in_process"]["num_batches"] == 2
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["images_per_sec"] > 0 and metrics["http_images_per_sec"] > 0


@pytest.mark.parametrize("task", ["classification", "detection"])
def test_promote_serves_the_task_s_model_in_demo(task, tmp_path, capsys):
    from components.serving import stages

    assets = _assets(task)
    root = str(tmp_path / "stages")
    # the tiny models are barely trained: the prediction check is asked for plumbing, not accuracy
    argv = ["promote", "--model-dir", assets["model"], "--dataset", assets["dataset"], "--stage", "demo"]
    argv += ["--stages-root", root, "--min-smoke-accuracy", "0", "--smoke-examples", "4"]
    assert promote_main([*argv, "--run-id", f"cli-{task}", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["version"] == 1 and result["action"] == "promote" and result["checks"]["prediction"]["passed"]
    # no --model-name: served under the task's name for its models (classifier, detector)
    name = get_task(task).run_defaults.served_model_name
    current = stages.StageRegistry(root).read_current("demo", name)
    assert current.run == f"cli-{task}" and stages.StageRegistry(root).list_versions("demo", name) == [1]
