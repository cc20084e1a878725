"""`make serve`'s command: every serving stage from the registry on loopback, metrics pages included,
stopped by Ctrl-C (SIGINT)."""

import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from components.serving import stages
from components.serving.stages import StageEntry
from tests.promote_models import export_tiny_model

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def test_serves_each_stage_with_a_model_and_stops_on_ctrl_c(tmp_path):
    root = str(tmp_path / "stages")
    export_tiny_model(str(tmp_path / "m"), steps=5)
    for stage in ("demo", "prod"):  # staging serves nothing
        version = stages.StageRegistry(root).publish(str(tmp_path / "m"), stage, "clf")
        stages.StageRegistry(root).record(
            stage, StageEntry(action="promote", version=version, model_uri="m", run="r", model_name="clf")
        )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "components.serving.serve", "--stages-root", root, "--base-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("serving; Ctrl-C stops"):
                break
        found = re.findall(r"^(\w+)\s+clf version 1: (\S+)\s+metrics: (\S+)$", "".join(lines), re.M)
        assert [f[0] for f in found] == ["demo", "prod"], lines
        for _, model_url, metrics_url in found:
            with urllib.request.urlopen(model_url, timeout=10) as response:
                assert b'"AVAILABLE"' in response.read()
            with urllib.request.urlopen(metrics_url, timeout=10) as response:
                page = response.read().decode()
            assert ":tensorflow:serving:request_count{" in page and "load_attempt_count" in page
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert proc.stdout.read().strip().endswith("stopped")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_says_what_to_do_without_any_stage(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "components.serving.serve", "--stages-root", str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert out.returncode == 2 and "run `make run` first" in out.stderr
