"""The main pipeline, whole, under kfp.local: the very YAML-compiled steps, each in a subprocess.

One run on a tiny real Fashion-MNIST subset (the demo data of ``make run``), through prod, then
assertions on what it left: shards that read back, metrics in range, servers that answered.
"""

import json
import os
from pathlib import Path

import pytest

from pipelines import run_local

pytestmark = [pytest.mark.slow, pytest.mark.integration]

FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    from kfp import local

    from pipelines import end_to_end

    if not FASHION_MNIST.is_dir():
        pytest.fail("the demo data is missing: run 'make data' (Debian package dataset-fashion-mnist)")
    root = tmp_path_factory.mktemp("pipeline_root")
    stages_root = root / "stages"
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root), raise_on_error=True)
    end_to_end.pipeline(
        source="fashion-mnist",
        limit_per_split=400,
        epochs=1,
        steps_per_epoch=80,
        batch_size_per_replica=64,
        # Low enough for 80 steps of training to pass, so the gated branches run too.
        value_thresholds={"accuracy": 0.3},
        change_thresholds={},
        benchmark_images=256,
        benchmark_batch_size=64,
        stages_root=str(stages_root),
        promote_to_prod=True,
    )
    run_dir = run_local.latest_run_dir(root, end_to_end.NAME, 0)
    return run_dir, stages_root, run_local.task_outputs(run_dir)


def _task(outputs, prefix):
    matches = [name for name in outputs if name.startswith(prefix)]
    assert matches, f"no task {prefix}* in {sorted(outputs)}"
    return outputs[sorted(matches)[0]]


def test_shards_exist_and_read_back_with_tf_data(local_run):
    import tensorflow as tf

    from trainer import tfrecords

    run_dir, _, _ = local_run
    dataset_dir = next(run_dir.glob("convert-to-tfrecords*/dataset"))
    manifest = tfrecords.load_manifest(str(dataset_dir))
    assert set(manifest["splits"]) >= {"train", "test"}
    for split, info in manifest["splits"].items():
        paths = [str(dataset_dir / s["file"]) for s in info["shards"]]
        assert all(os.path.getsize(p) > 0 for p in paths)
        count = sum(1 for _ in tf.data.TFRecordDataset(paths, compression_type=manifest.get("compression") or ""))
        assert count == info["count"] <= 400, split


def test_training_and_evaluation_metrics_are_in_range(local_run):
    _, _, outputs = local_run
    train = _task(outputs, "train-model")["metrics"]
    assert train["images_per_sec"] > 0
    evaluation = _task(outputs, "evaluate-model")
    accuracy = evaluation["metrics"]["accuracy"]
    # 10 classes: chance is 0.1; 80 steps of the notebook's CNN get well above it.
    assert 0.3 <= accuracy <= 1.0
    assert evaluation["parameters"]["Output"] is True


def test_benchmark_timed_real_inference(local_run):
    _, _, outputs = local_run
    bench = _task(outputs, "benchmark-inference")["metrics"]
    assert bench["images_per_sec"] > 0
    assert bench["latency_p50_ms"] > 0


def test_every_stage_serves_the_model_after_its_smoke_tests_passed(local_run):
    from components.serving import stages

    run_dir, stages_root, outputs = local_run
    evaluated = _task(outputs, "evaluate-model")["metrics"]
    for stage in ("demo", "staging", "prod"):
        current = stages.read_current(str(stages_root), stage, "classifier")
        assert current is not None, f"{stage} serves nothing"
        # The evaluation's metrics travel with the model: prod's are the next run's gate baseline.
        assert current["metrics"]["accuracy"] == pytest.approx(evaluated["accuracy"])
        assert current["version"] >= 1
        history = stages.read_history(str(stages_root), stage, "classifier")
        assert history[-1]["version"] == current["version"]
        assert json.dumps(current["checks"])  # the smoke tests' record travels with the promotion


def test_summary_names_accuracy_speed_and_stages(local_run):
    run_dir, stages_root, _ = local_run
    text = run_local.summarize(run_dir, stages_root, "classifier")
    assert str(run_dir) in text
    assert "test accuracy:      0." in text
    assert "make serve" in text  # how to look at what the run promoted
    stage_lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ")}
    for stage in ("demo", "staging", "prod"):
        assert "classifier version" in stage_lines[stage], text
