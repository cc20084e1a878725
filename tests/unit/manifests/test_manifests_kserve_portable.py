"""The KServe overlays of a portable format: each stage's InferenceService with the project's model
server as the predictor container (the same REST contract, port and metrics page as TensorFlow
Serving), rendered with `kubectl kustomize`, the container validated strictly as Kubernetes'
own kind, and the kserve target copying it per model."""

import kubernetes_validate
import pytest

from components.images import PROJECT_IMAGE
from components.serving.config import STAGES
from components.serving.metrics import METRICS_PATH
from components.serving.targets.kserve import STORAGE_ENV, VERSION_ENV, render_inference_service
from tests.unit.manifests.test_manifests_serving import KUBERNETES_VERSION, objects, one


def portable(stage):
    return objects(f"kserve/portable/{stage}")


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_serves_a_portable_format_with_the_project_s_server_at_the_stage_s_size(stage):
    objs, plain = portable(stage), objects(f"kserve/overlays/{stage}")
    assert sorted(o["kind"] for o in objs) == sorted(o["kind"] for o in plain)
    assert [o for o in objs if o["kind"] != "InferenceService"] == [o for o in plain if o["kind"] != "InferenceService"]
    predictor, served = one(objs, "InferenceService")["spec"]["predictor"], one(plain, "InferenceService")
    assert "model" not in predictor
    (container,) = predictor["containers"]
    assert container["name"] == "kserve-container" and container["image"] == PROJECT_IMAGE
    assert container["command"] == ["python", "-m", "components.serving.server"]
    assert {"--model-base-path=/mnt/models", "--host=0.0.0.0", "--port=8080"} <= set(container["args"])
    assert container["env"] == [{"name": STORAGE_ENV, "value": served["spec"]["predictor"]["model"]["storageUri"]}]
    assert container["resources"] == served["spec"]["predictor"]["model"]["resources"]
    # The PodMonitor scrapes the port and path the project's server exports its metrics at.
    (endpoint,) = one(objs, "PodMonitor")["spec"]["podMetricsEndpoints"]
    assert (endpoint["targetPort"], endpoint["path"]) == (8080, METRICS_PATH)
    assert container["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
    for key in ("minReplicas", "maxReplicas", "logger", "serviceAccountName"):
        assert predictor[key] == served["spec"]["predictor"][key]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "model"}, "spec": {"containers": [container]}}
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)


def test_the_target_copies_the_portable_template_per_model_with_its_store_and_version():
    template = one(portable("prod"), "InferenceService")
    obj = render_inference_service(template, "detector", "gs://b/stages/prod/models/detector", 7, "knative", 10)
    (container,) = obj["spec"]["predictor"]["containers"]
    assert obj["metadata"]["name"] == "detector" and obj["spec"]["predictor"]["canaryTrafficPercent"] == 10
    assert {"name": STORAGE_ENV, "value": "gs://b/stages/prod/models/detector"} in container["env"]
    assert {"name": VERSION_ENV, "value": "7"} in container["env"]  # each version a new revision
    assert [a for a in container["args"] if a.startswith("--model-name=")] == ["--model-name=detector"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/v1/models/detector", "port": 8080}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "detector"}, "spec": {"containers": [container]}}
    kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)
