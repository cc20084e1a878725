"""The gpu_vs_tpu pipeline: per-accelerator resource requests in the YAML; the sweep under kfp.local."""

import pytest
import yaml
from kfp import compiler

from pipelines import gpu_vs_tpu


def _load(path):
    """The pipeline spec and the platform spec (kfp.kubernetes settings), two YAML documents."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs[0], docs[1]


def test_compiles_with_a_request_per_fan_out_task(tmp_path):
    path = tmp_path / "g.yaml"
    compiler.Compiler().compile(gpu_vs_tpu.pipeline, str(path))
    spec, platform = _load(path)
    sweep = spec["deploymentSpec"]["executors"]["exec-time-training-cell"]["container"]["resources"]
    assert sweep["accelerator"]["resourceType"] == "{{$.inputs.parameters['pipelinechannel--accelerator_type']}}"
    assert sweep["accelerator"]["resourceCount"] == "{{$.inputs.parameters['pipelinechannel--accelerator_count']}}"
    branch = spec["components"]["comp-gpu-vs-tpu-cell"]
    task_inputs = branch["dag"]["tasks"]["time-training-cell"]["inputs"]["parameters"]
    assert task_inputs["pipelinechannel--accelerator_type"]["componentInputParameter"] == "accelerator_type"
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert [e["accelerator"] for e in params["accelerators_to_try"]["defaultValue"]] == ["tpu-v2-8", "gpu-1", "cpu"]
    assert [e["strategy"] for e in params["accelerators_to_try"]["defaultValue"]] == ["tpu", "gpu", "cpu"]
    assert params["batch_sizes"]["defaultValue"] == [256, 512, 1024]
    # One cell per accelerator x batch size: the loop's items are the planned cells.
    loop = spec["components"]["comp-for-loop-1"]["dag"]["tasks"]["gpu-vs-tpu-cell"]["inputs"]["parameters"]
    assert loop["accelerator_type"]["parameterExpressionSelector"] == 'parseJson(string_value)["accelerator_type"]'
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-time-training-cell"]
    assert "tf-version.cloud-tpus.google.com" in k8s["podMetadata"]["annotations"]


@pytest.mark.slow
def test_runs_locally_on_cpu_with_few_steps(tmp_path):
    from kfp import local

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path))
    gpu_vs_tpu.pipeline(
        source="digits",
        accelerators_to_try=gpu_vs_tpu.LOCAL_ACCELERATORS,
        batch_sizes=[16, 32],
        epochs=2,
        steps_per_epoch=2,
    )
    (report,) = tmp_path.glob("gpu-vs-tpu-*/join-sweeps/report")
    text = report.read_text()
    assert "## Epoch time (s)" in text and "## Step time per example (us)" in text
    assert "| batch size | cpu |" in text
    assert "cpu, batch 32: ran on cpu, 2 steps (64 examples) per epoch" in text
    (chart,) = tmp_path.glob("gpu-vs-tpu-*/join-sweeps/chart")
    assert chart.read_text().count("<svg") == 2
