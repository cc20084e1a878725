"""``python -m components.promote``: a real local promote, a second one and a rollback, as a user runs them."""

import json
import os
import subprocess
import sys

import pytest

from components.promote import __main__ as cli
from components.serving import stages
from tests.promote_models import export_tiny_model, write_digits_dataset

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def run_cli(*argv):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "components.promote", *argv], capture_output=True, text=True, env=env, timeout=300
    )


def test_promote_twice_then_roll_back_from_the_command_line(tmp_path):
    for i, name in enumerate(["m1", "m2"]):
        export_tiny_model(str(tmp_path / name / "saved_model"), steps=150, seed=i)
    (tmp_path / "m1" / "training.json").write_text(json.dumps({"task": "classification", "steps": 150}))
    dataset = write_digits_dataset(tmp_path / "dataset", count=24)
    (tmp_path / "metrics.json").write_text(json.dumps({"accuracy": 0.91, "loss": 0.3}))
    (tmp_path / "run.yaml").write_text(
        "promote:\n  model_name: clf\n  min_smoke_accuracy: 0.6\n  load_test: {max_requests: 20}\n"
    )
    root = str(tmp_path / "stages")
    common = ["--stage", "demo", "--stages-root", root, "--config", str(tmp_path / "run.yaml")]

    # 1: a subprocess, as a user or a script runs it; --json gives the typed result.
    first = run_cli(
        "promote", "--model-dir", str(tmp_path / "m1"), "--dataset", dataset,
        "--metrics", str(tmp_path / "metrics.json"), "--run-id", "cli-1", "--json", *common,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    result = json.loads(first.stdout)
    assert result["version"] == 1 and result["action"] == "promote" and result["checks"]["prediction"]["passed"]
    assert result["checks"]["load"]["figures"]["requests"] <= 20  # the config file's bound
    current = stages.StageRegistry(root).read_current("demo", "clf")
    assert current.run == "cli-1" and current.metrics == {"accuracy": 0.91, "loss": 0.3}

    # 2: in process (the same main), writing the report; the test split is scored for the metrics.
    report = tmp_path / "out" / "report.md"
    argv = ["promote", "--model-dir", str(tmp_path / "m2"), "--dataset", dataset, "--report", str(report), *common]
    assert cli.main(argv) == 0
    assert "# Promote: demo serves version 2" in report.read_text()
    assert "accuracy" in stages.StageRegistry(root).read_current("demo", "clf").metrics

    # 3: the rollback, a subprocess again: version 1 serves, checked with the stage's known examples.
    back = run_cli("rollback", "--run-id", "cli-3", *common)
    assert back.returncode == 0, back.stderr
    assert back.stdout.startswith("# Rollback: demo serves version 1") and "| prediction | yes |" in back.stdout
    assert stages.StageRegistry(root).list_versions("demo", "clf") == [1]
    history = stages.StageRegistry(root).read_history("demo", "clf")
    assert [(e.action, e.version) for e in history] == [("promote", 1), ("promote", 2), ("rollback", 1)]
    assert history[1].run.startswith("cli-") and history[2].run == "cli-3"  # default run id: cli-<UTC time>
    # Nothing left to roll back to: a one-line error and exit status 2.
    again = run_cli("rollback", *common)
    assert again.returncode == 2 and again.stderr.startswith("error: cannot roll back demo")
