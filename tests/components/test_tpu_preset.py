"""The ``tpu-512`` preset a TPU user would run builds, trains, exports and serves (on the CPU), as on
the ``tpu-vm`` image: without tensorflow-text.

The smallest honest run: one step at batch 2 at 512 px, the export, and two images scored through
the served signature (each answer checked against the detection schema), in a fresh process where
importing tensorflow-text fails as it does on that image (``tests/tpu_preset.py`` says why). Its
step time and memory are printed by the benchmark (tests/benchmarks/test_bench_tpu_preset.py); this
test asserts only what must hold on any CPU.
"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_the_tpu_512_preset_trains_exports_and_serves_without_tensorflow_text(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    argv = [sys.executable, "-m", "tests.tpu_preset", "--epochs", "1", "--steps", "1", "--served", "2"]
    argv += ["--root", str(tmp_path), "--without-tensorflow-text"]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads(proc.stdout.strip().splitlines()[-1])
    assert run["image_shape"] == [512, 512, 3]
    assert run["steps"] == 1
    assert run["served_images"] == 2 and all(0 <= n <= 100 for n in run["detections"])
    assert run["loaded"] == {"keras_hub": True, "tensorflow_text": False}
    config = yaml.safe_load((tmp_path / "model" / "config.yaml").read_text())
    # The preset's values as resolved (config.yaml holds every option): a ResNet-50 at 512 px, P3-P7.
    options = config["model_options"]
    assert (options["preset"], options["image_size"], options["min_level"], options["max_level"]) == (
        "tpu-512",
        512,
        3,
        7,
    )
    training = json.loads((tmp_path / "model" / "training.json").read_text())
    assert math.isfinite(training["train_loss"])
