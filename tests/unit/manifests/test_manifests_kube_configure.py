"""The kubernetes target's objects without an API server: rendering a stage and pinning the models' versions."""

import functools

import kubernetes_validate
import pytest

from components import kube as kubeapi
from components.serving.stages import StageRegistry
from components.serving.targets import kubernetes as kube

ROOT = "gs://models-bucket/stages"


@functools.cache
def rendered(stage):
    return tuple(kube.render_stage(stage))


def configure(stage="staging", version=3, model_name="classifier", root=ROOT, cause="test", others=None):
    """The stage's objects serving ``others`` and ``model_name`` at ``version``."""
    models = {**(others or {}), model_name: version}
    return kube.configure_stage(
        list(rendered(stage)), stage=stage, stages=StageRegistry(root), models=models, change_cause=cause
    )


def by_kind(objs, kind):
    found = [o for o in objs if o["kind"] == kind]
    if kind == "ConfigMap":  # the model config; the monitoring config is the other one
        found = [o for o in found if o["metadata"]["name"].startswith(kube.MODEL_CONFIG_NAME)]
    (obj,) = found
    return obj


def test_render_stage_uses_the_overlay():
    objs = kube.render_stage("prod")
    assert {o["metadata"]["namespace"] for o in objs} == {"ltp-prod"}
    assert kube.available_stages() == ["demo", "prod", "staging"]


def test_render_unknown_stage_names_the_stages_that_exist():
    with pytest.raises(kubeapi.KubeDeployError, match=r"no overlay for stage 'qa'.*\['demo', 'prod', 'staging'\]"):
        kube.render_stage("qa")


def test_a_stage_must_be_a_plain_folder_name():
    with pytest.raises(kubeapi.KubeDeployError, match="stage must be an overlay's folder name"):
        kube.render_stage("../base")


def test_model_config_pins_the_version_at_the_stage_path():
    objs = configure(version=3)
    config_map = by_kind(objs, "ConfigMap")
    assert config_map["data"] == {
        "models.config": (
            "model_config_list {\n"
            "  config {\n"
            '    name: "classifier"\n'
            '    base_path: "gs://models-bucket/stages/staging/models/classifier"\n'
            '    model_platform: "tensorflow"\n'
            "    model_version_policy {\n"
            "      specific {\n"
            "        versions: 3\n"
            "      }\n"
            "    }\n"
            "  }\n"
            "}\n"
        )
    }
    dep = by_kind(objs, "Deployment")
    volume = next(v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "model-config")
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    assert config_map["metadata"]["name"].startswith("model-server-config-")
    assert dep["spec"]["template"]["metadata"]["annotations"][kube.VERSIONS_ANNOTATION] == "classifier=3"
    assert dep["metadata"]["annotations"][kube.MODEL_PATH_ANNOTATION] == "gs://models-bucket/stages/staging/models"


def test_model_config_lists_every_model_the_stage_serves():
    objs = configure("demo", model_name="detector", version=1, others={"classifier": 4, "detector": 7})
    text = by_kind(objs, "ConfigMap")["data"]["models.config"]
    config = lambda name, version: (  # noqa: E731
        "  config {\n"
        f'    name: "{name}"\n'
        f'    base_path: "gs://models-bucket/stages/demo/models/{name}"\n'
        '    model_platform: "tensorflow"\n'
        "    model_version_policy {\n"
        "      specific {\n"
        f"        versions: {version}\n"
        "      }\n"
        "    }\n"
        "  }\n"
    )
    # Sorted by name, each at its version.
    assert text == "model_config_list {\n" + config("classifier", 4) + config("detector", 1) + "}\n"
    dep = by_kind(objs, "Deployment")
    served = dep["spec"]["template"]["metadata"]["annotations"][kube.VERSIONS_ANNOTATION]
    assert served == "classifier=4,detector=1"
    assert kube.parse_versions_annotation(served) == {"classifier": 4, "detector": 1}
    # TensorFlow Serving answers only once every model loaded: the probes ask the first by name.
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/v1/models/classifier"
    # The template is a function of the models and versions, not of which one was deployed last.
    again = configure("demo", model_name="classifier", version=4, others={"detector": 1})
    assert by_kind(again, "Deployment")["spec"]["template"] == dep["spec"]["template"]
    for obj in objs:
        kubernetes_validate.validate(obj, "1.33.0", strict=True)


def test_model_config_text_refuses_an_empty_or_repeated_list():
    with pytest.raises(ValueError, match="at least one model"):
        kube.model_config_text([])
    with pytest.raises(ValueError, match="once in a model config"):
        kube.model_config_text([("a", "gs://b/a", 1), ("a", "gs://b/a", 2)])


@pytest.mark.parametrize("stage", ["demo", "staging", "prod"])
def test_what_is_applied_is_still_valid_kubernetes(stage):
    for obj in configure(stage, version=12, model_name="fashion_cnn"):
        kubernetes_validate.validate(obj, "1.33.0", strict=True)


def test_same_version_same_template_other_version_new_template():
    template = lambda objs: by_kind(objs, "Deployment")["spec"]["template"]  # noqa: E731
    assert template(configure(version=3, cause="deploy")) == template(configure(version=3, cause="rollback"))
    assert template(configure(version=3)) != template(configure(version=4))
    names = {by_kind(configure(version=v), "ConfigMap")["metadata"]["name"] for v in (3, 4)}
    assert len(names) == 2


def test_input_objects_are_not_modified():
    objs = list(rendered("demo"))
    before = repr(objs)
    configure("demo")
    assert repr(objs) == before


def test_probes_follow_the_model_name():
    dep = by_kind(configure(model_name="fashion_cnn"), "Deployment")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/v1/models/fashion_cnn"
    assert 'name: "fashion_cnn"' in by_kind(configure(model_name="fashion_cnn"), "ConfigMap")["data"]["models.config"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"root": "stages"}, r"stages_root must be gs://"),
        ({"root": "gs://"}, r"stages_root must be gs://"),
        ({"version": -1}, r"version must be an int >= 0"),
        ({"version": True}, r"version must be an int >= 0"),
        ({"model_name": 'a"b'}, r"model_name must be letters"),
        ({"model_name": "a/b"}, r"model_name must be letters"),
        ({"root": 'gs://b/"x'}, r"base_path must have no quotes"),
    ],
)
def test_bad_arguments_are_refused_with_the_reason(kwargs, message):
    with pytest.raises(ValueError, match=message):
        configure(**kwargs)


def test_a_rendered_deployment_without_the_model_config_volume_is_refused():
    objs = [dict(o) for o in rendered("demo")]
    dep = by_kind(objs, "Deployment")
    dep["spec"] = {**dep["spec"], "template": {**dep["spec"]["template"]}}
    dep["spec"]["template"]["spec"] = {**dep["spec"]["template"]["spec"], "volumes": []}
    with pytest.raises(kubeapi.KubeDeployError, match="no configMap volume named 'model-config'"):
        kube.configure_stage(objs, stage="demo", stages=StageRegistry(ROOT), models={"classifier": 1}, change_cause="x")


def test_unsupported_kinds_are_refused_before_any_request():
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ltp-demo"}}
    with pytest.raises(kubeapi.KubeDeployError, match="belong in manifests/namespaces"):
        kubeapi.apply_objects(None, [namespace])
