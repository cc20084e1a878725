"""The compiled end-to-end YAML: what a user uploads to Kubeflow. The SDK validates none of these
strings, so the tests read the YAML and assert them."""

import subprocess
import sys

import pytest
import yaml

from components import images
from pipelines.tools import compile as compile_mod


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    path = compile_mod.compile_pipeline("end_to_end", tmp_path_factory.mktemp("dist"))
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs[0], (docs[1] if len(docs) > 1 else {})


def _tasks(pipeline_spec):
    """Task name -> task, across nested condition branches; each task gets ``_inherited``: the
    dependencies of the branches it sits in (KFP puts cross-branch edges on the branch task)."""
    out = {}
    stack = [(pipeline_spec["root"]["dag"], set())]
    while stack:
        dag, inherited = stack.pop()
        for name, task in dag["tasks"].items():
            out[name] = dict(task, _inherited=inherited)
            sub = pipeline_spec["components"][task["componentRef"]["name"]].get("dag")
            if sub:
                stack.append((sub, inherited | set(task.get("dependentTasks", []))))
    return out


def _executor(pipeline_spec, task):
    comp = pipeline_spec["components"][task["componentRef"]["name"]]
    return comp["executorLabel"], pipeline_spec["deploymentSpec"]["executors"][comp["executorLabel"]]


def _task_by_display(pipeline_spec, display):
    for name, task in _tasks(pipeline_spec).items():
        if task["taskInfo"]["name"] == display:
            return name, task
    raise AssertionError(
        f"no task named {display!r}: {[t['taskInfo']['name'] for t in _tasks(pipeline_spec).values()]}"
    )


def test_train_task_requests_a_tpu_v2_8_by_default(compiled):
    spec, _ = compiled
    _, train = _task_by_display(spec, "Train")
    _, executor = _executor(spec, train)
    accel = executor["container"]["resources"]["accelerator"]
    # Runtime parameters: the same YAML serves TPU, GPU and CPU.
    assert "accelerator_type" in accel["resourceType"]
    assert "accelerator_count" in accel["resourceCount"]
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["accelerator_type"]["defaultValue"] == "cloud-tpus.google.com/v2"
    assert int(float(params["accelerator_count"]["defaultValue"])) == 8


def test_train_pod_carries_the_tpu_tf_version_annotation(compiled):
    spec, platform = compiled
    _, train = _task_by_display(spec, "Train")
    label, _ = _executor(spec, train)
    annotations = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"][label]["podMetadata"][
        "annotations"
    ]
    assert annotations["tf-version.cloud-tpus.google.com"] == images.TF_VERSION


def test_every_step_runs_the_project_image_without_installing_anything(compiled):
    spec, _ = compiled
    executors = spec["deploymentSpec"]["executors"]
    assert len(executors) >= 5
    for label, executor in executors.items():
        container = executor["container"]
        assert container["image"] == images.PROJECT_IMAGE, label
        assert "pip install" not in " ".join(container["command"]), label


def test_image_is_overridable_at_compile_time(tmp_path):
    path = compile_mod.compile_pipeline("end_to_end", tmp_path, image="registry.example/ltp:test")
    spec = next(yaml.safe_load_all(path.read_text()))
    assert {e["container"]["image"] for e in spec["deploymentSpec"]["executors"].values()} == {
        "registry.example/ltp:test"
    }


def test_parameters_have_defaults_and_descriptions(compiled):
    spec, _ = compiled
    params = spec["root"]["inputDefinitions"]["parameters"]
    for name in ("source", "epochs", "accelerator_type", "value_thresholds", "promote_to_prod", "stages_root"):
        assert name in params
    for name, param in params.items():
        assert param.get("isOptional") is True, f"{name} has no default"
        assert param.get("description"), f"{name} has no description"
    assert params["source"]["defaultValue"] == "fashion-mnist"
    assert params["promote_to_prod"]["defaultValue"] is False
    assert params["value_thresholds"]["defaultValue"], "an unedited UI run must be able to bless"


def test_dag_edges_follow_the_flow(compiled):
    spec, _ = compiled
    by_display = {t["taskInfo"]["name"]: (n, t) for n, t in _tasks(spec).items()}
    names = {d: n for d, (n, _) in by_display.items()}

    def upstream(display):
        task = by_display[display][1]
        deps = set(task.get("dependentTasks", [])) | task["_inherited"]
        for artifact in task.get("inputs", {}).get("artifacts", {}).values():
            producer = artifact.get("taskOutputArtifact", {}).get("producerTask")
            if producer:
                deps.add(producer)
        return deps

    assert names["Convert to TFRecords"] in upstream("Train")
    assert {names["Train"], names["Convert to TFRecords"]} <= upstream("Evaluate and gate")
    assert names["Train"] in upstream("Benchmark inference")
    assert {names["Evaluate and gate"], names["Benchmark inference"]} <= upstream("Promote to demo")
    assert names["Promote to demo"] in upstream("Promote to staging")
    assert names["Promote to staging"] in upstream("Promote to prod")


def test_staging_is_gated_on_the_blessing_and_prod_on_the_request(compiled):
    spec, _ = compiled
    text = yaml.safe_dump(spec)
    conditions = [t["triggerPolicy"]["condition"] for t in _tasks(spec).values() if "triggerPolicy" in t]
    assert any("Output" in c and "true" in c for c in conditions), conditions
    assert any("promote_to_prod" in c for c in conditions), conditions
    # prod sits inside both conditions: its component lives in a nested branch dag.
    assert "Promote to prod" in text


def test_steps_with_side_effects_are_never_cached(compiled):
    spec, _ = compiled
    for display in ("Promote to demo", "Promote to staging", "Promote to prod", "Evaluate and gate"):
        _, task = _task_by_display(spec, display)
        assert task["cachingOptions"].get("enableCache", False) is False, display


def test_compiling_does_not_import_tensorflow():
    code = (
        "import sys; from pipelines.tools import compile as c; import tempfile, pathlib;"
        "c.compile_all(pathlib.Path(tempfile.mkdtemp()), names=['end_to_end']);"
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_compile_cli_rejects_unknown_pipeline(tmp_path, capsys):
    assert compile_mod.main(["--output-dir", str(tmp_path), "nope"]) == 2
    assert "unknown pipeline 'nope'" in capsys.readouterr().err


def test_workers_and_launcher_are_run_parameters_of_the_train_step(compiled):
    spec, platform = compiled
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert int(float(params["workers"]["defaultValue"])) == 1 and params["workers"]["parameterType"] == "NUMBER_INTEGER"
    assert params["launcher"]["defaultValue"] == "auto"
    _, train = _task_by_display(spec, "Train")
    inputs = train["inputs"]["parameters"]
    assert inputs["workers"] == {"componentInputParameter": "workers"}
    assert inputs["launcher"] == {"componentInputParameter": "launcher"}
    # The launcher pod's identity, for the workers' ownerReference and namespace.
    label, _ = _executor(spec, train)
    env = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"][label]["fieldPathAsEnv"]
    assert {e["name"]: e["fieldPath"] for e in env} == {
        "LTP_POD_NAME": "metadata.name",
        "LTP_POD_UID": "metadata.uid",
        "LTP_POD_NAMESPACE": "metadata.namespace",
    }
