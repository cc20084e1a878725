"""``python -m components.evaluate`` on a detector and on a classifier (the session's tiny models).

Each task's result decides what the command writes (a classifier's confusion matrix, none for a
detector), and the served model name, whose prod record is the baseline, defaults to the task's.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.detection_fixtures import tiny_detection
from tests.eval_bench_fixtures import stages_with_prod, tiny_assets

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _evaluate(model: str, dataset: str, out: Path, *flags: str) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "components.evaluate", "--model-dir", model, "--dataset", dataset]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [*args, "--output-dir", str(out), *flags], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def _stages(root: Path) -> str:
    # prod serves a classifier and a detector side by side, each with its own metrics
    stages_with_prod(root, {"accuracy": 0.99}, model_name="classifier")
    return stages_with_prod(root, {"ap50": 0.99}, model_name="detector")


def test_the_command_scores_a_detector_against_prod_s_detector(tmp_path):
    assets = tiny_detection()
    stages = _stages(tmp_path / "stages")
    done = _evaluate(
        assets["model"], assets["dataset"], tmp_path / "out", "--stages-root", stages, "--limit", "16",
        "--value-threshold", "ap50=0.0", "--change-threshold", "ap50=0.0",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["blessing.json", "metrics.json", "report.md", "slices.json"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert {"ap", "ap50", "ap75", "ar100"} <= set(metrics) and metrics["num_examples"] == 16
    # the slice table: per class and per COCO object area from the COCOeval run, and the size bucket;
    # 16 images are below the minimum slice size, so a size slice is listed, not scored
    slices = {row["key"]: row for row in json.loads((out / "slices.json").read_text())}
    assert {"area:small", "area:medium", "area:large"} <= set(slices) and any(k.startswith("class:") for k in slices)
    size = [row for key, row in slices.items() if key.startswith("size:")]
    assert sum(row["count"] for row in size) == 16 and all(row["metrics"] == {} for row in size)
    assert all(not k.startswith("slice/size:") for k in metrics)  # only scored slices are recorded
    reasons = json.loads((out / "blessing.json").read_text())["reasons"]
    # the baseline is the detector prod serves (ap50 0.99), not the classifier
    assert any("ap50" in r and "vs prod 0.9900" in r for r in reasons), reasons
    assert "blessed: no" in done.stdout


def test_the_command_scores_a_classifier_and_writes_its_confusion_matrix(tmp_path):
    assets = tiny_assets()
    stages = _stages(tmp_path / "stages")
    done = _evaluate(
        assets["model"], assets["dataset"], tmp_path / "out", "--stages-root", stages,
        "--value-threshold", "accuracy=0.0", "--change-threshold", "accuracy=0.0",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = tmp_path / "out"
    confusion = json.loads((out / "confusion.json").read_text())
    assert len(confusion["class_names"]) == 10 and sum(map(sum, confusion["matrix"])) == 60
    reasons = json.loads((out / "blessing.json").read_text())["reasons"]
    assert any("accuracy" in r and "vs prod 0.9900" in r for r in reasons), reasons
