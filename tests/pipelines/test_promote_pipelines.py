"""The promote and rollback pipelines: compiled (no TensorFlow) and run whole under kfp.local."""

import subprocess
import sys

import pytest
import yaml
from kfp import compiler


@pytest.mark.parametrize("name", ["promote", "rollback"])
def test_compiles_without_tensorflow_and_never_caches(tmp_path, name):
    code = (
        "import sys, importlib; from kfp import compiler; "
        f"compiler.Compiler().compile(importlib.import_module('pipelines.{name}').pipeline, r'{tmp_path}/p.yaml'); "
        "assert 'tensorflow' not in sys.modules, 'compiling imported TensorFlow'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    spec = next(yaml.safe_load_all((tmp_path / "p.yaml").read_text()))  # the platform spec follows
    assert spec["pipelineInfo"]["name"] == name
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["served_model_name"]["defaultValue"] == "classifier"
    # The serving target's own settings are one mapping (kserve: {mode: standard}), empty by default.
    assert params["serving_options"]["parameterType"] == "STRUCT"
    (task,) = spec["root"]["dag"]["tasks"].values()
    assert task["cachingOptions"] == {}  # caching off: the step changes what a stage serves
    args = task["inputs"]["parameters"]
    assert args["pipeline_root"]["runtimeValue"]["constant"] == "{{$.pipeline_root}}"
    assert args["run_id"]["runtimeValue"]["constant"] == "{{$.pipeline_job_name}}"


@pytest.mark.slow
@pytest.mark.integration
def test_promote_and_rollback_pipelines_run_locally(tmp_path):
    from kfp import local

    from components.promote.run import promote
    from components.serving import stages
    from components.serving.config import PromoteConfig
    from pipelines import promote as promote_pipeline
    from pipelines import rollback as rollback_pipeline
    from tests.promote_models import export_tiny_model, write_digits_dataset

    root = str(tmp_path / "stages")
    dataset = write_digits_dataset(tmp_path / "dataset", count=32)
    demo = PromoteConfig(stage="demo", stages_root=root, model_name="clf", min_smoke_accuracy=0.6)
    for i, name in enumerate(["m1", "m2"]):
        export_tiny_model(str(tmp_path / name / "saved_model"), steps=150, seed=i)
        promote(str(tmp_path / name), dataset, demo, run_id=f"setup-{i}", metrics={"accuracy": 0.8 + i / 100})
    assert stages.StageRegistry(root).read_current("demo", "clf").version == 2

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"), raise_on_error=True)
    promote_pipeline.pipeline(source_stage="demo", target_stage="staging", stages_root=root, served_model_name="clf")
    staging = stages.StageRegistry(root).read_current("staging", "clf")
    assert staging.version == 1 and staging.source_version == 2 and staging.metrics == {"accuracy": 0.81}
    assert {c.name: c.passed for c in staging.checks}["prediction"] and staging.run.startswith("promote-")

    rollback_pipeline.pipeline(stage="demo", stages_root=root, served_model_name="clf")
    current = stages.StageRegistry(root).read_current("demo", "clf")
    assert current.action == "rollback" and current.version == 1 and current.verified
    assert stages.StageRegistry(root).list_versions("demo", "clf") == [1]

    # demo now serves version 1, which is not what was asked for: refused, and staging is unchanged.
    with pytest.raises(RuntimeError):
        promote_pipeline.pipeline(
            source_stage="demo", target_stage="staging", version=2, stages_root=root, served_model_name="clf"
        )
    assert stages.StageRegistry(root).read_current("staging", "clf").version == 1
    # prod only from staging.
    with pytest.raises(RuntimeError):
        promote_pipeline.pipeline(source_stage="demo", target_stage="prod", stages_root=root, served_model_name="clf")
    assert stages.StageRegistry(root).read_current("prod", "clf") is None


def test_compile_module_lists_both():
    from pipelines.tools import compile as compile_module

    assert compile_module.PIPELINES["promote"] == "pipelines.promote"
    assert compile_module.PIPELINES["rollback"] == "pipelines.rollback"
    assert compiler  # imported above: kfp is a dependency of the pipeline side


def test_end_to_end_gates_against_the_served_name_it_promotes(tmp_path):
    from kfp import compiler as kfp_compiler

    from pipelines import end_to_end

    kfp_compiler.Compiler().compile(end_to_end.pipeline, str(tmp_path / "e2e.yaml"))
    spec = next(yaml.safe_load_all((tmp_path / "e2e.yaml").read_text()))
    tasks = spec["root"]["dag"]["tasks"]
    evaluate = tasks["evaluate-model"]["inputs"]["parameters"]
    assert evaluate["served_model_name"]["componentInputParameter"] == "served_model_name"
    assert tasks["promote-model"]["inputs"]["parameters"]["model_name"]["componentInputParameter"] == (
        "served_model_name"
    )
