"""The sweep pipeline: per-cell accelerator placeholders, the concurrency limit, caching, the exit
join, presets for TPU VM cells and pod slices in the YAML; the grid run locally (slow)."""

import json
import re

import pytest
import yaml
from kfp import compiler

from pipelines import grid, sweep
from pipelines.tools import compile as compile_module


def _load(path):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs[0], (docs[1] if len(docs) > 1 else {})


def _compiled(tmp_path, func):
    path = tmp_path / "s.yaml"
    compiler.Compiler().compile(func, str(path))
    return _load(path)


def _k8s(platform, executor):
    return platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"][executor]


def test_cells_request_their_accelerator_at_run_time_cached_with_a_concurrency_limit(tmp_path):
    spec, platform = _compiled(tmp_path, sweep.build(3))
    resources = spec["deploymentSpec"]["executors"]["exec-train-grid-cell"]["container"]["resources"]
    assert resources["accelerator"]["resourceType"] == "{{$.inputs.parameters['pipelinechannel--accelerator_type']}}"
    assert resources["accelerator"]["resourceCount"] == "{{$.inputs.parameters['pipelinechannel--accelerator_count']}}"
    cell = spec["components"]["comp-sweep-cell"]["dag"]["tasks"]["train-grid-cell"]
    assert cell["cachingOptions"]["enableCache"] is True
    assert cell["retryPolicy"]["maxRetryCount"] == 3
    # The loop's items are the planned cells; each cell's request comes from its own fields.
    loop = spec["components"]["comp-exit-handler-1"]["dag"]["tasks"]["for-loop-2"]
    assert loop["iteratorPolicy"]["parallelismLimit"] == 3
    assert loop["parameterIterator"]["items"]["inputParameter"] == "pipelinechannel--plan-training-grid-Output"
    loop_inputs = spec["components"]["comp-for-loop-2"]["dag"]["tasks"]["sweep-cell"]["inputs"]["parameters"]
    assert (
        loop_inputs["accelerator_type"]["parameterExpressionSelector"] == 'parseJson(string_value)["accelerator_type"]'
    )
    # The join is the exit task: it runs whichever cells failed, and is never answered from the cache.
    root = spec["root"]["dag"]["tasks"]
    assert root["join-training-grid"]["triggerPolicy"]["strategy"] == "ALL_UPSTREAM_TASKS_COMPLETED"
    assert root["join-training-grid"]["cachingOptions"] == {}
    assert "tf-version.cloud-tpus.google.com" in _k8s(platform, "exec-train-grid-cell")["podMetadata"]["annotations"]
    default = spec["root"]["inputDefinitions"]["parameters"]["grid_cells"]["defaultValue"]
    assert [(c["image_size"], c["epochs"]) for c in default] == [(640, 6), (640, 6), (512, 10), (384, 4), (256, 4)]


def test_make_compile_takes_the_parallelism_from_the_flag_or_the_environment(tmp_path, monkeypatch):
    assert compile_module.main(["--output-dir", str(tmp_path), "--sweep-parallelism", "2", "sweep", "gpu_vs_tpu"]) == 0
    for name in ("sweep", "gpu_vs_tpu"):
        assert re.findall(r"parallelismLimit: (\d+)", (tmp_path / f"{name}.yaml").read_text()) == ["2"]
    monkeypatch.setenv(grid.PARALLELISM_ENV, "5")
    assert compile_module.main(["--output-dir", str(tmp_path), "sweep"]) == 0
    assert re.findall(r"parallelismLimit: (\d+)", (tmp_path / "sweep.yaml").read_text()) == ["5"]
    monkeypatch.setenv(grid.PARALLELISM_ENV, "four")
    assert compile_module.main(["--output-dir", str(tmp_path), "sweep"]) == 2
    monkeypatch.delenv(grid.PARALLELISM_ENV)
    assert compile_module.main(["--output-dir", str(tmp_path), "sweep"]) == 0
    assert re.findall(r"parallelismLimit: (\d+)", (tmp_path / "sweep.yaml").read_text()) == [
        str(grid.DEFAULT_PARALLELISM)
    ]


def test_gke_tpu_vm_cells_get_node_selectors_from_a_compile_time_preset(tmp_path):
    spec, platform = _compiled(tmp_path, sweep.build(2, preset="gke-tpu-v5e-2x4"))
    resources = spec["deploymentSpec"]["executors"]["exec-train-grid-cell"]["container"]["resources"]
    assert (resources["accelerator"]["resourceType"], resources["accelerator"]["resourceCount"]) == (
        "google.com/tpu",
        "8",
    )
    k8s = _k8s(platform, "exec-train-grid-cell")
    assert k8s["nodeSelector"]["labels"] == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
        "cloud.google.com/gke-tpu-topology": "2x4",
    }


@pytest.mark.parametrize("preset, resource, cores", [
    ("tpu-v2-32", "cloud-tpus.google.com/v2", "32"),
    ("tpu-v3-32", "cloud-tpus.google.com/v3", "32"),
    ("tpu-v3-64", "cloud-tpus.google.com/v3", "64"),
    ("tpu-v3-128", "cloud-tpus.google.com/v3", "128"),
])  # fmt: skip
def test_legacy_pod_slices_are_one_pod_with_the_tpu_annotation(tmp_path, preset, resource, cores):
    from components.images import TF_VERSION

    spec, platform = _compiled(tmp_path, sweep.build(1, preset=preset))
    resources = spec["deploymentSpec"]["executors"]["exec-train-grid-cell"]["container"]["resources"]
    assert (resources["accelerator"]["resourceType"], resources["accelerator"]["resourceCount"]) == (resource, cores)
    k8s = _k8s(platform, "exec-train-grid-cell")
    assert k8s["podMetadata"]["annotations"] == {"tf-version.cloud-tpus.google.com": TF_VERSION}
    assert "nodeSelector" not in k8s


def test_a_pod_slice_scales_the_global_batch_and_learning_rate_with_its_cores():
    # What a cell on tpu-v3-128 trains with: 128 replicas (one per core), as the trainer computes it.
    from components.sweep.config import SweepConfig
    from components.sweep.grid import plan_grid
    from trainer.config import TrainConfig
    from trainer.training.setup import resolve_global_batch, scaled_learning_rate

    settings = SweepConfig(model="retinanet", source="shapes", epochs=4, batch_size_per_replica=16)
    defaults, context = settings.grid_defaults(), settings.key_context()
    (cell,) = plan_grid(
        [{"accelerator": "tpu-v3-128", "accelerator_type": "cloud-tpus.google.com/v3", "accelerator_count": 128}],
        defaults,
        context,
    )
    config = TrainConfig.from_dict(cell.train_fields())
    assert resolve_global_batch(config, 128) == 2048 and resolve_global_batch(config, 8) == 128
    assert scaled_learning_rate(config, 2048) == pytest.approx(16 * scaled_learning_rate(config, 128))


@pytest.mark.slow
def test_a_small_grid_runs_locally_and_a_failed_cell_is_a_row(tmp_path):
    from kfp import local

    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path))
    bad = {"accelerator": "cpu", "name": "bad option", "image_size": 32, "epochs": 1, "model_options": {"nope": 1}}
    # Two of make sweep's cells (each cell is a process that pays TensorFlow's start-up), both
    # settings differing, and a cell that fails.
    good = [c for c in sweep.LOCAL_GRID if (c["image_size"], c["epochs"]) in {(32, 1), (64, 2)}]
    sweep.pipeline(
        grid_cells=[*good, bad],
        source="shapes:60",
        model_options=sweep.LOCAL_MODEL_OPTIONS,
        epochs=1,
        steps_per_epoch=2,
        batch_size_per_replica=8,
        learning_rate=0.016,
    )
    (report,) = tmp_path.glob("sweep-*/join-training-grid/report")
    text = report.read_text()
    lines = {line.split(" | ")[0][2:]: line for line in text.splitlines() if line.startswith("| cpu ") or "bad" in line}
    for size, epochs in ((32, 1), (64, 2)):
        line = lines[f"cpu {size}px {epochs}ep b8"]
        assert f"| cpu | {size} | {epochs} | 8 (8) |" in line and "failed" not in line
    assert "failed: " in lines["bad option"] and "model_options.nope: unknown detector option" in lines["bad option"]
    assert "| mAP@0.5 | AP |" in text and "No setting (image size, epochs) ran on more than one accelerator" in text
    (chart,) = tmp_path.glob("sweep-*/join-training-grid/chart")
    assert chart.read_text().count("<svg") == 1
    (summary,) = tmp_path.glob("sweep-*/join-training-grid/executor_output.json")
    best = json.loads(summary.read_text())["parameterValues"]["Output"]
    assert best["cells"] == 3 and best["failed"] == 1 and best["fastest"].startswith("cpu ")
    rows = list(tmp_path.glob("sweep-rows/*.json"))
    assert len(rows) == 3
