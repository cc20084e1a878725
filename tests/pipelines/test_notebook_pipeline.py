"""The notebook pipeline: the TPU request in the compiled YAML, and one kfp.local run of the demo notebook.

KFP validates none of the resource strings, so the compile tests read the YAML. The kfp.local run
is the very compiled step in a subprocess, on the CPU with a tiny TFRecord dataset.
"""

import json
from pathlib import Path

import nbformat
import pytest
import yaml
from kfp import compiler

from components import images
from components.notebook.render import network_references
from pipelines import notebook
from pipelines.tools import compile as compile_mod

DEMO = Path(__file__).resolve().parents[2] / "components" / "notebook" / "examples" / "gpu_vs_tpu.ipynb"


def _load(path):
    docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d]
    return docs[0], (docs[1] if len(docs) > 1 else {})


def _k8s(platform):
    return platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-run-notebook"]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return _load(compile_mod.compile_pipeline("notebook", tmp_path_factory.mktemp("dist")))


def test_the_notebook_step_requests_a_tpu_v2_8_by_default(compiled):
    spec, platform = compiled
    container = spec["deploymentSpec"]["executors"]["exec-run-notebook"]["container"]
    accel = container["resources"]["accelerator"]
    # runtime parameters: one YAML serves TPU, GPU and CPU; the defaults are the TPU v2-8's
    assert accel["resourceType"] == "{{$.inputs.parameters['pipelinechannel--accelerator_type']}}"
    assert accel["resourceCount"] == "{{$.inputs.parameters['pipelinechannel--accelerator_count']}}"
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["accelerator_type"]["defaultValue"] == "cloud-tpus.google.com/v2"
    assert int(params["accelerator_count"]["defaultValue"]) == 8
    assert _k8s(platform)["podMetadata"]["annotations"] == {"tf-version.cloud-tpus.google.com": images.TF_VERSION}
    assert container["image"] == images.PROJECT_IMAGE
    assert "pip install" not in " ".join(container["command"] + container.get("args", []))


def test_parameters_display_name_no_cache_no_retry(compiled):
    spec, _ = compiled
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["notebook"]["defaultValue"] == notebook.DEMO_NOTEBOOK
    assert params["parameters"]["parameterType"] == "STRUCT"
    assert {"cell_timeout_s", "timeout_s", "files_dir"} <= set(params)
    assert all(p.get("description") for p in params.values())
    task = spec["root"]["dag"]["tasks"]["run-notebook"]
    assert task["taskInfo"]["name"] == "Run notebook"
    assert task["cachingOptions"] == {}  # enableCaching absent: off
    assert "retryPolicy" not in task  # a failing cell is not rerun on the TPU's bill
    outputs = spec["components"]["comp-run-notebook"]["outputDefinitions"]["artifacts"]
    assert outputs["page"]["artifactType"]["schemaTitle"] == "system.HTML"
    assert {"executed_notebook", "files"} <= set(outputs)


def test_the_demo_notebook_is_in_the_package_where_the_image_has_it():
    # Dockerfile: COPY components components, installed from /opt/lean-tpu-pipelines
    assert notebook.DEMO_NOTEBOOK.endswith("/components/notebook/examples/gpu_vs_tpu.ipynb")
    pyproject = (DEMO.parents[3] / "pyproject.toml").read_text()
    assert '"*.ipynb"' in pyproject
    nb = nbformat.read(DEMO, as_version=4)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and "batch_sizes = [256, 512, 1024]" in tagged[0].source


@pytest.mark.parametrize(
    "preset, resource, count",
    [
        ("tpu-v2-8", "cloud-tpus.google.com/v2", "8"),
        ("gke-tpu-v5e-2x4", "google.com/tpu", "8"),
        ("gpu-1", "nvidia.com/gpu", "1"),
    ],
)
def test_a_preset_is_fixed_at_compile_time(tmp_path, preset, resource, count):
    path = tmp_path / "p.yaml"
    compiler.Compiler().compile(notebook.pipeline_for(preset), str(path))
    spec, platform = _load(path)
    accel = spec["deploymentSpec"]["executors"]["exec-run-notebook"]["container"]["resources"]["accelerator"]
    assert (accel["resourceType"], accel["resourceCount"]) == (resource, count)
    assert "accelerator_type" not in spec["root"]["inputDefinitions"]["parameters"]
    assert "retryPolicy" not in spec["root"]["dag"]["tasks"]["run-notebook"]
    k8s = _k8s(platform)
    if preset == "tpu-v2-8":
        assert k8s["podMetadata"]["annotations"]["tf-version.cloud-tpus.google.com"] == images.TF_VERSION
    if preset.startswith("gke-tpu"):
        selectors = k8s["nodeSelector"]["labels"]
        assert selectors["cloud.google.com/gke-tpu-topology"] == "2x4"


def test_an_unknown_preset_is_refused():
    with pytest.raises(ValueError, match="unknown 'tpu-v9-8'"):
        notebook.pipeline_for("tpu-v9-8")


@pytest.mark.slow
def test_the_demo_notebook_runs_under_kfp_local_on_the_cpu(tmp_path):
    from kfp import local

    from tests.datasets import write_test_dataset

    dataset = write_test_dataset(tmp_path / "dataset", splits={"train": 64})
    root = tmp_path / "root"
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root), raise_on_error=True)
    notebook.pipeline(
        notebook=str(DEMO),
        parameters={"dataset": str(dataset), "batch_sizes": [16, 32], "epochs": 2, "steps_per_epoch": 2},
        timeout_s=600,
    )
    (task,) = root.glob("notebook-*/run-notebook")
    executed = nbformat.read(task / "executed_notebook", as_version=4)
    injected = [c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
    # kfp.local handed the dict over with floats; the notebook got ints back
    assert "epochs = 2\n" in injected[0].source and "batch_sizes = [16, 32]" in injected[0].source
    sweep = json.loads((task / "files" / "sweep.json").read_text())
    assert sweep["accelerator"] == "cpu"
    assert [r["batch_size"] for r in sweep["results"]] == [16, 32]
    assert all(len(r["epoch_times_s"]) == 2 and r["steps_per_epoch"] == 2 for r in sweep["results"])
    page = (task / "page").read_text()
    assert "Epoch and step times on cpu (first epoch excluded)" in page
    assert '<td style="text-align:right">32</td>' in page  # the table, rendered
    assert "batch 16: 2 steps per epoch" in page  # printed output
    assert network_references(page) == []
    assert len(page) < 600_000  # shown inline in the Kubeflow UI: keep it small


def test_compiling_and_submitting_import_neither_tensorflow_nor_papermill():
    import subprocess
    import sys

    code = (
        "import sys, pathlib, tempfile; from pipelines.tools import compile as c; import pipelines.tools.submit;"
        "c.compile_all(pathlib.Path(tempfile.mkdtemp()), names=['notebook']);"
        "heavy = sorted(m for m in ('tensorflow', 'keras', 'papermill', 'nbconvert') if m in sys.modules);"
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=DEMO.parents[3])
