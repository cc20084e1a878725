"""The TPU preflight of make submit against the fake Kubernetes API: the nodes of three clusters.

A cluster with the legacy TPU Node resource (a node advertising ``cloud-tpus.google.com/v2``),
one with only TPU VM node pools (nodes labelled ``cloud.google.com/gke-tpu-accelerator``), and one
with no TPU; the compiled pipelines read back from their YAML, the nodes through the real
``kubernetes`` client from a kubeconfig.
"""

import contextlib

import pytest
import yaml

from pipelines.tools import preflight
from pipelines.tools.compile import compile_pipeline
from tests.integration.fake_kube_api import FakeKubeAPI

pytestmark = pytest.mark.integration


def _node(name, labels=None, allocatable=None):
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", **(allocatable or {})}},
    }


LEGACY = [_node("default-1"), _node("default-2", allocatable={"cloud-tpus.google.com/v2": "2000"})]
TPU_VM = [
    _node("default-1"),
    _node(
        "tpu-1",
        {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice", "cloud.google.com/gke-tpu-topology": "2x4"},
        {"google.com/tpu": "8"},
    ),
]
NO_TPU = [
    _node("default-1"),
    _node("gpu-1", {"cloud.google.com/gke-accelerator": "nvidia-l4"}, {"nvidia.com/gpu": "1"}),
]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    out = {}
    for preset in (None, "gke-tpu-v5e-2x4"):
        path = compile_pipeline("end_to_end", tmp_path_factory.mktemp("compiled"), preset=preset)
        spec, platform_spec = list(yaml.safe_load_all(path.read_text()))
        out[preset] = (spec, platform_spec["platforms"]["kubernetes"])
    return out


@contextlib.contextmanager
def _cluster(nodes, tmp_path, monkeypatch, deny=False):
    """A fake API server with these nodes, the kubeconfig pointing at it."""
    with FakeKubeAPI.running() as fake:
        fake.add_cluster_objects("nodes", nodes)
        if deny:
            fake.deny_reads.add("nodes")
        monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(fake.url, tmp_path)))
        yield fake


def _kubeconfig(url, tmp_path):
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "tester", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester"}}],
        "current-context": "fake",
    }
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    return tmp_path / "kubeconfig"


DEFAULTS = {"accelerator_type": "cloud-tpus.google.com/v2", "accelerator_count": 8}


def test_the_three_clusters(compiled, tmp_path, monkeypatch):
    legacy_spec, legacy_kube = compiled[None]
    vm_spec, vm_kube = compiled["gke-tpu-v5e-2x4"]
    for nodes, legacy_ok, vm_ok, why in (
        (LEGACY, True, False, "no TPU VM node pool"),
        (TPU_VM, False, True, "make compile ACCELERATOR=gke-tpu-v5e-2x4"),
        (NO_TPU, False, False, "no node is in a TPU VM node pool"),
    ):
        with _cluster(nodes, tmp_path, monkeypatch):
            list_nodes = preflight.kube_nodes()
            for spec, kube, ok in ((legacy_spec, legacy_kube, legacy_ok), (vm_spec, vm_kube, vm_ok)):
                if ok:
                    assert preflight.check(spec, kube, DEFAULTS, list_nodes) == []
                    continue
                with pytest.raises(preflight.PreflightError) as err:
                    preflight.check(spec, kube, DEFAULTS, list_nodes)
                assert "exec-train-model asks for" in str(err.value) and len(str(err.value).splitlines()) == 1
            with pytest.raises(preflight.PreflightError, match=why):
                preflight.check(
                    *(compiled[None] if not legacy_ok else compiled["gke-tpu-v5e-2x4"]), DEFAULTS, list_nodes
                )
            # a run on the CPU or a GPU asks for no TPU: nothing to check, whatever the cluster
            cpu = {"accelerator_type": "", "accelerator_count": 0}
            assert preflight.check(legacy_spec, legacy_kube, cpu, lambda: pytest.fail("the nodes were read")) == []


def test_without_the_right_to_list_nodes_the_preflight_says_so_and_lets_the_run_go(compiled, tmp_path, monkeypatch):
    with _cluster(NO_TPU, tmp_path, monkeypatch, deny=True):
        notes = preflight.check(*compiled[None], DEFAULTS, preflight.kube_nodes())
    assert len(notes) == 1 and "preflight skipped" in notes[0] and "ClusterRole with list on nodes" in notes[0]
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    notes = preflight.check(*compiled[None], DEFAULTS, preflight.kube_nodes())
    assert len(notes) == 1 and "the kubeconfig cannot be loaded" in notes[0]
