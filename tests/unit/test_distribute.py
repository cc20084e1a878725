"""Accelerator detection: TPU signs in the environment, explicit demands that cannot be met."""

import pytest

from trainer import distribute
from trainer.distribute import AcceleratorNotFoundError, TpuAddress, find_tpu


def test_legacy_tpu_node_endpoint_wins(tmp_path):
    env = {"KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS": "grpc://10.0.0.2:8470", "TPU_NAME": "other"}
    assert find_tpu(env, str(tmp_path)) == TpuAddress(None, "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS (GKE TPU Node)")


def test_tpu_name(tmp_path):
    assert find_tpu({"TPU_NAME": "my-tpu"}, str(tmp_path)).tpu == "my-tpu"


def test_tpu_vm_devices(tmp_path):
    (tmp_path / "accel0").touch()
    assert find_tpu({}, str(tmp_path)).tpu == "local"


def test_gke_tpu_vm_environment(tmp_path):
    assert find_tpu({"TPU_ACCELERATOR_TYPE": "v5litepod-8"}, str(tmp_path)).tpu == "local"


def test_no_tpu(tmp_path):
    (tmp_path / "null").touch()
    assert find_tpu({"PATH": "/bin"}, str(tmp_path)) is None


def test_cpu_defaults_avoid_what_is_slow_here():
    cpu = distribute.DEFAULTS["cpu"]
    assert cpu.jit_compile is False and cpu.drop_remainder is False
    tpu = distribute.DEFAULTS["tpu"]
    assert tpu.drop_remainder and tpu.steps_per_execution > 1


@pytest.fixture
def no_tpu_env(monkeypatch):
    for name in ("KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS", "TPU_NAME", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(distribute, "find_tpu", lambda: None)  # this machine's /dev has no TPU anyway


def test_auto_on_this_machine_is_cpu(no_tpu_env):
    strategy = distribute.get_strategy("auto")
    assert strategy.num_replicas_in_sync == 1
    assert distribute.accelerator_kind(strategy) == "cpu"


def test_tpu_asked_and_absent_is_an_error(no_tpu_env):
    with pytest.raises(AcceleratorNotFoundError, match="'tpu' was asked for but no TPU was found"):
        distribute.get_strategy("tpu")


def test_gpu_asked_and_absent_is_an_error(no_tpu_env):
    with pytest.raises(AcceleratorNotFoundError, match="'gpu' was asked for but TensorFlow sees no GPU"):
        distribute.get_strategy("gpu")


def test_unknown_accelerator():
    with pytest.raises(ValueError, match="expected one of auto, tpu, gpu, cpu, got 'tpu-v9'"):
        distribute.get_strategy("tpu-v9")
