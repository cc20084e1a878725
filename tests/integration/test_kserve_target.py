"""The kserve target against the fake Kubernetes API server with its fake KServe controller:
InferenceServices per model, canary steps, rollback, and the faults that must leave the stage
serving what it served before (no InferenceService CRD, a canary that never gets ready, a model
the serving account cannot read, a deployment mode that is not the configured one)."""

import kubernetes
import pytest

from components import kube
from components.serving.targets import get_target
from components.serving.targets.kserve import KServeTarget, render_inference_service

from tests.integration.fake_kube_api import FakeKServe, FakeKubeAPI

ROOT = "gs://models-bucket/stages"
PLURAL = "inferenceservices"


@pytest.fixture
def fake():
    with FakeKubeAPI.running() as server:
        yield server


@pytest.fixture
def kserve(fake):
    return FakeKServe().install(fake)


@pytest.fixture
def api(fake):
    configuration = kubernetes.client.Configuration()
    configuration.host = fake.url
    with kubernetes.client.ApiClient(configuration) as client:
        yield client


@pytest.fixture
def target(api):
    return KServeTarget(api_client=api, poll_interval_s=0.01)


def isvc(fake, name="classifier", namespace="ltp-demo"):
    return fake.get(PLURAL, namespace, name)


def served_version(obj):
    (env,) = [e for e in obj["spec"]["predictor"]["model"]["env"] if e["name"] == "LTP_MODEL_VERSION"]
    return int(env["value"])


def traffic(obj):
    return {t["revisionName"]: t["percent"] for t in obj["status"]["components"]["predictor"]["traffic"]}


def test_the_registry_builds_the_kserve_target(api):
    target = get_target("kserve", api_client=api, kserve_mode="standard", canary_steps=(25, 100))
    assert isinstance(target, KServeTarget)
    assert target.load_profile == "cluster"
    assert target.canary_steps() == ()  # Standard mode: no traffic split
    assert KServeTarget(api_client=api, canary_steps=(25, 100)).canary_steps() == (25, 100)
    with pytest.raises(ValueError, match="ending with 100"):
        KServeTarget(api_client=api, canary_steps=(50, 10))
    with pytest.raises(ValueError, match="kserve_mode"):
        KServeTarget(api_client=api, kserve_mode="serverless")


def test_a_cluster_without_kserve_is_refused_naming_what_to_install(fake, target):
    with pytest.raises(kube.KubeDeployError, match=r"install KServe.*serving_target=kubernetes"):
        target.check(ROOT)
    with pytest.raises(ValueError, match="gs://"):
        target.check("/tmp/stages")


def test_each_model_is_an_inference_service_with_metrics_and_the_stage_size(fake, kserve, target):
    target.check(ROOT)
    target.serve(ROOT, "prod", {"classifier": 1, "detector": 2}, "detector", timeout_s=5)
    obj = isvc(fake, "detector", "ltp-prod")
    predictor = obj["spec"]["predictor"]
    assert predictor["model"]["storageUri"] == f"{ROOT}/prod/models/detector"
    assert predictor["model"]["modelFormat"] == {"name": "tensorflow"}
    assert "--monitoring_config_file=/etc/ltp-monitoring/monitoring.config" in predictor["model"]["args"]
    assert predictor["serviceAccountName"] == "model-server"
    assert predictor["minReplicas"] >= 1 and predictor["maxReplicas"] > predictor["minReplicas"]
    assert served_version(obj) == 2 and served_version(isvc(fake, "classifier", "ltp-prod")) == 1
    assert fake.get("configmaps", "ltp-prod", "model-server-monitoring") is not None
    with target.endpoints(ROOT, "prod", {"classifier": 1, "detector": 2}) as endpoints:
        assert endpoints.url("detector") == "http://detector-predictor.ltp-prod.example.com"
        assert endpoints.url("classifier") != endpoints.url("detector")  # one URL per model
        assert endpoints.canary_url("detector") == endpoints.url("detector")  # no canary in progress


def test_canary_steps_split_the_traffic_and_100_promotes(fake, kserve, target):
    target.serve(ROOT, "demo", {"classifier": 1}, "classifier", timeout_s=5)
    first = isvc(fake)["status"]["components"]["predictor"]["latestReadyRevision"]
    for percent in (10, 50):
        target.serve_canary(ROOT, "demo", {"classifier": 2}, "classifier", percent, timeout_s=5)
        obj = isvc(fake)
        latest = obj["status"]["components"]["predictor"]["latestReadyRevision"]
        assert traffic(obj) == {latest: percent, first: 100 - percent}
        with target.endpoints(ROOT, "demo", {"classifier": 2}) as endpoints:
            assert endpoints.canary_url("classifier") == "http://latest-classifier-predictor.ltp-demo.example.com"
    target.serve_canary(ROOT, "demo", {"classifier": 2}, "classifier", 100, timeout_s=5)
    obj = isvc(fake)
    assert "canaryTrafficPercent" not in obj["spec"]["predictor"]
    assert list(traffic(obj).values()) == [100] and served_version(obj) == 2


def test_a_canary_that_never_gets_ready_times_out_and_restore_serves_the_old_version(fake, kserve, target):
    target.serve(ROOT, "demo", {"classifier": 1}, "classifier", timeout_s=5)
    kserve.never_ready = lambda obj: served_version(obj) == 2
    with pytest.raises(kube.RolloutTimeout, match="newest revision .* is not ready"):
        target.serve_canary(ROOT, "demo", {"classifier": 2}, "classifier", 10, timeout_s=0.3)
    target.restore(ROOT, "demo", {"classifier": 1}, "classifier", timeout_s=5)
    obj = isvc(fake)
    assert served_version(obj) == 1 and "canaryTrafficPercent" not in obj["spec"]["predictor"]
    assert list(traffic(obj).values()) == [100]
    # On the way back the failed revision got 0% first (the spec still named the failed version).
    applied = [q for m, p, q, _ in fake.requests if m == "PATCH" and p.endswith("/inferenceservices/classifier")]
    assert len(applied) >= 3


def test_a_model_the_account_cannot_read_reports_the_storage_initializers_message(fake, kserve, target):
    target.serve(ROOT, "staging", {"classifier": 1}, "classifier", timeout_s=5)
    message = "failed to download gs://models-bucket/stages/staging/models/classifier: 403 Forbidden"
    kserve.load_failure = lambda obj: message if served_version(obj) == 2 else None
    with pytest.raises(kube.KubeDeployError, match="403 Forbidden.*read access"):
        target.serve(ROOT, "staging", {"classifier": 2}, "classifier", timeout_s=5)
    target.restore(ROOT, "staging", {"classifier": 1}, "classifier", timeout_s=5)
    assert served_version(isvc(fake, namespace="ltp-staging")) == 1


def test_a_deployment_mode_other_than_the_configured_one_is_refused_before_any_change(fake, kserve, api, target):
    target.serve(ROOT, "demo", {"classifier": 1}, "classifier", timeout_s=5)
    standard = KServeTarget(api_client=api, kserve_mode="standard", poll_interval_s=0.01)
    with pytest.raises(kube.KubeDeployError, match="deploymentMode Knative.*kserve_mode=knative"):
        standard.serve(ROOT, "demo", {"classifier": 2}, "classifier", timeout_s=5)
    assert served_version(isvc(fake)) == 1


def test_restore_without_an_earlier_version_deletes_the_models_inference_service(fake, kserve, target):
    target.serve(ROOT, "demo", {"classifier": 1, "detector": 1}, "detector", timeout_s=5)
    target.restore(ROOT, "demo", {"classifier": 1}, "detector", timeout_s=5)
    assert isvc(fake, "detector") is None and isvc(fake, "classifier") is not None


def test_names_that_are_not_dns_1035_labels_and_canaries_in_standard_mode_are_refused(target):
    template = {"metadata": {"name": "model"}, "spec": {"predictor": {"model": {}}}}
    with pytest.raises(ValueError, match="DNS-1035.*serve it as 'my-model'"):
        render_inference_service(template, "My_Model", ROOT, 1, "knative")
    with pytest.raises(ValueError, match="Standard mode ignores it"):
        render_inference_service(template, "classifier", ROOT, 1, "standard", canary_percent=10)
    obj = render_inference_service(template, "classifier", ROOT, 3, "standard")
    assert obj["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Standard"
    assert template["metadata"]["name"] == "model"  # the template is copied, not changed
