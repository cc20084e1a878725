"""Pipeline steps in the built project image, as a cluster runs them (``.ci/images`` builds it first).

The image is the ``cpu`` variant under the exact name the compiled components give
(``components.images.PROJECT_IMAGE``); kfp.local's ``DockerRunner`` (``make run RUNNER=container``)
runs each step's compiled command in it as user 1000, through Podman's Docker API here.
"""

import json
import subprocess

import numpy as np
import pytest
from PIL import Image

from components.images import PROJECT_IMAGE
from pipelines import flow
from pipelines.tools import run_local
from tests.eval_bench_fixtures import CLASSES, make_image

pytestmark = pytest.mark.image


def _engine() -> str:
    for tool in ("docker", "podman"):
        if subprocess.run([tool, "info"], capture_output=True).returncode == 0:
            return tool
    pytest.fail("no container engine answers: run .ci/images, which installs Podman and builds the image")


def test_the_image_runs_as_user_1000_with_the_project_and_tensorflow():
    done = subprocess.run(
        [_engine(), "run", "--rm", PROJECT_IMAGE, "python", "-c",
         "import os, tensorflow as tf, trainer, kfp; print(os.getuid(), tf.__version__, kfp.__version__)"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    uid, tf_version, kfp_version = done.stdout.split()[-3:]
    assert uid == "1000" and tf_version.startswith("2.21") and kfp_version == "2.17.3"


def test_the_main_pipeline_runs_its_steps_in_the_image_and_a_failing_step_fails(tmp_path):
    root, stages = tmp_path / "root", tmp_path / "root" / "stages"
    settings = dict(
        flow.run_form("classification"),
        source="fashion-mnist", limit_per_split=3000, epochs=2, value_thresholds={"accuracy": 0.3},
        benchmark_images=256, benchmark_batch_size=64, accelerator_type="", accelerator_count=0,
    )  # fmt: skip
    settings.pop("stages_root", None)
    ok = run_local.run_pipeline(settings, root, stages, runner="container", tty=False)
    assert ok.ok, f"the run failed; see {ok.run_dir}/logs"
    outputs = run_local.task_outputs(ok.run_dir)
    evaluation = next(v for k, v in outputs.items() if k.startswith("evaluate-model"))
    assert 0.3 <= evaluation["metrics"]["accuracy"] <= 1.0 and evaluation["parameters"]["Output"] is True
    model = ok.run_dir / "train-model" / "model"
    assert (model / "saved_model" / "saved_model.pb").is_file()
    assert "## Data checks" in (model / "model_card.md").read_text()  # written by user 1000 in the image
    checked = json.loads((ok.run_dir / "validate-dataset" / "statistics" / "validation.json").read_text())
    assert checked["passed"] is True
    # A local image folder outside the pipeline root (make run DATA=...) is mounted read-only at
    # its own path; split_by=content hashes its files inside the container.
    photos = tmp_path / "photos"
    rng = np.random.default_rng(0)
    for i in range(400):
        label = i % 10
        (photos / CLASSES[label]).mkdir(parents=True, exist_ok=True)
        Image.fromarray(make_image(label, rng)).save(photos / CLASSES[label] / f"{i}.png")
    folder = run_local.run_pipeline(
        {**settings, "source": str(photos), "limit_per_split": 0, "epochs": 3, "split_by": "content"},
        tmp_path / "folder", tmp_path / "folder" / "stages", runner="container", tty=False,
    )  # fmt: skip
    assert folder.ok, f"the run failed; see {folder.run_dir}/logs"
    converted = json.loads((folder.run_dir / "convert-to-tfrecords" / "dataset" / "dataset.json").read_text())
    assert converted["source"]["uri"] == str(photos) and sum(s["count"] for s in converted["splits"].values()) == 400
    # A step that fails inside its container fails the run (kfp 2.17.3 alone would call a container
    # removed before its exit code was read a success): digits are arrays, not files to hash.
    bad = run_local.run_pipeline(
        {**settings, "source": "digits", "split_by": "content"}, tmp_path / "bad", tmp_path / "bad" / "stages",
        runner="container", tty=False,
    )  # fmt: skip
    assert not bad.ok
    log = (bad.run_dir / "logs" / "convert-to-tfrecords.log").read_text()
    assert "split_by=content needs a source of image files" in log
