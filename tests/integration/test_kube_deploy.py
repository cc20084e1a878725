"""The kubernetes serving target (components/serving/targets/kubernetes.py) against the FAKE
Kubernetes API server (tests/integration/fake_kube_api.py): rendering, pinning every model's
version, server-side apply, the rollout wait, rollback to the old pod template.

The real `kubernetes` client talks HTTP to the fake on 127.0.0.1; nothing here has run against a
real cluster (docs/kubernetes.md says what that leaves untested). The target is given every model
the stage is to serve (the promote step reads them from the stage registry), so nothing here reads
the registry: its root only names the models' paths.
"""

import time

import kubernetes
import pytest
import yaml

from components import kube as kubeapi
from components.serving.stages import StageRegistry
from components.serving.targets import TargetError, get_target
from components.serving.targets import kubernetes as kube
from components.serving.targets.kubernetes import KubernetesTarget
from tests.integration.fake_kube_api import FakeKubeAPI

pytestmark = pytest.mark.integration

ROOT = "gs://models-bucket/stages"
REGISTRY = StageRegistry(ROOT)
FAST = {"poll_interval_s": 0.01}


@pytest.fixture
def fake():
    with FakeKubeAPI.running() as server:
        yield server


def deploy(api, stage="demo", version=1, timeout_s=10.0, models=None, changed="classifier"):
    """Serves ``models`` (default: ``changed`` at ``version``) at ``stage``; returns ``changed``'s URL."""
    models = models or {changed: version}
    target = KubernetesTarget(REGISTRY, FAST, api_client=api)
    target.serve(stage, models, changed, timeout_s)
    with target.endpoints(stage, models) as endpoints:
        return endpoints.url(changed)


def restore(api, stage, models, changed="classifier", timeout_s=10.0):
    """Serves ``models`` at ``stage`` again, a rollback of ``changed``; returns its URL."""
    target = KubernetesTarget(REGISTRY, FAST, api_client=api)
    target.restore(stage, models, changed, timeout_s)
    with target.endpoints(stage, models) as endpoints:
        return endpoints.url(changed)


def served_versions(fake, namespace="ltp-demo"):
    dep = fake.get("deployments", namespace, "model-server")
    return kube.parse_versions_annotation(dep["spec"]["template"]["metadata"]["annotations"][kube.VERSIONS_ANNOTATION])


def served_version(fake, namespace="ltp-demo"):
    return str(served_versions(fake, namespace)["classifier"])


def served_config(fake, namespace="ltp-demo"):
    dep = fake.get("deployments", namespace, "model-server")
    name = next(
        v["configMap"]["name"] for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "model-config"
    )
    return fake.get("configmaps", namespace, name)["data"]["models.config"]


def fail_version(version, reason="ImagePullBackOff", model_name="classifier"):
    def pod_failure(deployment):
        annotations = deployment["spec"]["template"]["metadata"].get("annotations", {})
        served = kube.parse_versions_annotation(annotations.get(kube.VERSIONS_ANNOTATION, ""))
        return reason if served.get(model_name) == version else None

    return pod_failure


def test_deploy_applies_every_rendered_object_and_waits_for_the_rollout(fake, api):
    fake.rollout_polls = 3
    url = deploy(api, "prod", version=7)
    assert url == "http://model-server.ltp-prod.svc.cluster.local:8501"

    rendered = kube.render_stage("prod")
    stored = {(o["kind"], o["metadata"]["namespace"]) for o in fake.objects()}
    assert stored == {(o["kind"], "ltp-prod") for o in rendered}
    dep = fake.get("deployments", "ltp-prod", "model-server")
    status = dep["status"]
    assert status["observedGeneration"] == dep["metadata"]["generation"]
    assert status["availableReplicas"] == status["updatedReplicas"] == dep["spec"]["replicas"]
    deployment_reads = [r for r in fake.requests if r[0] == "GET" and r[1].endswith("/deployments/model-server")]
    assert len(deployment_reads) >= fake.rollout_polls + 1

    # Every write was a server-side apply by our field manager, forcing conflicts.
    writes = [r for r in fake.requests if r[0] != "GET"]
    assert len(writes) == len(rendered)
    for _, _, query, content_type in writes:
        assert content_type == "application/apply-patch+yaml"
        assert query["fieldManager"] == [kubeapi.FIELD_MANAGER]
        assert query["force"] == ["true"]
        assert query["fieldValidation"] == ["Strict"]

    # The served model: version 7 at the stage's GCS path.
    config_name = next(
        v["configMap"]["name"] for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "model-config"
    )
    text = fake.get("configmaps", "ltp-prod", config_name)["data"]["models.config"]
    assert 'base_path: "gs://models-bucket/stages/prod/models/classifier"' in text
    assert "versions: 7" in text


def test_redeploying_the_same_version_is_a_no_op(fake, api):
    deploy(api, version=1)
    before = {(o["kind"], o["metadata"]["name"]): o["metadata"]["resourceVersion"] for o in fake.objects()}
    generation = fake.get("deployments", "ltp-demo", "model-server")["metadata"]["generation"]
    writes_before = sum(1 for r in fake.requests if r[0] == "PATCH")

    started = time.monotonic()
    deploy(api, version=1)
    assert time.monotonic() - started < 5
    after = {(o["kind"], o["metadata"]["name"]): o["metadata"]["resourceVersion"] for o in fake.objects()}
    assert after == before
    assert fake.get("deployments", "ltp-demo", "model-server")["metadata"]["generation"] == generation
    assert sum(1 for r in fake.requests if r[0] == "PATCH") == 2 * writes_before
    results = kubeapi.apply_objects(
        api,
        kube.configure_stage(
            kube.render_stage("demo"),
            stage="demo",
            stages=REGISTRY,
            models={"classifier": 1},
            change_cause="lean-tpu-pipelines: deploy classifier version 1",
        ),
    )
    assert {r.outcome for r in results} == {"unchanged"}


def test_a_rollout_that_never_completes_raises_rollout_timeout(fake, api):
    fake.pod_failure = fail_version(1, "ImagePullBackOff")
    started = time.monotonic()
    with pytest.raises(kubeapi.RolloutTimeout) as caught:
        deploy(api, version=1, timeout_s=0.5)
    elapsed = time.monotonic() - started
    assert 0.5 <= caught.value.waited_s < 3 and elapsed < 5
    message = str(caught.value)
    assert "ltp-demo/model-server did not complete after" in message
    assert "0 of 1 updated replicas are available" in message
    assert "waiting: ImagePullBackOff" in message
    assert "kubectl -n ltp-demo describe deployment/model-server" in message


def test_transient_api_errors_while_waiting_are_retried(fake, api):
    # Read 1 of the Deployment is apply's; reads 2 and 3 are the first two rollout polls.
    fake.read_error = lambda plural, nth: 503 if plural == "deployments" and nth in (2, 3) else None
    assert deploy(api, version=1).endswith(":8501")
    assert fake.get("deployments", "ltp-demo", "model-server")["status"]["availableReplicas"] == 1


def test_a_non_transient_read_error_is_not_retried(fake, api):
    fake.read_error = lambda plural, nth: 401 if plural == "deployments" and nth == 2 else None
    with pytest.raises(kubeapi.KubeDeployError, match="reading Deployment ltp-demo/model-server failed with HTTP 401"):
        deploy(api, version=1)


def test_progress_deadline_exceeded_fails_without_waiting_for_the_timeout(fake, api):
    fake.deadline_exceeded = lambda deployment: True
    started = time.monotonic()
    with pytest.raises(kubeapi.RolloutTimeout, match="the cluster gave up: ReplicaSet .* has timed out progressing"):
        deploy(api, version=1, timeout_s=30)
    assert time.monotonic() - started < 5


def test_rollback_reapplies_the_previous_version(fake, api):
    deploy(api, "staging", version=1)
    good = fake.get("deployments", "ltp-staging", "model-server")

    fake.pod_failure = fail_version(2, "CrashLoopBackOff")
    with pytest.raises(kubeapi.RolloutTimeout, match="CrashLoopBackOff"):
        deploy(api, "staging", version=2, timeout_s=0.3)
    assert served_version(fake, "ltp-staging") == "2"

    url = restore(api, "staging", {"classifier": 1})
    assert url == "http://model-server.ltp-staging.svc.cluster.local:8501"
    rolled_back = fake.get("deployments", "ltp-staging", "model-server")
    # The exact pod template of version 1 again: the controller can scale its ReplicaSet back up.
    assert rolled_back["spec"]["template"] == good["spec"]["template"]
    assert rolled_back["metadata"]["generation"] > good["metadata"]["generation"]
    assert rolled_back["status"]["availableReplicas"] == 1
    assert "roll back classifier to version 1" in rolled_back["metadata"]["annotations"][kube.CHANGE_CAUSE_ANNOTATION]


def test_serving_a_second_model_keeps_the_first_in_the_config(fake, api):
    url = deploy(api, "demo", models={"classifier": 3, "detector": 1}, changed="detector")
    assert url == "http://model-server.ltp-demo.svc.cluster.local:8501"
    assert served_versions(fake) == {"classifier": 3, "detector": 1}
    text = served_config(fake)
    for name, version in (("classifier", 3), ("detector", 1)):
        assert f'name: "{name}"\n    base_path: "{ROOT}/demo/models/{name}"' in text
        assert f"versions: {version}" in text
    assert text.count("config {") == 2
    # Another stage's Deployment is its own.
    deploy(api, "staging", models={"detector": 1}, changed="detector")
    assert served_versions(fake, "ltp-staging") == {"detector": 1}


def test_rolling_back_one_model_keeps_the_others_version(fake, api):
    deploy(api, "prod", models={"classifier": 5, "detector": 1}, changed="detector")
    good = fake.get("deployments", "ltp-prod", "model-server")

    fake.pod_failure = fail_version(2, "CrashLoopBackOff", model_name="detector")
    with pytest.raises(kubeapi.RolloutTimeout, match="CrashLoopBackOff"):
        deploy(api, "prod", timeout_s=0.3, models={"classifier": 5, "detector": 2}, changed="detector")
    assert served_versions(fake, "ltp-prod") == {"classifier": 5, "detector": 2}

    restore(api, "prod", {"classifier": 5, "detector": 1}, changed="detector")
    assert served_versions(fake, "ltp-prod") == {"classifier": 5, "detector": 1}
    rolled_back = fake.get("deployments", "ltp-prod", "model-server")
    assert rolled_back["spec"]["template"] == good["spec"]["template"]  # the old ReplicaSet's template
    assert "versions: 5" in served_config(fake, "ltp-prod")


def test_prod_apply_leaves_the_hpa_replica_count_alone(fake, api):
    deploy(api, "prod", version=1)
    # The HPA scales through the scale subresource: an Update by the controller manager.
    fake.update("deployments", "ltp-prod", "model-server", "kube-controller-manager", {"spec": {"replicas": 5}})
    deploy(api, "prod", version=2)
    dep = fake.get("deployments", "ltp-prod", "model-server")
    assert dep["spec"]["replicas"] == 5
    assert served_version(fake, "ltp-prod") == "2"


def test_forced_apply_takes_back_a_hand_edit_and_unforced_reports_the_conflict(fake, api):
    deploy(api, version=1)
    dep = fake.get("deployments", "ltp-demo", "model-server")
    edited = dep["spec"]["template"]["spec"]["containers"]
    edited[0]["image"] = "tensorflow/serving:nightly"
    fake.update(
        "deployments",
        "ltp-demo",
        "model-server",
        "kubectl-edit",
        {"spec": {"template": {"spec": {"containers": edited}}}},
    )

    objs = kube.configure_stage(
        kube.render_stage("demo"),
        stage="demo",
        stages=REGISTRY,
        models={"classifier": 1},
        change_cause="lean-tpu-pipelines: deploy classifier version 1",
    )
    with pytest.raises(
        kubeapi.KubeDeployError, match=r'HTTP 409: Apply failed with 1 conflict\(s\): conflict with "kubectl-edit"'
    ):
        kubeapi.apply_objects(api, objs, force=False)

    deploy(api, version=1)
    image = fake.get("deployments", "ltp-demo", "model-server")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.startswith("tensorflow/serving:2.")
    assert "kubectl-edit" not in {
        m for m, paths in fake.managers("deployments", "ltp-demo", "model-server").items() if paths
    }


def test_missing_namespace_and_missing_rights_say_how_to_fix_them(fake, api):
    fake.namespaces.discard("ltp-demo")
    with pytest.raises(
        kubeapi.KubeDeployError, match=r"HTTP 404: namespaces \"ltp-demo\" not found.*manifests/namespaces"
    ):
        deploy(api, version=1)
    fake.namespaces.add("ltp-demo")
    fake.deny.add("deployments")
    with pytest.raises(
        kubeapi.KubeDeployError, match=r"Deployment ltp-demo/model-server failed with HTTP 403.*manifests/rbac"
    ):
        deploy(api, version=1)


def test_without_api_client_the_kubeconfig_is_used(fake, tmp_path, monkeypatch):
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": fake.url}}],
        "users": [{"name": "tester", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester"}}],
        "current-context": "fake",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(path))
    KubernetesTarget(REGISTRY, FAST).serve("demo", {"classifier": 4}, "classifier", 10)
    assert served_version(fake) == "4"


def test_an_unreachable_api_server_is_a_clear_error():
    configuration = kubernetes.client.Configuration()
    configuration.host = "http://127.0.0.1:9"  # discard port: nothing listens
    configuration.retries = 0
    with kubernetes.client.ApiClient(configuration) as client:
        with pytest.raises(
            kubeapi.KubeDeployError, match=r"cannot reach the Kubernetes API server at http://127.0.0.1:9"
        ):
            deploy(client, version=1)


def test_no_configuration_at_all_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(kubeapi.KubeDeployError, match="no Kubernetes configuration: not in a pod"):
        kubeapi.load_api_client()


# ---- the fake itself keeps the API's semantics that kube.py relies on


def test_fake_answers_404_409_and_requires_a_field_manager(fake, api):
    core = kubernetes.client.CoreV1Api(api)
    with pytest.raises(kubernetes.client.ApiException) as missing:
        core.read_namespaced_config_map("nope", "ltp-demo")
    assert missing.value.status == 404
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "1"}}
    core.create_namespaced_config_map("ltp-demo", body)
    with pytest.raises(kubernetes.client.ApiException) as exists:
        core.create_namespaced_config_map("ltp-demo", body)
    assert exists.value.status == 409 and "AlreadyExists" in exists.value.body
    with pytest.raises(kubernetes.client.ApiException) as no_manager:
        api.call_api(
            "/api/v1/namespaces/ltp-demo/configmaps/x",
            "PATCH",
            header_params={"Content-Type": "application/apply-patch+yaml"},
            body=body,
            response_type="object",
        )
    assert no_manager.value.status == 422 and "fieldManager: Required value" in no_manager.value.body


def test_fake_apply_removes_fields_the_manager_stopped_applying(fake, api):
    path = "/api/v1/namespaces/ltp-demo/configmaps/y"

    def apply(data):
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "y"}, "data": data}
        return api.call_api(
            path,
            "PATCH",
            query_params=[("fieldManager", "m")],
            header_params={"Content-Type": "application/apply-patch+yaml"},
            body=body,
            response_type="object",
            _return_http_data_only=True,
        )

    apply({"a": "1", "b": "2"})
    assert apply({"a": "1"})["data"] == {"a": "1"}


def test_apply_goes_through_discovery_and_leaves_no_cache_file(fake, api):
    import hashlib
    import os
    import tempfile

    deploy(api, "prod", version=1)
    paths = [r[1] for r in fake.requests if r[0] == "GET"]
    # The DynamicClient found each kind's URL through discovery, not a table in kube.py.
    assert {"/version", "/apis", "/api/v1", "/apis/apps/v1", "/apis/autoscaling/v2", "/apis/policy/v1"} <= set(paths)
    default_cache = f"osrcp-{hashlib.md5(fake.url.encode()).hexdigest()}.json"
    assert not os.path.exists(os.path.join(tempfile.gettempdir(), default_cache))


def test_an_api_the_cluster_does_not_serve_is_named(fake, api):
    fake.hidden.add("horizontalpodautoscalers")
    with pytest.raises(
        kubeapi.KubeDeployError, match=r"HorizontalPodAutoscaler ltp-prod/model-server.*does not serve.*autoscaling/v2"
    ):
        deploy(api, "prod", version=1)
    # Nothing after the missing API was applied; what came before it was.
    assert fake.get("deployments", "ltp-prod", "model-server") is not None
    assert fake.get("poddisruptionbudgets", "ltp-prod", "model-server") is None


def test_strict_field_validation_refuses_an_unknown_field(fake, api):
    objs = kube.configure_stage(
        kube.render_stage("demo"), stage="demo", stages=REGISTRY, models={"classifier": 1}, change_cause="x"
    )
    service = next(o for o in objs if o["kind"] == "Service")
    service["spce"] = {}  # a typo the server would drop without strict validation
    with pytest.raises(
        kubeapi.KubeDeployError, match=r'Service ltp-demo/model-server failed with HTTP 400.*"spce".*Fix:'
    ):
        kubeapi.apply_objects(api, objs)


# ---- the kubernetes serving target, through its public interface


@pytest.fixture
def target(api):
    return get_target("kubernetes", REGISTRY, FAST, api_client=api)


def test_the_registry_builds_the_kubernetes_target(target, api):
    assert isinstance(target, KubernetesTarget) and target.api_client is api and target.stages is REGISTRY
    assert target.options.poll_interval_s == 0.01
    with pytest.raises(TargetError, match=r"unknown serving target 'kserv'; expected one of .*kubernetes.*local"):
        get_target("kserv", REGISTRY)


def test_target_refuses_a_stage_store_the_pods_cannot_read(target):
    with pytest.raises(ValueError, match=r"stages_root must be gs://.*got 'stages'"):
        KubernetesTarget(StageRegistry("stages")).check()
    target.check()


def test_target_serves_every_model_of_the_stage_and_names_their_url(fake, target):
    target.serve("demo", {"classifier": 3, "detector": 1}, "detector", 10)
    assert served_versions(fake) == {"classifier": 3, "detector": 1}
    dep = fake.get("deployments", "ltp-demo", "model-server")
    assert dep["metadata"]["annotations"][kube.CHANGE_CAUSE_ANNOTATION].endswith("deploy detector version 1")
    assert dep["status"]["availableReplicas"] == 1
    with target.endpoints("demo", {"classifier": 3, "detector": 1}) as endpoints:
        url = "http://model-server.ltp-demo.svc.cluster.local:8501"
        assert endpoints.urls == {"classifier": url, "detector": url}
        with pytest.raises(
            KeyError, match=r"no endpoint for model 'other': this stage serves \['classifier', 'detector'\]"
        ):
            endpoints.url("other")


def test_target_restore_returns_to_the_old_pod_template(fake, target):
    target.serve("staging", {"classifier": 1}, "classifier", 10)
    good = fake.get("deployments", "ltp-staging", "model-server")
    fake.pod_failure = fail_version(2, "CrashLoopBackOff")
    with pytest.raises(kubeapi.RolloutTimeout, match="CrashLoopBackOff"):
        target.serve("staging", {"classifier": 2}, "classifier", 0.3)
    target.restore("staging", {"classifier": 1}, "classifier", 10)
    rolled_back = fake.get("deployments", "ltp-staging", "model-server")
    assert rolled_back["spec"]["template"] == good["spec"]["template"]
    assert "roll back classifier to version 1" in rolled_back["metadata"]["annotations"][kube.CHANGE_CAUSE_ANNOTATION]


def test_target_restore_without_the_failed_first_model_serves_the_others(fake, target):
    target.serve("prod", {"a": 1}, "a", 10)
    good = fake.get("deployments", "ltp-prod", "model-server")
    fake.pod_failure = fail_version(1, "ImagePullBackOff", model_name="b")
    with pytest.raises(kubeapi.RolloutTimeout):
        target.serve("prod", {"a": 1, "b": 1}, "b", 0.3)
    assert served_versions(fake, "ltp-prod") == {"a": 1, "b": 1}
    target.restore("prod", {"a": 1}, "b", 10)
    assert served_versions(fake, "ltp-prod") == {"a": 1}
    assert fake.get("deployments", "ltp-prod", "model-server")["spec"]["template"] == good["spec"]["template"]


def test_target_restore_to_nothing_applies_nothing(fake, target):
    target.restore("demo", {}, "classifier", 10)
    assert [r for r in fake.requests if r[0] != "GET"] == []
    assert fake.objects() == []


# ---- generic helpers: any kind applied, waited for and deleted (a custom resource here)

ISVC = ("serving.kserve.io/v1beta1", "InferenceService")


def inference_service(name):
    return {
        "apiVersion": ISVC[0],
        "kind": ISVC[1],
        "metadata": {"name": name, "namespace": "ltp-demo"},
        "spec": {"predictor": {"model": {"storageUri": f"{ROOT}/demo/models/{name}"}}},
    }


def test_a_custom_kind_is_applied_waited_for_and_deleted(fake, api):
    fake.add_kind("inferenceservices", *ISVC)
    with pytest.raises(kubeapi.KubeDeployError, match="cannot apply InferenceService .* may render only"):
        kubeapi.apply_objects(api, [inference_service("clf")])
    (applied,) = kubeapi.apply_objects(api, [inference_service("clf")], extra_kinds=[ISVC])
    assert (applied.kind, applied.outcome) == ("InferenceService", "created")

    def wait(timeout_s):
        return kubeapi.wait_for_condition(api, *ISVC, "ltp-demo", "clf", "Ready", timeout_s, poll_interval_s=0.01)

    with pytest.raises(kubeapi.RolloutTimeout, match=r"InferenceService ltp-demo/clf did not become Ready .*no Ready"):
        wait(0.2)
    loading = {"type": "Ready", "status": "False", "reason": "Loading", "message": "the model is loading"}
    fake.set_status("inferenceservices", "ltp-demo", "clf", {"conditions": [loading]})
    with pytest.raises(kubeapi.RolloutTimeout, match=r"Ready=False \(Loading: the model is loading\)"):
        wait(0.2)
    fake.set_status("inferenceservices", "ltp-demo", "clf", {"conditions": [{**loading, "status": "True"}]})
    assert wait(5)["metadata"]["name"] == "clf"

    assert kubeapi.delete_object(api, *ISVC, "ltp-demo", "clf") is True
    assert fake.get("inferenceservices", "ltp-demo", "clf") is None
    assert kubeapi.delete_object(api, *ISVC, "ltp-demo", "clf") is False  # already gone
    assert [r[1] for r in fake.requests if r[0] == "DELETE"] == [
        "/apis/serving.kserve.io/v1beta1/namespaces/ltp-demo/inferenceservices/clf"
    ] * 2
    with pytest.raises(kubeapi.RolloutTimeout, match="the object does not exist"):
        wait(0.1)


def test_a_refused_delete_says_how_to_fix_it(fake, api):
    deploy(api, version=1)
    fake.deny.add("configmaps")
    name = next(o["metadata"]["name"] for o in fake.objects() if o["kind"] == "ConfigMap")
    with pytest.raises(
        kubeapi.KubeDeployError, match=r"deleting ConfigMap ltp-demo/.* failed with HTTP 403.*manifests/rbac"
    ):
        kubeapi.delete_object(api, "v1", "ConfigMap", "ltp-demo", name)
    assert fake.get("configmaps", "ltp-demo", name) is not None
