"""Several replicas (the TPU/multi-GPU code path) on this CPU: two logical CPUs under MirroredStrategy.

Runs in a subprocess because logical devices must be configured before TensorFlow starts.
"""

import json
import subprocess
import sys

import pytest

from tests.datasets import write_test_dataset

pytestmark = pytest.mark.slow

SCRIPT = """
import json, sys
import trainer
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from trainer import distribute
from trainer.config import TrainConfig
from trainer.train import train
distribute.get_strategy = lambda accelerator="auto": tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
summary = train(sys.argv[1], sys.argv[2], TrainConfig(epochs=1, batch_size_per_replica=8, learning_rate=0.002))
print("SUMMARY " + json.dumps(summary.to_dict()))
"""


def test_two_replicas_scale_the_global_batch_and_learning_rate(tmp_path):
    dataset = write_test_dataset(tmp_path / "ds", {"train": 64, "validation": 16})
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(dataset), str(tmp_path / "m")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("SUMMARY ")]
    assert lines, out.stderr[-3000:]
    summary = json.loads(lines[0][len("SUMMARY ") :])
    assert summary["strategy"] == "MirroredStrategy" and summary["replicas"] == 2
    assert summary["global_batch_size"] == 16 and summary["batch_size_per_replica"] == 8
    assert summary["learning_rate"] == pytest.approx(0.002 * 16 / 128)
    assert summary["steps"] == 4  # 64 examples / global batch 16
    # Several steps per execution break Keras 3 under MirroredStrategy (keras-team/keras#19246).
    assert summary["steps_per_execution"] == 1
    assert (tmp_path / "m" / "saved_model" / "saved_model.pb").exists()
