"""Accelerator presets compiled into YAML: limits, annotations, selectors, tolerations, retries.

KFP validates none of these strings, so each test compiles a pipeline and reads the YAML.
"""

import pytest
import yaml
from kfp import compiler, dsl

from components.images import TF_VERSION
from components.train.component import train_model
from pipelines import accelerators


def _compile(tmp_path, configure, params=None):
    def body(**kwargs):
        dataset = dsl.importer(artifact_uri="gs://bucket/ds", artifact_class=dsl.Dataset).output
        configure(train_model(dataset=dataset), **kwargs)

    if params is None:

        @dsl.pipeline(name="accel")
        def pipeline():
            body()

    else:

        @dsl.pipeline(name="accel")
        def pipeline(accelerator_type: str = "cloud-tpus.google.com/v2", accelerator_count: int = 8):
            body(accelerator_type=accelerator_type, accelerator_count=accelerator_count)

    path = tmp_path / "p.yaml"
    compiler.Compiler().compile(pipeline, str(path))
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    spec, platform = docs[0], (docs[1] if len(docs) > 1 else {})
    task = spec["root"]["dag"]["tasks"]["train-model"]
    resources = spec["deploymentSpec"]["executors"]["exec-train-model"]["container"].get("resources", {})
    k8s = platform.get("platforms", {}).get("kubernetes", {}).get("deploymentSpec", {}).get("executors", {})
    return task, resources, k8s.get("exec-train-model", {}), spec


def test_default_preset_is_a_tpu_v2_8_with_the_tf_version_annotation(tmp_path):
    task, res, k8s, _ = _compile(tmp_path, accelerators.apply_preset)
    assert res["accelerator"]["resourceType"] == "cloud-tpus.google.com/v2"
    assert res["accelerator"]["resourceCount"] == "8"
    assert k8s["podMetadata"]["annotations"] == {"tf-version.cloud-tpus.google.com": TF_VERSION}
    assert res["resourceCpuRequest"] == "4" and res["resourceMemoryRequest"] == "16Gi"
    assert task["retryPolicy"]["maxRetryCount"] == 3
    assert task["retryPolicy"]["backoffDuration"] == "60s"
    # Only succeeded tasks are cached, and the step succeeds only after export: caching stays on.
    assert task["cachingOptions"]["enableCache"] is True
    assert "nodeSelector" not in k8s and "tolerations" not in k8s


@pytest.mark.parametrize(
    "preset, resource",
    [
        ("tpu-v3-8", "cloud-tpus.google.com/v3"),
        ("preemptible-v2-8", "cloud-tpus.google.com/preemptible-v2"),
        ("preemptible-v3-8", "cloud-tpus.google.com/preemptible-v3"),
    ],
)
def test_legacy_tpu_presets(tmp_path, preset, resource):
    task, res, k8s, _ = _compile(tmp_path, lambda t: accelerators.apply_preset(t, preset))
    assert (res["accelerator"]["resourceType"], res["accelerator"]["resourceCount"]) == (resource, "8")
    assert k8s["podMetadata"]["annotations"]["tf-version.cloud-tpus.google.com"] == TF_VERSION
    assert task["retryPolicy"]["maxRetryCount"] == 3


@pytest.mark.parametrize(
    "preset, label, topology, chips",
    [
        ("gke-tpu-v5e-2x4", "tpu-v5-lite-podslice", "2x4", "8"),
        ("gke-tpu-v5e-1x1", "tpu-v5-lite-podslice", "1x1", "1"),
        ("gke-tpu-v4-2x2x1", "tpu-v4-podslice", "2x2x1", "4"),
        ("gke-tpu-v6e-2x2", "tpu-v6e-slice", "2x2", "4"),
    ],
)
def test_gke_tpu_slices(tmp_path, preset, label, topology, chips):
    task, res, k8s, _ = _compile(tmp_path, lambda t: accelerators.apply_preset(t, preset))
    assert (res["accelerator"]["resourceType"], res["accelerator"]["resourceCount"]) == ("google.com/tpu", chips)
    assert k8s["nodeSelector"]["labels"] == {
        "cloud.google.com/gke-tpu-accelerator": label,
        "cloud.google.com/gke-tpu-topology": topology,
    }
    assert k8s["tolerations"] == [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert "podMetadata" not in k8s  # the legacy annotation is for cloud-tpus.google.com only
    assert task["retryPolicy"]["maxRetryCount"] == 3


def test_gke_tpu_spot(tmp_path):
    _, _, k8s, _ = _compile(tmp_path, lambda t: accelerators.apply_preset(t, "gke-tpu-v5e-2x2-spot"))
    assert k8s["nodeSelector"]["labels"]["cloud.google.com/gke-spot"] == "true"


def test_gpu_presets(tmp_path):
    task, res, k8s, _ = _compile(tmp_path, lambda t: accelerators.apply_preset(t, "gpu-4-nvidia-tesla-v100"))
    assert (res["accelerator"]["resourceType"], res["accelerator"]["resourceCount"]) == ("nvidia.com/gpu", "4")
    assert k8s["nodeSelector"]["labels"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-v100"}
    assert res["resourceCpuRequest"] == "16" and res["resourceMemoryRequest"] == "64Gi"
    assert task["retryPolicy"]["maxRetryCount"] == 1


def test_cpu_preset_has_limits_and_no_accelerator(tmp_path):
    _, res, k8s, _ = _compile(tmp_path, lambda t: accelerators.apply_preset(t, "cpu"))
    assert "accelerator" not in res
    assert res["resourceCpuLimit"] == res["resourceCpuRequest"] == "8"
    assert res["resourceMemoryLimit"] == res["resourceMemoryRequest"] == "16Gi"
    assert k8s == {}


def test_runtime_parameters_compile_to_placeholders(tmp_path):
    task, res, k8s, spec = _compile(tmp_path, accelerators.set_accelerator, params=True)
    assert res["accelerator"]["resourceType"] == "{{$.inputs.parameters['pipelinechannel--accelerator_type']}}"
    assert res["accelerator"]["resourceCount"] == "{{$.inputs.parameters['pipelinechannel--accelerator_count']}}"
    inputs = spec["root"]["inputDefinitions"]["parameters"]
    assert inputs["accelerator_type"]["defaultValue"] == accelerators.DEFAULT_ACCELERATOR_TYPE
    assert inputs["accelerator_count"]["defaultValue"] == accelerators.DEFAULT_ACCELERATOR_COUNT
    assert k8s["podMetadata"]["annotations"] == {"tf-version.cloud-tpus.google.com": TF_VERSION}
    assert task["retryPolicy"]["maxRetryCount"] == 3


def test_literal_set_accelerator(tmp_path):
    _, res, _, _ = _compile(tmp_path, lambda t: accelerators.set_accelerator(t, "nvidia.com/gpu", 2))
    assert (res["accelerator"]["resourceType"], res["accelerator"]["resourceCount"]) == ("nvidia.com/gpu", "2")


@pytest.mark.parametrize(
    "preset, message",
    [
        ("tpu-v9-8", "unknown 'tpu-v9-8'"),
        ("gke-tpu-v5e-4x4", "more than one v5e host"),
        ("gke-tpu-v7x-2x2", "unknown TPU type 'v7x'"),
        ("gke-tpu-v5e", "is not gke-tpu-<type>-<topology>"),
        ("gpu-0", "n >= 1"),
    ],
)
def test_bad_presets(preset, message):
    with pytest.raises(ValueError, match=message):
        accelerators.get_preset(preset)


def test_every_listed_preset_is_consistent():
    for name, preset in accelerators.PRESETS.items():
        assert preset.name == name
        assert (preset.accelerator_type is None) == (name == "cpu")
