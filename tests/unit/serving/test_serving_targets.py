"""The serving-target registry and its seam, without servers or clusters."""

import pytest

from components.serving.config import LOAD_TESTS, STAGES, MonitorConfig, PromoteConfig
from components.serving.stages import StageRegistry
from components.serving.targets import (
    Endpoints,
    ServingTarget,
    TargetError,
    TargetSettings,
    get_target,
    register,
    target_class,
    target_names,
)
from components.serving.targets.kserve import KServeTarget
from components.serving.targets.kubernetes import KubernetesTarget
from components.serving.targets.local import LocalTarget
from trainer.config import ConfigError

GCS = StageRegistry("gs://bucket/stages")


def test_the_registry_knows_each_target_by_name(tmp_path):
    assert {"kserve", "kubernetes", "local"} <= set(target_names())
    assert target_class("local") is LocalTarget and target_class("kubernetes") is KubernetesTarget
    assert target_class("kserve") is KServeTarget
    local = get_target("local", StageRegistry(str(tmp_path)), {"port": 8600})
    assert isinstance(local, LocalTarget) and local.options.port == 8600
    with pytest.raises(TargetError, match=r"unknown serving target 'seldon'; expected one of .*kserve.*local"):
        get_target("seldon", GCS)


def test_a_name_is_registered_once():
    class Another(LocalTarget):
        name = "local"

    with pytest.raises(
        TargetError, match="serving target 'local' is registered twice: components.serving.targets.local"
    ):
        register(Another)

    class Nameless(ServingTarget):
        pass

    with pytest.raises(TargetError, match="needs a non-empty class attribute name, Nameless has None"):
        register(Nameless)

    class Untyped(ServingTarget):
        name = "untyped"

    with pytest.raises(TargetError, match="'untyped' needs options_type, a ConfigBase of its own settings"):
        register(Untyped)
    assert target_class("local") is LocalTarget and "untyped" not in target_names()


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
    with pytest.raises(TargetError, match=r"unknown serving target 'seldon'; expected one of .*kubernetes"):
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


def test_only_targets_that_split_traffic_have_canary_steps(tmp_path):
    assert LocalTarget(StageRegistry(str(tmp_path))).canary_steps() == () and KubernetesTarget(GCS).canary_steps() == ()
    steps = TargetSettings(canary_steps=(50, 100))
    assert LocalTarget(StageRegistry(str(tmp_path)), settings=steps).canary_steps() == (50, 100)
    assert KubernetesTarget(GCS, settings=steps).canary_steps() == ()  # it cannot split traffic
    with pytest.raises(NotImplementedError, match="'kubernetes' cannot split traffic"):
        KubernetesTarget(GCS).serve_canary("demo", {"classifier": 2}, "classifier", 10, 1.0)


def test_the_local_target_serves_any_store_and_needs_a_model(tmp_path):
    target = LocalTarget(StageRegistry(str(tmp_path)))
    target.check()
    LocalTarget(GCS).check()
    assert target.checks_timeout_s(300.0) == 60.0
    with pytest.raises(ValueError, match="demo: no model to serve"):
        with target.endpoints("demo", {}):
            pass


def test_the_kubernetes_target_needs_gcs_and_waits_as_long_as_the_rollout():
    with pytest.raises(ValueError, match=r"stages_root must be gs://<bucket>\[/<prefix>\]; got '/tmp/stages'"):
        KubernetesTarget(StageRegistry("/tmp/stages")).check()
    target = KubernetesTarget(GCS)
    target.check()
    assert target.checks_timeout_s(300.0) == 300.0
    with target.endpoints("prod", {"clf": 3}) as endpoints:
        assert endpoints.urls == {"clf": "http://model-server.ltp-prod.svc.cluster.local:8501"}
    with KubernetesTarget(GCS, {"cluster_domain": "example.org"}).endpoints("prod", {"clf": 3}) as endpoints:
        assert endpoints.url("clf") == "http://model-server.ltp-prod.svc.example.org:8501"


def test_a_promotions_serving_options_set_the_kserve_targets_mode():
    from components.promote.verify import target_of

    config = PromoteConfig(
        target="kserve", stages_root=GCS.root, serving_options={"mode": "standard"}, canary_steps=(20, 100)
    )
    kserve = get_target("kserve", GCS, config.serving_options, TargetSettings(canary_steps=config.canary_steps))
    assert (kserve.options.mode, kserve.settings.canary_steps, kserve.canary_steps()) == ("standard", (20, 100), ())
    assert get_target("kserve", GCS, {}, TargetSettings(canary_steps=(20, 100))).canary_steps() == (20, 100)
    with pytest.raises(ConfigError, match=r"promote.canary_steps: expected increasing percentages .* got \(50, 10\)"):
        PromoteConfig(canary_steps=(50, 10))
    # The config holds the options as given; the target they are for refuses what it does not take.
    odd = config.replace(serving_options={"mode": "Serverless"})
    with pytest.raises(TargetError, match="serving_options.mode: expected one of .*, got 'Serverless'"):
        target_of(odd, None)
    assert PromoteConfig.from_yaml(config.to_yaml()) == config


def test_a_monitors_config_builds_each_target_as_a_promotion_does():
    expected_steps = {"local": (), "kubernetes": (), "kserve": (10, 50, 100)}
    for name, steps in expected_steps.items():
        config = MonitorConfig(target=name, stages_root=GCS.root)
        target = get_target(config.target, GCS, config.serving_options)
        assert (target.name, target.canary_steps()) == (name, steps)
    config = MonitorConfig(target="kserve", serving_options={"mode": "standard"})
    assert get_target("kserve", GCS, config.serving_options).options.mode == "standard"
