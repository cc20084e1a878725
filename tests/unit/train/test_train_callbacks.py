"""The training callbacks on their own: divergence guard, time-based checkpoints, images/s."""

import numpy as np
import pytest

from trainer import callbacks
from trainer.errors import TrainingDivergedError


@pytest.fixture
def model():
    import keras

    m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    m.compile(optimizer="adam", loss="mse")
    m.fit(np.ones((4, 2)), np.ones((4, 1)), verbose=0)  # one step: optimizer built, iterations = 1
    return m


def test_exploding_loss_stops_training(model):
    guard = callbacks.DivergenceGuard()
    guard.set_model(model)
    guard.on_train_batch_end(0, {"loss": 2.0})
    guard.on_train_batch_end(1, {"loss": 3.0})
    with pytest.raises(TrainingDivergedError, match="exploded to 3e\\+04 at step 1"):
        guard.on_train_batch_end(2, {"loss": 3e4})
    with pytest.raises(TrainingDivergedError, match="became inf"):
        guard.on_epoch_end(0, {"loss": float("inf")})


def test_time_based_checkpoints(model, tmp_path):
    import tensorflow as tf

    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(tmp_path), max_to_keep=3)
    by_steps = callbacks.Checkpointer(manager, every_steps=1000, every_seconds=None)
    by_steps.set_model(model)
    by_steps.on_train_begin()
    by_steps.on_train_batch_end(0)
    assert manager.latest_checkpoint is None  # 1000 steps not reached, no time rule
    by_time = callbacks.Checkpointer(manager, every_steps=1000, every_seconds=1e-9)
    by_time.set_model(model)
    by_time.on_train_begin()
    model.optimizer.iterations.assign(5)
    by_time.on_train_batch_end(0)
    assert manager.latest_checkpoint.endswith("ckpt-5")


def test_images_per_sec_leaves_the_first_epoch_out(model, monkeypatch):
    import trainer.train as train_mod

    meter = callbacks.Throughput(global_batch=10)
    meter.set_model(model)
    clock = iter([0.0, 50.0, 100.0, 100.0, 102.0, 104.0])  # epoch 1 slow (tracing), epoch 2 fast
    steps = iter([0, 1, 2, 2, 3, 4])
    monkeypatch.setattr(train_mod.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(model.optimizer.iterations, "numpy", lambda: next(steps))
    for epoch in range(2):
        meter.on_epoch_begin(epoch)
        meter.on_train_batch_end(0)
        meter.on_train_batch_end(1)
        meter.on_epoch_end(epoch)
    assert meter.images_per_sec == pytest.approx(2 * 10 / 4.0)
    assert meter.epoch_seconds == pytest.approx([100.0, 4.0])
