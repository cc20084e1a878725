"""A training killed mid-way (SIGKILL, like a preempted TPU) resumes and reaches the same step count."""

import json
import os
import sys

import pytest

from tests.datasets import write_test_dataset
from tests.preempt import kill_at_first_checkpoint
from trainer.config import TrainConfig
from trainer.train import train

pytestmark = pytest.mark.slow

CONFIG = TrainConfig(epochs=2, steps_per_epoch=60, batch_size_per_replica=16, checkpoint_every_steps=8, seed=2)


def test_killed_training_resumes_from_its_checkpoint(tmp_path):
    dataset = str(write_test_dataset(tmp_path / "ds", {"train": 96, "validation": 16}))
    model_dir = tmp_path / "model"
    config_file = tmp_path / "train.yaml"
    config_file.write_text(CONFIG.to_yaml())
    command = [sys.executable, "-m", "trainer", "--dataset", dataset, "--model-dir", str(model_dir)]
    kill_at_first_checkpoint([*command, "--config", str(config_file), "--log-level", "WARNING"],
                             model_dir / "checkpoints" / "checkpoint")  # fmt: skip
    assert not (model_dir / "training.json").exists()

    summary = train(dataset, str(model_dir), CONFIG)
    assert 0 < summary.resumed_from_step < 120
    assert summary.steps == 120
    assert json.loads((model_dir / "training.json").read_text())["steps"] == 120
    assert [row["epoch"] for row in summary.history] == [1, 2] or summary.resumed_from_step >= 60
    assert os.path.exists(model_dir / "saved_model" / "saved_model.pb")
