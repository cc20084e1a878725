"""The tfrecords fan-out pipeline: compiles without TensorFlow, and runs under kfp.local."""

import json
import os
import subprocess
import sys

import pytest
import yaml


def test_pipeline_compiles_fast_without_tensorflow(tmp_path):
    code = (
        "import sys; from kfp import compiler; from pipelines.tfrecords import pipeline; "
        f"compiler.Compiler().compile(pipeline, {str(tmp_path / 'p.yaml')!r}); "
        "assert 'tensorflow' not in sys.modules, 'pipelines must not import TensorFlow'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    spec = next(yaml.safe_load_all((tmp_path / "p.yaml").read_text()))  # the platform spec follows
    assert spec["pipelineInfo"]["name"] == "tfrecords"
    dag = spec["root"]["dag"]["tasks"]
    loop = next(t for t in dag.values() if "parameterIterator" in t)
    assert loop["parameterIterator"]["items"]["inputParameter"].endswith("plan-tfrecords-Output")
    assert "for-loop" in " ".join(dag)
    assert set(dag["finalize-tfrecords"]["dependentTasks"]) >= {
        "plan-tfrecords",
        next(k for k in dag if "for-loop" in k),
    }
    executors = spec["deploymentSpec"]["executors"]
    assert all("lean-tpu-pipelines" in e["container"]["image"] for e in executors.values())
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["source"]["defaultValue"] == "fashion-mnist"
    assert params["parallelism"]["defaultValue"] == 4


@pytest.fixture(scope="module")
def fanout(tmp_path_factory):
    """The fan-out pipeline's run under kfp.local: its output Dataset and the pipeline root."""
    import kfp.local

    from pipelines.tfrecords import pipeline

    root = tmp_path_factory.mktemp("fanout") / "root"
    kfp.local.init(runner=kfp.local.SubprocessRunner(use_venv=False), pipeline_root=str(root))
    run = pipeline(source="digits", limit_per_split=30, target_shard_mb=0.003, parallelism=2, workers=1, verify=False)
    return run.output, root


@pytest.mark.slow
def test_fanout_runs_under_kfp_local_and_equals_a_single_pod_conversion(tmp_path, fanout):
    from components.convert import convert
    from components.convert.config import ConvertConfig

    ds, _ = fanout
    manifest = json.load(open(os.path.join(ds.path, "dataset.json")))
    assert ds.metadata["counts"] == {"train": 30, "validation": 30, "test": 30}
    shards = {s["file"]: s["crc32c"] for v in manifest["splits"].values() for s in v["shards"]}
    assert len(shards) >= 3
    assert not os.path.exists(os.path.join(ds.path, "_convert"))
    single = convert(ConvertConfig(source="digits", limit_per_split=30, target_shard_mb=0.003), str(tmp_path / "one"))
    assert shards == {s["file"]: s["crc32c"] for v in single["splits"].values() for s in v["shards"]}


@pytest.mark.slow
def test_the_fanout_dataset_trains_evaluates_benchmarks_and_promotes(tmp_path, fanout):
    # The fan-out pipeline publishes a pointer dataset.json (its shards stay where the pods wrote
    # them); every consumer must find the shards through the one reader, trainer.tfrecords.
    from components.benchmark.config import BenchmarkConfig
    from components.benchmark.run import run_benchmark
    from components.evaluate.run import run_evaluation
    from components.promote.run import promote
    from components.serving.config import PromoteConfig
    from trainer.config import EvaluateConfig, TrainConfig
    from trainer.train import train

    # kfp.local follows the finalize step's changed artifact URI to the shards; an orchestrator that
    # keeps the original URI gets the step's own folder, holding only the pointer manifest.
    ds, root = fanout
    (pointer_path,) = [p.parent for p in root.rglob("dataset.json") if "shards_dir" in json.loads(p.read_text())]
    dataset = str(pointer_path)
    assert not list(pointer_path.glob("*.tfrecord")) and json.loads((pointer_path / "dataset.json").read_text())[
        "shards_dir"
    ] == ds.path.rstrip("/")
    model_dir = str(tmp_path / "model")
    summary = train(dataset, model_dir, TrainConfig(epochs=2, batch_size_per_replica=10, learning_rate=0.01))
    assert summary.steps == 6 and summary.val_loss is not None
    evaluation = run_evaluation(model_dir, dataset, EvaluateConfig(value_thresholds={"accuracy": 0.0}))
    assert evaluation.metrics["num_examples"] == 30 and evaluation.decision.blessed
    row = run_benchmark(model_dir, dataset, BenchmarkConfig(num_images=40, batch_size=20, rounds=1))
    assert row.timing.num_images == 40 and row.http.num_images == 40
    result = promote(
        model_dir,
        dataset,
        PromoteConfig(stages_root=str(tmp_path / "stages"), model_name="digits", min_smoke_accuracy=0.0),
        run_id="pointer",
    )
    assert result.version == 1 and {c.name: c.passed for c in result.checks}["prediction"]


def test_a_pointer_manifest_leads_to_the_shards(tmp_path):
    from components.convert.config import ConvertConfig
    from components.convert.run import finalize_step, plan_step, shards_step
    from trainer.tfrecords import load_dataset_info

    staged, pointer = str(tmp_path / "staged"), str(tmp_path / "pointer")
    ranges = plan_step(ConvertConfig(source="digits", limit_per_split=10, workers=1), staged, parts=2)
    for r in ranges:
        shards_step(staged, r["start"], r["stop"])
    finalize_step(staged, verify=False, pointer=pointer)
    paths = load_dataset_info(pointer).shard_paths("train")
    assert paths == [f"{staged}/train-00000-of-00001.tfrecord"] and os.path.exists(paths[0])
