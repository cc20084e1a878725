"""The kserve target against the fake Kubernetes API server with its fake KServe controller:
InferenceServices per model, canary steps, rollback, and the faults that must leave the stage
serving what it served before (no InferenceService CRD, a canary that never gets ready, a model
the serving account cannot read, a deployment mode that is not the configured one)."""

import dataclasses

import pytest

from components import kube
from components.serving.stages import StageRegistry
from components.serving.targets import TargetError, TargetSettings, get_target
from components.serving.targets.kserve import KServeTarget, render_inference_service
from tests.integration.fake_kube_api import FakeKServe, FakeKubeAPI

pytestmark = pytest.mark.integration

ROOT = "gs://models-bucket/stages"
PLURAL = "inferenceservices"
FAST = {"poll_interval_s": 0.01}


@pytest.fixture
def fake():
    with FakeKubeAPI.running() as server:
        yield server


@pytest.fixture
def kserve(fake):
    return FakeKServe().install(fake)


@pytest.fixture
def target(api):
    return KServeTarget(StageRegistry(ROOT), FAST, api_client=api)


def kserve_target(api, root, **options):
    """A kserve target for the registry under ``root``, polling fast."""
    return KServeTarget(StageRegistry(root), {**FAST, **options}, api_client=api)


def isvc(fake, name="classifier", namespace="ltp-demo"):
    return fake.get(PLURAL, namespace, name)


def served_version(obj):
    (env,) = [e for e in obj["spec"]["predictor"]["model"]["env"] if e["name"] == "LTP_MODEL_VERSION"]
    return int(env["value"])


def traffic(obj):
    return {t["revisionName"]: t["percent"] for t in obj["status"]["components"]["predictor"]["traffic"]}


def test_the_registry_builds_the_kserve_target(api):
    steps = TargetSettings(canary_steps=(25, 100))
    target = get_target("kserve", StageRegistry(ROOT), {"mode": "standard"}, steps, api_client=api)
    assert isinstance(target, KServeTarget) and target.api_client is api
    assert target.load_profile == "cluster"
    assert target.canary_steps() == ()  # Standard mode: no traffic split
    assert KServeTarget(StageRegistry(ROOT), settings=steps, api_client=api).canary_steps() == (25, 100)
    with pytest.raises(TargetError, match="ending with 100"):
        TargetSettings(canary_steps=(50, 10))
    with pytest.raises(TargetError, match=r"serving_options.mode: expected one of \['knative', 'standard'\]"):
        KServeTarget(StageRegistry(ROOT), {"mode": "serverless"}, api_client=api)


def test_a_cluster_without_kserve_is_refused_naming_what_to_install(fake, target):
    with pytest.raises(kube.KubeDeployError, match=r"install KServe.*serving_target=kubernetes"):
        target.check()
    with pytest.raises(ValueError, match="gs://"):
        kserve_target(target.api_client, "/tmp/stages").check()


def test_each_model_is_an_inference_service_with_metrics_and_the_stage_size(fake, kserve, target):
    target.check()
    target.serve("prod", {"classifier": 1, "detector": 2}, "detector", timeout_s=5)
    obj = isvc(fake, "detector", "ltp-prod")
    predictor = obj["spec"]["predictor"]
    assert predictor["model"]["storageUri"] == f"{ROOT}/prod/models/detector"
    assert predictor["model"]["modelFormat"] == {"name": "tensorflow"}
    assert "--monitoring_config_file=/etc/ltp-monitoring/monitoring.config" in predictor["model"]["args"]
    assert predictor["serviceAccountName"] == "model-server"
    assert predictor["minReplicas"] >= 1 and predictor["maxReplicas"] > predictor["minReplicas"]
    assert served_version(obj) == 2 and served_version(isvc(fake, "classifier", "ltp-prod")) == 1
    assert fake.get("configmaps", "ltp-prod", "model-server-monitoring") is not None
    with target.endpoints("prod", {"classifier": 1, "detector": 2}) as endpoints:
        assert endpoints.url("detector") == "http://detector-predictor.ltp-prod.example.com"
        assert endpoints.url("classifier") != endpoints.url("detector")  # one URL per model
        assert endpoints.canary_url("detector") == endpoints.url("detector")  # no canary in progress


def test_canary_steps_split_the_traffic_and_100_promotes(fake, kserve, target):
    target.serve("demo", {"classifier": 1}, "classifier", timeout_s=5)
    first = isvc(fake)["status"]["components"]["predictor"]["latestReadyRevision"]
    for percent in (10, 50):
        target.serve_canary("demo", {"classifier": 2}, "classifier", percent, timeout_s=5)
        obj = isvc(fake)
        latest = obj["status"]["components"]["predictor"]["latestReadyRevision"]
        assert traffic(obj) == {latest: percent, first: 100 - percent}
        with target.endpoints("demo", {"classifier": 2}) as endpoints:
            assert endpoints.canary_url("classifier") == "http://latest-classifier-predictor.ltp-demo.example.com"
    target.serve_canary("demo", {"classifier": 2}, "classifier", 100, timeout_s=5)
    obj = isvc(fake)
    assert "canaryTrafficPercent" not in obj["spec"]["predictor"]
    assert list(traffic(obj).values()) == [100] and served_version(obj) == 2


def test_a_canary_that_never_gets_ready_times_out_and_restore_serves_the_old_version(fake, kserve, target):
    target.serve("demo", {"classifier": 1}, "classifier", timeout_s=5)
    kserve.never_ready = lambda obj: served_version(obj) == 2
    with pytest.raises(kube.RolloutTimeout, match="newest revision .* is not ready"):
        target.serve_canary("demo", {"classifier": 2}, "classifier", 10, timeout_s=0.3)
    target.restore("demo", {"classifier": 1}, "classifier", timeout_s=5)
    obj = isvc(fake)
    assert served_version(obj) == 1 and "canaryTrafficPercent" not in obj["spec"]["predictor"]
    assert list(traffic(obj).values()) == [100]
    # On the way back the failed revision got 0% first (the spec still named the failed version).
    applied = [q for m, p, q, _ in fake.requests if m == "PATCH" and p.endswith("/inferenceservices/classifier")]
    assert len(applied) >= 3


def test_pods_the_namespaces_pod_security_refuses_are_reported_plainly(fake, kserve, target):
    target.serve("prod", {"classifier": 1}, "classifier", timeout_s=5)
    refused = 'FailedCreate: pods "classifier-predictor-00002" is forbidden: violates PodSecurity "restricted:latest"'
    kserve.never_ready = lambda obj: refused if served_version(obj) == 2 else False
    with pytest.raises(kube.RolloutTimeout, match="LatestDeploymentReady=False .*violates PodSecurity"):
        target.serve_canary("prod", {"classifier": 2}, "classifier", 10, timeout_s=0.3)
    target.restore("prod", {"classifier": 1}, "classifier", timeout_s=5)
    assert served_version(isvc(fake, namespace="ltp-prod")) == 1


def test_a_model_the_account_cannot_read_reports_the_storage_initializers_message(fake, kserve, target):
    target.serve("staging", {"classifier": 1}, "classifier", timeout_s=5)
    message = "failed to download gs://models-bucket/stages/staging/models/classifier: 403 Forbidden"
    kserve.load_failure = lambda obj: message if served_version(obj) == 2 else None
    with pytest.raises(kube.KubeDeployError, match="403 Forbidden.*read access"):
        target.serve("staging", {"classifier": 2}, "classifier", timeout_s=5)
    target.restore("staging", {"classifier": 1}, "classifier", timeout_s=5)
    assert served_version(isvc(fake, namespace="ltp-staging")) == 1


def test_a_deployment_mode_other_than_the_configured_one_is_refused_before_any_change(fake, kserve, api, target):
    target.serve("demo", {"classifier": 1}, "classifier", timeout_s=5)
    standard = kserve_target(api, ROOT, mode="standard")
    with pytest.raises(kube.KubeDeployError, match="deploymentMode Knative.*serving_options.mode=knative"):
        standard.serve("demo", {"classifier": 2}, "classifier", timeout_s=5)
    assert served_version(isvc(fake)) == 1


def test_restore_without_an_earlier_version_deletes_the_models_inference_service(fake, kserve, target):
    target.serve("demo", {"classifier": 1, "detector": 1}, "detector", timeout_s=5)
    target.restore("demo", {"classifier": 1}, "detector", timeout_s=5)
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


# ---- promotion through the kserve target: the canary loop, its checks at each step, rollback


def _passing(name, figures=None):
    from components.serving.checks import CheckResult

    return CheckResult(name, True, "ok", figures or {})


@pytest.fixture
def stage_store(tmp_path, monkeypatch):
    """A demo stage whose checks passed for versions 1 and 2 (file-only SavedModels) and a store
    on a folder (the storage initializer's gs:// check is waived: nothing here reads the models)."""
    from components.serving import stages
    from components.serving.checks import KnownExample
    from components.serving.targets import kserve

    monkeypatch.setattr(kserve, "check_gcs_root", lambda root: None)
    registry = StageRegistry(str(tmp_path / "stages"))

    def demo_version(content):
        src = tmp_path / f"model-{content}"
        src.mkdir()
        (src / "saved_model.pb").write_text(content)
        version = registry.publish(str(src), "demo", "classifier")
        entry = stages.StageEntry("promote", version, str(src), "run", model_name="classifier")
        registry.record("demo", dataclasses.replace(entry, checks=(_passing("health"),)))

    registry.save_examples("demo", "classifier", stages.StageExamples("classification", (KnownExample(b"x", 1),)))
    return registry.root, demo_version


@pytest.fixture
def checks(fake, monkeypatch):
    """The serving checks replaced by stand-ins that pass, except at the canary share ``fail_at``
    or while the InferenceService serves ``fail_version``; ``seen`` lists (canary share, URL) of each run."""
    from components.promote import verify
    from components.serving.checks import ChecksReport, ServingChecksError

    state = {"fail_at": None, "fail_version": None, "seen": []}

    def share():
        obj = isvc(fake, namespace="ltp-staging")
        return obj["spec"]["predictor"].get("canaryTrafficPercent") if obj else None

    def run_checks(url, model_name, examples, min_accuracy, **kwargs):
        state["seen"].append((share(), url))
        obj = isvc(fake, namespace="ltp-staging")
        failing_version = obj is not None and served_version(obj) == state["fail_version"]
        passed = not failing_version and (state["fail_at"] is None or share() != state["fail_at"])
        report = ChecksReport((_passing("health"), dataclasses.replace(_passing("prediction"), passed=passed)), 1, 1.0)
        if not passed:
            raise ServingChecksError("prediction: wrong answers", report)
        return report

    monkeypatch.setattr(verify, "run_checks", run_checks)
    monkeypatch.setattr(verify, "check_load", lambda url, *args: _passing("load"))
    return state


def test_a_new_version_goes_through_every_canary_step_checked_against_the_canary(
    fake, kserve, api, stage_store, checks
):
    from components.promote.run import promote_version
    from components.serving.config import PromoteConfig

    root, demo_version = stage_store
    target = kserve_target(api, root)
    config = PromoteConfig(stage="staging", target="kserve", stages_root=root, task="classification")
    demo_version("one")
    promote_version(config, "demo", "run-1", target=target)  # the first version: no canary
    demo_version("two")
    result = promote_version(config, "demo", "run-2", target=target)
    assert result.version == 2 and result.check("canary").detail == "passed at 10%, 50%, 100%"
    tag = "http://latest-classifier-predictor.ltp-staging.example.com"
    assert checks["seen"][1:] == [(10, tag), (50, tag), (None, "http://classifier-predictor.ltp-staging.example.com")]
    assert served_version(isvc(fake, namespace="ltp-staging")) == 2
    current = StageRegistry(root).read_current("staging", "classifier")
    assert (current.target, current.task) == ("kserve", "classification")
    recorded = {c.name: c for c in current.checks}
    assert recorded["canary"].passed and recorded["canary"].figures == {"steps": 3, "passed_steps": 3}


def test_checks_failing_at_50_percent_roll_the_canary_back_and_record_it(fake, kserve, api, stage_store, checks):
    from components.promote.result import PromotionError
    from components.promote.run import promote_version
    from components.serving.config import PromoteConfig

    root, demo_version = stage_store
    target = kserve_target(api, root)
    config = PromoteConfig(stage="staging", target="kserve", stages_root=root, task="classification")
    demo_version("one")
    promote_version(config, "demo", "run-1", target=target)
    demo_version("two")
    checks["fail_at"] = 50
    with pytest.raises(PromotionError, match="canary at 50% failed"):
        promote_version(config, "demo", "run-2", target=target)
    obj = isvc(fake, namespace="ltp-staging")
    assert served_version(obj) == 1 and "canaryTrafficPercent" not in obj["spec"]["predictor"]
    assert list(traffic(obj).values()) == [100]
    last = StageRegistry(root).read_history("staging", "classifier")[-1]
    assert (last.action, last.version, last.failed_version, last.verified) == ("rollback", 1, 2, True)
    assert "canary at 50% failed" in last.reason
    assert StageRegistry(root).list_versions("staging", "classifier") == [1]


def test_a_rollback_by_hand_reapplies_the_earlier_version(fake, kserve, api, stage_store, checks):
    from components.promote.rollback import rollback
    from components.promote.run import promote_version
    from components.serving.config import PromoteConfig

    root, demo_version = stage_store
    target = kserve_target(api, root)
    config = PromoteConfig(stage="staging", target="kserve", stages_root=root, task="classification")
    for run in ("one", "two"):
        demo_version(run)
        promote_version(config, "demo", f"run-{run}", target=target)
    assert served_version(isvc(fake, namespace="ltp-staging")) == 2
    back = rollback(config, "run-back", target=target)
    assert (back.action, back.version, back.previous_version) == ("rollback", 1, 2)
    assert served_version(isvc(fake, namespace="ltp-staging")) == 1


def test_standard_mode_replaces_without_a_canary_and_rolls_back(fake, api, stage_store, checks, caplog):
    from components.promote.result import PromotionError
    from components.promote.run import promote_version
    from components.serving.config import PromoteConfig

    FakeKServe(mode="Standard").install(fake)
    root, demo_version = stage_store
    target = kserve_target(api, root, mode="standard")
    config = PromoteConfig(stage="staging", target="kserve", stages_root=root, task="classification")
    demo_version("one")
    promote_version(config, "demo", "run-1", target=target)
    demo_version("two")
    checks["fail_version"] = 2
    with caplog.at_level("INFO"), pytest.raises(PromotionError, match="prediction: wrong answers"):
        promote_version(config, "demo", "run-2", target=target)
    assert "no traffic split" in caplog.text
    assert all(share is None for share, _ in checks["seen"])  # never a canaryTrafficPercent
    obj = isvc(fake, namespace="ltp-staging")
    assert served_version(obj) == 1 and obj["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "Standard"


# ---- the monitor through the kserve target: its checks over the v1 protocol against a real server


@pytest.fixture
def quiet_prometheus():
    """A Prometheus query API that saw no traffic: every objective reads "no data" (and is kept)."""
    import http.server
    import json
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def demo_served(tmp_path, fake, kserve, api):
    """Demo serves version 1 of a tiny model built (not trained) to say digit 3, with digits 3 as its
    known images; its InferenceService's URL is a real ModelServer on loopback serving that version.
    Yields the kserve target of that store."""
    from components.serving import stages
    from components.serving.checks import KnownExample
    from components.serving.server import ModelServer
    from tests.promote_models import digits, export_tiny_model, png_bytes

    target = kserve_target(api, str(tmp_path / "stages"))
    registry = target.stages
    export_tiny_model(str(tmp_path / "model"), constant_class=3)
    version = registry.publish(str(tmp_path / "model"), "demo", "classifier")
    registry.record(
        "demo", stages.StageEntry("promote", version, str(tmp_path / "model"), "run", model_name="classifier")
    )
    images, labels = digits()
    known = tuple(KnownExample(png_bytes(image), 3) for image in images[labels == 3][:4])
    registry.save_examples("demo", "classifier", stages.StageExamples("classification", known))
    with ModelServer(registry.model_base_path("demo", "classifier"), "classifier", version=version) as server:
        kserve.url_of = lambda name, namespace, tag: server.url  # the status is written when the spec changes
        target.serve("demo", {"classifier": version}, "classifier", timeout_s=5)
        yield target


def test_the_monitor_checks_each_inference_service_over_the_v1_protocol(demo_served, quiet_prometheus):
    from components.monitor.run import monitor, status_line
    from components.serving.config import MonitorConfig

    target = demo_served
    config = MonitorConfig(
        prometheus_url=quiet_prometheus, stages_root=target.stages.root, stages=("demo",), target="kserve"
    )
    report = monitor(config, target=target)
    assert status_line(report) == "ok", report.to_markdown()
    (demo,) = report.stages
    checks = {c.name: c for c in demo.checks}
    assert {"health", "metadata", "bad_requests", "prediction"} <= set(checks)
    assert checks["prediction"].passed and demo.version == 1


def test_the_monitor_reports_an_inference_service_that_is_not_ready_or_does_not_answer(
    demo_served, quiet_prometheus, fake, kserve
):
    from components.monitor.run import monitor, status_line
    from components.serving.config import MonitorConfig

    target = demo_served
    config = MonitorConfig(
        prometheus_url=quiet_prometheus, stages_root=target.stages.root, stages=("demo",), target="kserve"
    )
    message = "failed to download gs://models-bucket/stages/demo/models/classifier: 403 Forbidden"
    kserve.load_failure = lambda obj: message
    fake.update(PLURAL, "ltp-demo", "classifier", "kubectl-edit", {"spec": {"predictor": {"minReplicas": 2}}})
    report = monitor(config, target=target)
    assert status_line(report) == "broken: demo: check health"
    (health,) = report.stages[0].checks
    assert "is not Ready" in health.detail and "403 Forbidden" in health.detail
    assert "| check health | NO |" in report.to_markdown()

    kserve.load_failure = lambda obj: None
    kserve.url_of = lambda name, namespace, tag: "http://127.0.0.1:9"  # Ready, but nothing answers there
    fake.update(PLURAL, "ltp-demo", "classifier", "kubectl-edit", {"spec": {"predictor": {"minReplicas": 1}}})
    report = monitor(config.replace(timeout_s=1.0), target=target)
    assert status_line(report).startswith("broken: demo: check health")
