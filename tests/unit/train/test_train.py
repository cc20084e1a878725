"""train(): the model folder, re-runs, checks before training, divergence; a SavedModel that serves."""

import io
import json
import os

import numpy as np
import pytest
from PIL import Image

from tests.datasets import make_images, write_test_dataset
from trainer.config import TrainConfig
from trainer.distribute import choose_precision
from trainer.errors import TrainingDivergedError, TrainingError
from trainer.tasks.classification import model as models
from trainer.tfrecords import DatasetError
from trainer.train import TrainingSummary, train
from trainer.training.setup import resolve_global_batch, scaled_learning_rate

pytestmark = pytest.mark.slow

CONFIG = TrainConfig(epochs=2, batch_size_per_replica=16, checkpoint_every_steps=4, seed=1, learning_rate=0.004)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return str(write_test_dataset(tmp_path_factory.mktemp("ds"), {"train": 128, "validation": 32, "test": 16}))


@pytest.fixture(scope="module")
def trained(dataset, tmp_path_factory):
    model_dir = str(tmp_path_factory.mktemp("model") / "m")
    return model_dir, train(dataset, model_dir, CONFIG)


def test_model_folder_and_summary(trained):
    model_dir, summary = trained
    assert sorted(os.listdir(model_dir)) == [
        "checkpoints",
        "config.yaml",
        "logs",
        "model.keras",
        "model_card.md",
        "saved_model",
        "training.json",
    ]
    written = json.loads(open(os.path.join(model_dir, "training.json")).read())
    assert written == summary.to_dict() and written["task"] == "classification"
    assert TrainingSummary.from_dict(written) == summary
    assert summary.steps == 16 and summary.epochs == 2 and summary.steps_per_epoch == 8
    assert summary.global_batch_size == 16 and summary.replicas == 1
    # precision auto: what suits this CPU (bfloat16 only where it has native bf16 units).
    chosen = choose_precision("auto", "cpu")
    assert summary.accelerator == "cpu" and summary.precision == chosen.policy and summary.jit_compile is False
    assert summary.precision_reason == chosen.reason
    assert summary.class_names == ["class_0", "class_1", "class_2", "class_3"]
    assert summary.image_shape == [28, 28, 1]
    assert summary.images_per_sec > 0
    assert len(summary.epoch_seconds) == 2 and min(summary.epoch_seconds) > 0  # every epoch of this process
    assert summary.learning_rate == pytest.approx(0.004 * 16 / 128)
    # The synthetic classes are easy: the loss falls and validation beats chance (0.25) by far. Over
    # seeds 0-4 and three floating-point paths (oneDNN; oneDNN capped at SSE4.1; oneDNN off) on an
    # AVX2 EPYC, validation accuracy was 1.0 every time and the loss fell from 1.0-1.2 to 0.27-0.50.
    assert summary.history[-1]["loss"] < summary.history[0]["loss"]
    assert summary.metrics["val_accuracy"] > 0.5 and 0 <= summary.metrics["train_accuracy"] <= 1
    # training.json keeps the keys it had before the metrics mapping, beside it
    assert written["val_accuracy"] == summary.metrics["val_accuracy"] == written["metrics"]["val_accuracy"]
    effective = TrainConfig.from_yaml(os.path.join(model_dir, "config.yaml"))
    assert effective.precision == chosen.policy and effective.jit_compile is False and effective.steps_per_execution
    card = open(os.path.join(model_dir, "model_card.md")).read()
    assert "16 steps" in card and "validation" in card and "cpu" in card
    events = [f for f in os.listdir(os.path.join(model_dir, "logs", "train")) if f.startswith("events.out.tfevents")]
    assert len(events) == 1
    import tensorflow as tf

    tags = {
        (value.tag, event.step)
        for event in tf.compat.v1.train.summary_iterator(os.path.join(model_dir, "logs", "train", events[0]))
        for value in event.summary.value
    }
    assert {("epoch_loss", 1), ("epoch_loss", 2), ("epoch_val_accuracy", 2), ("images_per_sec", 2)} <= tags


def test_a_training_json_of_an_earlier_version_still_loads(trained):
    model_dir, summary = trained
    earlier = json.loads(open(os.path.join(model_dir, "training.json")).read())
    del earlier["metrics"], earlier["task"]  # written before the metrics mapping and the task field
    loaded = TrainingSummary.from_dict(earlier)
    assert loaded.task == "classification" and loaded.metrics == summary.metrics
    assert loaded.to_dict()["val_accuracy"] == summary.metrics["val_accuracy"]
    earlier.pop("train_accuracy")  # a figure it did not report stays absent, and None where the old key is read
    assert "train_accuracy" not in TrainingSummary.from_dict(earlier).metrics
    assert TrainingSummary.from_dict(earlier).to_dict()["train_accuracy"] is None


def test_saved_model_answers_bytes_like_the_keras_model(trained):
    import keras
    import tensorflow as tf

    model_dir, _ = trained
    images, _ = make_images(5, 4, seed=9)
    pngs = []
    for img in images:
        buf = io.BytesIO()
        Image.fromarray(img[..., 0]).save(buf, format="PNG")
        pngs.append(buf.getvalue())
    served = tf.saved_model.load(os.path.join(model_dir, "saved_model"))
    out = served.signatures["serving_default"](image_bytes=tf.constant(pngs))
    expected = keras.saving.load_model(os.path.join(model_dir, "model.keras")).predict(images / 255.0, verbose=0)
    np.testing.assert_allclose(out["probabilities"].numpy(), expected, atol=1e-5)
    assert list(out["classes"].numpy()) == list(expected.argmax(axis=1))


def test_finished_rerun_does_not_train_again(dataset, trained):
    model_dir, summary = trained
    stamp = os.path.getmtime(os.path.join(model_dir, "model.keras"))
    assert train(dataset, model_dir, CONFIG) == summary
    assert os.path.getmtime(os.path.join(model_dir, "model.keras")) == stamp


def test_other_config_into_a_finished_folder_is_refused(dataset, trained):
    model_dir, _ = trained
    with pytest.raises(TrainingError, match="already holds a model trained with another config"):
        train(dataset, model_dir, CONFIG.replace(epochs=3))


def test_unwritable_model_dir_fails_before_training(dataset, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(TrainingError, match="model_dir: cannot write to"):
        train(dataset, str(blocker / "model"), CONFIG)
    assert not (tmp_path / "a-file").is_dir()


def test_empty_train_split_is_refused(tmp_path):
    folder = write_test_dataset(tmp_path / "ds", {"train": 0, "validation": 4})
    with pytest.raises(DatasetError, match="split 'train' of .* is empty"):
        train(str(folder), str(tmp_path / "m"), CONFIG)
    assert not (tmp_path / "m").exists()  # refused before anything was written


def test_epochs_left_to_the_data_need_a_task_that_fits_a_schedule(dataset, tmp_path):
    with pytest.raises(TrainingError, match="the classification task fits no schedule; set epochs"):
        train(dataset, str(tmp_path / "m"), CONFIG.replace(epochs=None))
    assert not (tmp_path / "m").exists()  # refused before anything was written


def test_missing_dataset_json(tmp_path):
    with pytest.raises(DatasetError, match="no dataset.json"):
        train(str(tmp_path), str(tmp_path / "m"), CONFIG)


def test_mismatched_dataset_json(dataset, tmp_path):
    # A dataset.json of another schema version is refused before anything is built.
    import shutil

    folder = tmp_path / "ds"
    shutil.copytree(dataset, folder)
    manifest = json.loads((folder / "dataset.json").read_text())
    manifest["schema_version"] = 99
    (folder / "dataset.json").write_text(json.dumps(manifest))
    with pytest.raises(DatasetError, match="schema_version 99"):
        train(str(folder), str(tmp_path / "m"), CONFIG)


def test_model_that_does_not_fit_the_dataset(dataset, tmp_path, monkeypatch):
    monkeypatch.setitem(models.MODELS, "fixed_ten", lambda shape, classes: models.mnist_cnn(shape, 10))
    with pytest.raises(TrainingError, match="outputs 10 classes but the dataset has 4"):
        train(dataset, str(tmp_path / "m"), CONFIG.replace(model="fixed_ten"))


def test_batch_the_replicas_cannot_divide_is_refused():
    config = TrainConfig(global_batch_size=100)
    assert resolve_global_batch(config, 4) == 100
    with pytest.raises(TrainingError, match="100 does not divide evenly over 8 replicas; use a multiple of 8"):
        resolve_global_batch(config, 8)
    assert resolve_global_batch(TrainConfig(batch_size_per_replica=128), 8) == 1024
    assert scaled_learning_rate(TrainConfig(learning_rate=0.001), 1024) == pytest.approx(0.008)


def test_nan_loss_stops_with_a_clear_error_and_exports_nothing(dataset, tmp_path, monkeypatch):
    import keras

    def poisoned(shape, classes):
        inputs = keras.Input(shape)
        x = keras.layers.Flatten()(inputs)
        x = keras.layers.Lambda(lambda t: t * float("nan"))(x)
        return keras.Model(inputs, keras.layers.Dense(classes, activation="softmax")(x))

    monkeypatch.setitem(models.MODELS, "poisoned", poisoned)
    model_dir = tmp_path / "m"
    with pytest.raises(TrainingDivergedError, match="the training loss became nan at step"):
        train(dataset, str(model_dir), CONFIG.replace(model="poisoned"))
    assert not (model_dir / "saved_model").exists() and not (model_dir / "training.json").exists()


def test_separate_checkpoint_dir(dataset, tmp_path):
    summary = train(dataset, str(tmp_path / "m"), CONFIG.replace(epochs=1), checkpoint_dir=str(tmp_path / "ck"))
    assert summary.steps == 8
    assert (tmp_path / "ck" / "checkpoint").exists() and (tmp_path / "ck" / "state.json").exists()
    assert not (tmp_path / "m" / "checkpoints").exists()


def test_tpu_settings_run_on_this_cpu(dataset, tmp_path):
    # The TPU defaults (bfloat16, XLA, several steps per execution) forced on the CPU: the same code
    # path a TPU takes, minus the TPU; the export still serves float32 probabilities.
    import tensorflow as tf

    config = CONFIG.replace(epochs=1, precision="mixed_bfloat16", jit_compile=True, steps_per_execution=2)
    summary = train(dataset, str(tmp_path / "m"), config)
    assert (summary.precision, summary.jit_compile, summary.steps_per_execution) == ("mixed_bfloat16", True, 2)
    assert summary.steps == 8
    served = tf.saved_model.load(str(tmp_path / "m" / "saved_model"))
    out = served.signatures["serving_tensors"](images=tf.zeros([2, 28, 28, 1]))
    assert out["probabilities"].dtype == tf.float32 and tuple(out["probabilities"].shape) == (2, 4)
