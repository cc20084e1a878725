"""The Kubernetes settings of every compiled pipeline's steps: labels, deadlines, secrets, pull secrets, TTL.

kfp.local ignores them: the compiled YAML's platform spec is what a cluster reads, so it is what
these tests read, for every pipeline ``make compile`` writes.
"""

import re

import pytest
import yaml
from kfp import compiler

from pipelines import platform
from pipelines.tools.compile import PIPELINES, compile_all
from trainer.budget.limits import MAX_BUDGET_S

# What the steps declare on their surfaces (components/<step>/surface.py): the components that may
# download from a model hub (the hub Secret) and those a budget or a timeout keeps long.
HUB = LONG = frozenset({"train-model", "train-grid-cell", "train-search-trial", "time-training-cell", "run-notebook"})
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?)?$")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    folder = tmp_path_factory.mktemp("compiled")
    out = {}
    for path in compile_all(folder):
        pipeline_spec, platform_spec = list(yaml.safe_load_all(path.read_text()))
        out[path.stem] = (pipeline_spec, platform_spec["platforms"]["kubernetes"])
    return out


def _containers(pipeline_spec):
    return {k for k, v in pipeline_spec["deploymentSpec"]["executors"].items() if "container" in v}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_every_step_has_its_labels_and_a_deadline(compiled, name):
    pipeline_spec, kube = compiled[name]
    executors = kube["deploymentSpec"]["executors"]
    assert _containers(pipeline_spec) <= set(executors), "a container step without platform settings"
    pipeline_name = pipeline_spec["pipelineInfo"]["name"]
    for executor in _containers(pipeline_spec):
        spec = executors[executor]
        labels = spec["podMetadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "lean-tpu-pipelines"
        assert labels["lean-tpu-pipelines.dev/pipeline"] == platform.label_value(pipeline_name)
        assert executor.removeprefix("exec-").startswith(labels["lean-tpu-pipelines.dev/step"])
        assert all(LABEL_VALUE.match(v) for v in labels.values()), labels
        deadline = int(spec["activeDeadlineSeconds"])
        if labels["lean-tpu-pipelines.dev/step"] in LONG:
            assert deadline > MAX_BUDGET_S  # longer than any time budget or notebook timeout may ask
        else:
            assert deadline == platform.DEADLINE_S
        (volume,) = spec["secretAsVolume"]  # a service account key, where Workload Identity is not used
        assert volume["optional"] is True and volume["mountPath"] == "/var/secrets/lean-tpu-pipelines"
    assert kube["pipelineConfig"]["resourceTtlOnCompletion"] == platform.TTL_S


def test_steps_that_download_weights_read_the_hub_secret_by_its_run_time_name_and_optionally(compiled):
    seen = set()
    for name, (pipeline_spec, kube) in compiled.items():
        top_level = pipeline_spec["root"]["inputDefinitions"]["parameters"]
        assert top_level["secret_name"]["defaultValue"] == platform.DEFAULT_SECRET, name
        assert "Kubernetes Secret" in top_level["secret_name"]["description"]
        for executor, spec in kube["deploymentSpec"]["executors"].items():
            step = spec["podMetadata"]["labels"]["lean-tpu-pipelines.dev/step"]
            secrets = spec.get("secretAsEnv", [])
            assert bool(secrets) == (step in HUB), (name, executor)
            for secret in secrets:
                seen.add(step)
                assert secret["optional"] is True
                assert {m["envVar"] for m in secret["keyToEnv"]} == set(platform.SECRET_KEYS.values())
                by_name = secret["secretNameParameter"]
                # the top-level steps take the run parameter (a step inside a condition through the
                # condition's input); a grid cell's or trial's the compile-time name
                assert by_name in (
                    {"componentInputParameter": "secret_name"},
                    {"componentInputParameter": "pipelinechannel--secret_name"},
                    {"runtimeValue": {"constant": platform.DEFAULT_SECRET}},
                ), by_name
    assert {"train-model", "train-grid-cell", "train-search-trial", "run-notebook"} <= seen


def test_promotions_carry_their_stage_and_the_validate_step_is_in_the_pipelines_that_train(compiled):
    _, kube = compiled["end_to_end"]
    stages = {
        spec["podMetadata"]["labels"].get("lean-tpu-pipelines.dev/stage")
        for spec in kube["deploymentSpec"]["executors"].values()
    }
    assert {"demo", "staging", "prod"} <= stages
    for name in ("end_to_end", "detection", "sweep"):
        assert "exec-validate-dataset" in compiled[name][1]["deploymentSpec"]["executors"], name


def test_pull_secrets_and_a_preset_label_are_compile_time_settings(tmp_path):
    from components.promote.component import rollback_stage

    settings = platform.Settings(pull_secrets=("regcred", "mirror"), ttl_s=0)

    @platform.pipeline(name="probe", settings=settings, labels=platform.preset_labels("gke-tpu-v5e-2x4"))
    def probe(stage: str = "prod"):
        """A probe.

        Args:
            stage: the stage.
        """
        rollback_stage(stage=stage)

    path = tmp_path / "probe.yaml"
    compiler.Compiler().compile(probe, str(path))
    _, platform_spec = list(yaml.safe_load_all(path.read_text()))
    kube = platform_spec["platforms"]["kubernetes"]
    (spec,) = kube["deploymentSpec"]["executors"].values()
    assert [s["secretName"] for s in spec["imagePullSecret"]] == ["regcred", "mirror"]
    assert spec["podMetadata"]["labels"]["lean-tpu-pipelines.dev/preset"] == "gke-tpu-v5e-2x4"
    assert "pipelineConfig" not in kube  # no TTL asked for


@pytest.mark.parametrize(
    "environ, message",
    [
        ({platform.TTL_ENV: "a week"}, "expected whole seconds"),
        ({platform.PULL_ENV: "RegCred"}, "is not a Kubernetes Secret name"),
        ({platform.SECRET_ENV: "hub tokens"}, "is not a Kubernetes Secret name"),
    ],
)
def test_bad_compile_time_settings_say_what_is_wrong(environ, message):
    with pytest.raises(ValueError, match=message):
        platform.Settings.from_environ(environ)


def test_settings_from_the_environment():
    settings = platform.Settings.from_environ({platform.PULL_ENV: "a, b", platform.TTL_ENV: "3600"})
    assert settings == platform.Settings(platform.DEFAULT_SECRET, ("a", "b"), 3600)
    assert platform.label_value("gke-tpu-v5e/2x4 preset") == "gke-tpu-v5e-2x4-preset"


@pytest.mark.parametrize("name", ["end_to_end", "detection"])
def test_the_main_pipelines_take_a_tpu_vm_preset_at_compile_time(tmp_path, name):
    from pipelines.tools.compile import compile_pipeline
    from trainer.budget.pricing import price_of

    path = compile_pipeline(name, tmp_path, preset="gke-tpu-v5e-2x4")
    pipeline_spec, platform_spec = list(yaml.safe_load_all(path.read_text()))
    train = platform_spec["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-train-model"]
    assert train["nodeSelector"]["labels"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "2x4",
    }
    assert train["podMetadata"]["labels"]["lean-tpu-pipelines.dev/preset"] == "gke-tpu-v5e-2x4"
    resources = pipeline_spec["deploymentSpec"]["executors"]["exec-train-model"]["container"]["resources"]
    assert (
        resources["accelerator"]["resourceType"] == "google.com/tpu"
        and resources["accelerator"]["resourceCount"] == "8"
    )
    # the run form has no accelerator any more; the step is priced by the preset's name
    assert not {"accelerator_type", "accelerator_count"} & set(pipeline_spec["root"]["inputDefinitions"]["parameters"])
    inputs = pipeline_spec["root"]["dag"]["tasks"]["train-model"]["inputs"]["parameters"]
    key = inputs["pod_accelerator_type"]["runtimeValue"]["constant"]
    assert price_of(key, 8)[0] == "gke-tpu-v5e-2x4"


def test_an_unknown_preset_is_refused_before_anything_is_compiled(tmp_path, capsys):
    from pipelines.tools.compile import main

    assert main(["--output-dir", str(tmp_path), "--accelerator", "tpu-v9-8", "end_to_end"]) == 2
    assert "unknown 'tpu-v9-8'" in capsys.readouterr().err and not list(tmp_path.iterdir())
