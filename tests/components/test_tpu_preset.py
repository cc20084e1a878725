"""The ``tpu-512`` preset a TPU user would run resolves and builds (on the CPU), as on the ``tpu-vm``
image: without tensorflow-text.

In a fresh process where importing tensorflow-text fails as it does on that image
(``tests/tpu_preset.py`` says why), the preset is resolved, fitted to a handful of images and its
model built and compiled as ``train()`` does before its first step. Training, exporting and serving
it at 512 px is the benchmark's (``tests/benchmarks/test_bench_tpu_preset.py``, the same code with
the same module blocked), which asserts what that run must give; a ResNet-50 trained and exported
at 512 px cost the suite 105-133 s of a 2-core CPU.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_the_tpu_512_preset_builds_without_tensorflow_text(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    argv = [sys.executable, "-m", "tests.tpu_preset", "--build-only", "--without-tensorflow-text"]
    argv += ["--root", str(tmp_path)]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    built = json.loads(proc.stdout.strip().splitlines()[-1])
    assert built["image_shape"] == [512, 512, 3]
    assert built["loaded"] == {"keras_hub": True, "tensorflow_text": False}
    # The preset's values as resolved: a ResNet-50 (over 20 M parameters with its FPN and heads), P3-P7.
    options = built["options"]
    assert (options["preset"], options["image_size"], options["min_level"], options["max_level"]) == (
        "tpu-512",
        512,
        3,
        7,
    )
    assert built["parameters"] > 20_000_000
