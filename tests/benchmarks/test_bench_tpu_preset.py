"""The ``tpu-512`` detector preset on this CPU: step time, export and serving time, peak memory.

The preset a TPU user runs (ResNet-50, P3-P7, 512 px) is built, trained for ``EPOCHS`` epochs of
``STEPS`` steps at batch 2, exported, served by the local Python server and a few images are
scored through the served signature (``tests.tpu_preset``), in a fresh process where importing
tensorflow-text fails as on the ``tpu-vm`` image, so that the peak memory printed is the
workload's own. The first epoch includes building the graph (the first step); the steady step
time is the median of the later epochs per step. Printed; asserted only what must hold on any CPU
(the shapes, the steps, the served answers, tensorflow-text not loaded): the suite only builds the
preset (``tests/components/test_tpu_preset.py``).
"""

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.benchmark

ROOT = Path(__file__).resolve().parents[2]
EPOCHS = 2
STEPS = 2
SERVED = 2


def test_bench_tpu_512_preset():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    argv = [sys.executable, "-m", "tests.tpu_preset", "--epochs", str(EPOCHS), "--steps", str(STEPS)]
    argv += ["--without-tensorflow-text"]  # as on the tpu-vm image, the one a TPU VM user trains it with
    # About 10 minutes on a loaded 2-core host (33 s a step there); the limit only stops a hang.
    proc = subprocess.run(
        [*argv, "--served", str(SERVED)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads(proc.stdout.strip().splitlines()[-1])
    assert run["image_shape"] == [512, 512, 3] and run["steps"] == EPOCHS * STEPS
    assert run["served_images"] == SERVED and all(0 <= n <= 100 for n in run["detections"])
    assert run["loaded"] == {"keras_hub": True, "tensorflow_text": False}
    first, later = run["epoch_seconds"][0], run["epoch_seconds"][1:]
    step = statistics.median(later) / STEPS
    fit = sum(run["epoch_seconds"])
    print(
        f"\ntpu-512 preset (ResNet-50, P3-P7, 512 px), batch 2, {EPOCHS} epochs of {STEPS} steps on the CPU:\n"
        f"  first epoch {first:.1f} s (the graph built at its first step), then {step:.2f} s per step "
        f"({2 / step:.2f} images/s; the later epochs, median)\n"
        f"  train() {run['train_seconds']:.1f} s in all: {fit:.1f} s in epochs, "
        f"{run['train_seconds'] - fit:.1f} s building, exporting and saving\n"
        f"  served: the local Python server's start (SavedModel load) and {SERVED} images scored in "
        f"{run['serve_seconds']:.1f} s, detections per image {run['detections']}\n"
        f"  peak memory (RSS of the process): {run['peak_rss_mib'] / 1024:.2f} GiB"
    )
