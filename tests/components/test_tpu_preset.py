"""The ``tpu-512`` preset a TPU user would run builds, trains, exports and serves (on the CPU).

The smallest honest run: one step at batch 2 at 512 px, the export, and two images scored through
the served signature (each answer checked against the detection schema). Its step time and memory
are printed by the benchmark (tests/benchmarks/test_bench_tpu_preset.py); this test asserts only
what must hold on any CPU.
"""

import json
import math

import pytest
import yaml

from tests.tpu_preset import exercise

pytestmark = pytest.mark.slow


def test_the_tpu_512_preset_trains_exports_and_serves(tmp_path):
    run = exercise(tmp_path, epochs=1, steps_per_epoch=1, served=2)
    assert run.image_shape == [512, 512, 3]
    assert run.steps == 1
    assert run.served_images == 2 and all(0 <= n <= 100 for n in run.detections)
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
