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
    spec = yaml.safe_load((tmp_path / "p.yaml").read_text())
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


@pytest.mark.slow
def test_fanout_runs_under_kfp_local_and_equals_a_single_pod_conversion(tmp_path):
    import kfp.local

    from components.convert import convert
    from pipelines.tfrecords import pipeline
    from trainer.config import ConvertConfig

    kfp.local.init(runner=kfp.local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    run = pipeline(source="digits", limit_per_split=30, target_shard_mb=0.003, parallelism=2, workers=1, verify=False)
    ds = run.output
    manifest = json.load(open(os.path.join(ds.path, "dataset.json")))
    assert ds.metadata["counts"] == {"train": 30, "validation": 30, "test": 30}
    shards = {s["file"]: s["crc32c"] for v in manifest["splits"].values() for s in v["shards"]}
    assert len(shards) >= 3
    assert not os.path.exists(os.path.join(ds.path, "_convert"))
    single = convert(ConvertConfig(source="digits", limit_per_split=30, target_shard_mb=0.003), str(tmp_path / "one"))
    assert shards == {s["file"]: s["crc32c"] for v in single["splits"].values() for s in v["shards"]}


def test_a_pointer_manifest_leads_to_the_shards(tmp_path):
    from components.convert.step import finalize_step, plan_step, shards_step
    from trainer.config import ConvertConfig
    from trainer.tfrecords import load_manifest, shard_paths

    staged, pointer = str(tmp_path / "staged"), str(tmp_path / "pointer")
    ranges = plan_step(ConvertConfig(source="digits", limit_per_split=10, workers=1), staged, parts=2)
    for r in ranges:
        shards_step(staged, r["start"], r["stop"])
    finalize_step(staged, verify=False, pointer=pointer)
    paths = shard_paths(pointer, "train", load_manifest(pointer))
    assert paths == [f"{staged}/train-00000-of-00001.tfrecord"] and os.path.exists(paths[0])
