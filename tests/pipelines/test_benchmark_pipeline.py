"""The benchmark pipeline: compiles with an accelerator request per fan-out task; runs under kfp.local."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kfp import compiler

from pipelines import benchmark


def _load(path):
    """The pipeline spec and the platform spec (kfp.kubernetes settings), two YAML documents."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs[0], docs[1]


def _compile(tmp_path, func):
    path = tmp_path / "p.yaml"
    compiler.Compiler().compile(func, str(path))
    return _load(path)


def _exec(spec, prefix):
    execs = spec["deploymentSpec"]["executors"]
    return [v for k, v in execs.items() if k.startswith(prefix)]


def test_fan_out_task_requests_its_accelerator_at_run_time(tmp_path):
    spec, platform = _compile(tmp_path, benchmark.pipeline)
    (bench,) = _exec(spec, "exec-benchmark-inference")
    acc = bench["container"]["resources"]["accelerator"]
    # the KFP driver resolves these from the loop entry into resources.limits (empty type: none)
    assert acc["resourceType"] == "{{$.inputs.parameters['pipelinechannel--accelerator_type']}}"
    assert acc["resourceCount"] == "{{$.inputs.parameters['pipelinechannel--accelerator_count']}}"
    # every placeholder refers to an input the enclosing DAG defines (a bare loop item would not)
    branch = spec["components"]["comp-benchmark-on-accelerator"]
    task_inputs = branch["dag"]["tasks"]["benchmark-inference"]["inputs"]["parameters"]
    for name in ("pipelinechannel--accelerator_type", "pipelinechannel--accelerator_count"):
        assert task_inputs[name]["componentInputParameter"] in branch["inputDefinitions"]["parameters"]
    # the loop feeds each entry's fields to the branch
    loop = spec["components"]["comp-for-loop-1"]["dag"]["tasks"]["benchmark-on-accelerator"]["inputs"]["parameters"]
    assert loop["accelerator_type"]["parameterExpressionSelector"] == 'parseJson(string_value)["accelerator_type"]'
    # the default entries: a TPU v2-8, one GPU, CPU
    default = spec["root"]["inputDefinitions"]["parameters"]["accelerators_to_try"]["defaultValue"]
    assert [(e["accelerator_type"], e["accelerator_count"]) for e in default] == [
        ("cloud-tpus.google.com/v2", "8"),
        ("nvidia.com/gpu", "1"),
        ("", "0"),
    ]
    # the TPU Node path needs the TF version annotation; timings are never cached
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-benchmark-inference"]
    assert "tf-version.cloud-tpus.google.com" in k8s["podMetadata"]["annotations"]
    assert branch["dag"]["tasks"]["benchmark-inference"]["cachingOptions"] == {}
    # the join collects every branch
    join = spec["root"]["dag"]["tasks"]["join-benchmarks"]["inputs"]["parameters"]["results"]
    assert join["taskOutputParameter"]["producerTask"] == "for-loop-1"


def test_pipeline_modules_do_not_import_tensorflow():
    code = (
        "import sys, pipelines.benchmark, pipelines.gpu_vs_tpu; "
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])


@pytest.mark.slow
@pytest.mark.integration
def test_runs_locally_over_cpu_entries(tmp_path):
    from kfp import local

    from tests.eval_bench_fixtures import tiny_assets

    assets = tiny_assets()
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path))
    benchmark.pipeline(
        model_uri=assets["model"],
        dataset_uri=assets["dataset"],
        accelerators_to_try=benchmark.LOCAL_ACCELERATORS,
        num_images=128,
        batch_size=32,
        http=False,  # the served path is covered by the component test; keep this run short
    )
    (report,) = tmp_path.glob("benchmark-*/join-benchmarks/report")
    text = report.read_text()
    assert "| CPU, 2 cores | 2 |" in text or "| **CPU, 2 cores** | 2 |" in text
    assert "CPU, 8 cores" in text and "fastest" in text and "cheapest" in text
    assert "128 images in batches of 32" in text
    (chart,) = tmp_path.glob("benchmark-*/join-benchmarks/chart")
    assert chart.read_text().count("<svg") == 2
