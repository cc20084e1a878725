"""The serving-target registry and its seam, without servers or clusters."""

import pytest

from components.serving.targets import Endpoints, ServingTarget, get_target, register, target_class, target_names
from components.serving.targets.kserve import KServeTarget
from components.serving.targets.kubernetes import KubernetesTarget
from components.serving.targets.local import LocalTarget
from trainer.config import LOAD_TESTS, STAGES, ConfigError, MonitorConfig, PromoteConfig


def test_the_registry_knows_each_target_by_name():
    assert target_names() == ["kserve", "kubernetes", "local"]
    assert target_class("local") is LocalTarget and target_class("kubernetes") is KubernetesTarget
    assert target_class("kserve") is KServeTarget
    local = get_target("local", port=8600)
    assert isinstance(local, LocalTarget) and local.port == 8600
    with pytest.raises(
        ValueError, match=r"unknown serving target 'seldon': expected one of \['kserve', 'kubernetes', 'local'\]"
    ):
        get_target("seldon")


def test_a_name_is_registered_once():
    class Another(LocalTarget):
        name = "local"

    with pytest.raises(ValueError, match="serving target name 'local' is taken by LocalTarget; Another needs another"):
        register(Another)

    class Nameless(ServingTarget):
        pass

    with pytest.raises(ValueError, match="needs a non-empty class attribute name, Nameless has None"):
        register(Nameless)
    assert target_names() == ["kserve", "kubernetes", "local"]


def test_every_target_has_a_default_load_test_for_every_stage():
    for name in target_names():
        for stage in STAGES:
            assert (target_class(name).load_profile, stage) in LOAD_TESTS
    local, kube = target_class("local").load_profile, target_class("kubernetes").load_profile
    assert PromoteConfig(target="local", stage="prod").effective_load_test(local) == LOAD_TESTS[("loopback", "prod")]
    assert PromoteConfig(target="kubernetes", stage="demo").effective_load_test(kube) == LOAD_TESTS[("cluster", "demo")]


def test_configs_name_a_registered_target():
    # The config checks the name's form; the registry (asked when a step starts) which exist.
    with pytest.raises(ConfigError, match=r"monitor.target: expected a serving target's name"):
        MonitorConfig(target="Not A Name")
    with pytest.raises(
        ValueError, match=r"unknown serving target 'seldon': expected one of \['kserve', 'kubernetes', 'local'\]"
    ):
        target_class(MonitorConfig(target="seldon").target)
    assert MonitorConfig(target="kubernetes").stages == STAGES


def test_endpoints_name_each_models_url():
    endpoints = Endpoints(urls={"a": "http://a:8501", "b": "http://b:8501"}, metrics_urls={"a": "http://a/m"})
    assert endpoints.url("b") == "http://b:8501"
    assert endpoints.metrics_url("a") == "http://a/m" and endpoints.metrics_url("b") is None
    with pytest.raises(KeyError, match=r"no endpoint for model 'c': this stage serves \['a', 'b'\] here"):
        endpoints.url("c")
    # Only a model with a canary in progress has a URL of its own for it.
    canary = Endpoints(urls={"a": "http://a", "b": "http://b"}, canary_urls={"a": "http://latest-a"})
    assert canary.canary_url("a") == "http://latest-a" and canary.canary_url("b") == "http://b"
    with pytest.raises(KeyError, match="no endpoint for model 'c'"):
        canary.canary_url("c")


def test_only_targets_that_split_traffic_have_canary_steps():
    assert LocalTarget().canary_steps() == () and KubernetesTarget().canary_steps() == ()
    with pytest.raises(NotImplementedError, match="'kubernetes' cannot split traffic"):
        KubernetesTarget().serve_canary("gs://b/s", "demo", {"classifier": 2}, "classifier", 10, 1.0)


def test_the_local_target_serves_any_store_and_needs_a_model(tmp_path):
    target = LocalTarget()
    target.check(str(tmp_path))
    target.check("gs://bucket/stages")
    assert target.checks_timeout_s(300.0) == 60.0
    with pytest.raises(ValueError, match="demo: no model to serve"):
        with target.endpoints(str(tmp_path), "demo", {}):
            pass


def test_the_kubernetes_target_needs_gcs_and_waits_as_long_as_the_rollout():
    target = KubernetesTarget()
    with pytest.raises(ValueError, match=r"stages_root must be gs://<bucket>\[/<prefix>\]; got '/tmp/stages'"):
        target.check("/tmp/stages")
    target.check("gs://bucket/stages")
    assert target.checks_timeout_s(300.0) == 300.0
    with target.endpoints("gs://bucket/stages", "prod", {"clf": 3}) as endpoints:
        assert endpoints.urls == {"clf": "http://model-server.ltp-prod.svc.cluster.local:8501"}


def test_a_promotions_config_sets_the_kserve_targets_mode_and_canary_steps():
    kserve = KServeTarget.from_config(PromoteConfig(target="kserve", kserve_mode="standard", canary_steps=(20, 100)))
    assert (kserve.kserve_mode, kserve.steps) == ("standard", (20, 100))
    assert KServeTarget.from_config(PromoteConfig(target="kserve")).canary_steps() == (10, 50, 100)
    with pytest.raises(ConfigError, match=r"promote.canary_steps: expected increasing percentages .* got \(50, 10\)"):
        PromoteConfig(canary_steps=(50, 10))
    with pytest.raises(ConfigError, match="promote.kserve_mode: expected 'knative' or 'standard', got 'Serverless'"):
        PromoteConfig(kserve_mode="Serverless")


def test_a_monitors_config_builds_each_target_as_a_promotion_does():
    expected_steps = {"local": (), "kubernetes": (), "kserve": (10, 50, 100)}
    for name, steps in expected_steps.items():
        target = target_class(name).from_config(MonitorConfig(target=name))
        assert (target.name, target.canary_steps()) == (name, steps)
    assert KServeTarget.from_config(MonitorConfig(target="kserve")).kserve_mode == "knative"
