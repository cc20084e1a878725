"""The KServe manifests: every overlay renders with `kubectl kustomize`, the kinds Kubernetes
knows validate strictly, the InferenceService starts TensorFlow Serving with its monitoring config
and the PodMonitor scrapes where that config exports, and the kserve target copies the overlay's
template per model."""

import re

import kubernetes_validate
import pytest

from components.serving.config import STAGES
from components.serving.targets.kserve import PODMONITOR, TEMPLATE_NAME, render_inference_service
from tests.unit.manifests.test_manifests_serving import KUBERNETES_VERSION, MANIFESTS, objects, one

FLAG = "--monitoring_config_file="


def kserve(stage):
    return objects(f"kserve/overlays/{stage}")


def isvc(stage):
    return one(kserve(stage), "InferenceService")


@pytest.mark.parametrize("stage", STAGES)
def test_each_overlay_renders_the_stages_objects_and_the_known_kinds_validate(stage):
    objs = kserve(stage)
    assert sorted(o["kind"] for o in objs) == ["ConfigMap", "InferenceService", "PodMonitor", "ServiceAccount"]
    assert {o["metadata"]["namespace"] for o in objs} == {f"ltp-{stage}"}
    assert all(o["metadata"]["labels"]["lean-tpu-pipelines.dev/stage"] == stage for o in objs)
    for obj in objs:
        if obj["apiVersion"] == "v1":  # kubernetes-validate has no schema for the custom resources
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("stage", STAGES)
def test_tensorflow_serving_starts_with_the_monitoring_config_the_podmonitor_scrapes(stage):
    objs = kserve(stage)
    obj = isvc(stage)
    assert (obj["apiVersion"], obj["metadata"]["name"]) == ("serving.kserve.io/v1beta1", TEMPLATE_NAME)
    predictor = obj["spec"]["predictor"]
    model = predictor["model"]
    assert model["modelFormat"] == {"name": "tensorflow"} and model["protocolVersion"] == "v1"
    (flag,) = [a for a in model["args"] if a.startswith(FLAG)]
    path = flag[len(FLAG) :]
    (mount,) = model["volumeMounts"]
    (volume,) = [v for v in predictor["volumes"] if v["name"] == mount["name"]]
    config_map = one(objs, "ConfigMap")
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]  # no hash suffix to miss
    assert path == f"{mount['mountPath']}/{next(iter(config_map['data']))}"
    exported = re.search(r'path: "([^"]+)"', next(iter(config_map["data"].values()))).group(1)
    monitor = one(objs, "PodMonitor")
    assert (monitor["apiVersion"], monitor["kind"]) == PODMONITOR
    assert monitor["spec"]["podMetricsEndpoints"] == [{"targetPort": 8080, "path": exported, "interval": "30s"}]
    assert predictor["serviceAccountName"] == one(objs, "ServiceAccount")["metadata"]["name"]


def test_the_stages_differ_in_size_and_prod_never_scales_to_zero():
    sizes = {s: isvc(s)["spec"]["predictor"] for s in STAGES}
    assert (sizes["demo"]["minReplicas"], sizes["demo"]["maxReplicas"]) == (1, 1)
    assert sizes["prod"]["minReplicas"] >= 1 and sizes["prod"]["maxReplicas"] > sizes["prod"]["minReplicas"]
    assert sizes["staging"]["model"]["resources"] == sizes["prod"]["model"]["resources"]
    assert sizes["demo"]["model"]["resources"] != sizes["prod"]["model"]["resources"]
    for stage, predictor in sizes.items():
        assert predictor["model"]["storageUri"].endswith(f"/{stage}/models/classifier")


def test_the_plain_targets_podmonitor_does_not_scrape_the_kserve_pods_twice():
    monitors = [o for o in objects("monitoring/stages/prod") if o["kind"] == "PodMonitor"]
    (model_servers,) = [m for m in monitors if m["metadata"]["name"] == "model-server"]
    plain = model_servers["spec"]["selector"]["matchLabels"]
    labels = isvc("prod")["metadata"]["labels"]
    assert not plain.items() <= labels.items()


def test_the_target_copies_the_template_per_model_with_its_store_and_version():
    template = isvc("staging")
    obj = render_inference_service(template, "detector", "gs://b/stages/staging/models/detector", 4, "knative", 10)
    predictor = obj["spec"]["predictor"]
    assert obj["metadata"]["name"] == "detector" and obj["metadata"]["namespace"] == "ltp-staging"
    assert predictor["model"]["storageUri"] == "gs://b/stages/staging/models/detector"
    assert {"name": "LTP_MODEL_VERSION", "value": "4"} in predictor["model"]["env"]
    assert predictor["canaryTrafficPercent"] == 10
    assert predictor["model"]["args"] == template["spec"]["predictor"]["model"]["args"]


@pytest.mark.parametrize("name", ["monitoring.config", "serviceaccount.yaml"])
def test_the_copies_of_the_plain_targets_files_stay_the_same(name):
    # kustomize loads no file outside a base's folder: the kserve base keeps its own copies.
    assert (MANIFESTS / "kserve/base" / name).read_text() == (MANIFESTS / "serving/base" / name).read_text()
