"""Classification fitted to the data: ``model: auto`` picks the notebook's CNN for small images and a
transfer classifier at a fitted size for photos, says why, and records it; a named model wins."""

from __future__ import annotations

import json

import pytest

from tests.datasets import dataset_info, write_test_dataset
from trainer import tfrecords
from trainer.tasks import get_task


def _info(height: int, width: int, channels: int) -> tfrecords.DatasetInfo:
    return dataset_info({}, image=tfrecords.ImageShape(height, width, channels))


@pytest.mark.parametrize(
    "shape, options, model, says",
    [
        ((28, 28, 1), {}, "mnist_cnn", "28x28x1 images, at most 64 px a side: the notebook's CNN"),
        ((32, 32, 3), {}, "mnist_cnn", "the notebook's CNN"),
        ((150, 200, 3), {}, "transfer_classifier", "(mobilenet_v2) seeing them at 128 x 128"),
        ((480, 640, 3), {}, "transfer_classifier", "at 224 x 224"),
        ((28, 28, 1), {"backbone": "mobilenet_v3_small"}, "transfer_classifier", "options backbone given"),
        ((150, 200, 3), {"image_size": 96}, "transfer_classifier", "at 96 x 96"),
    ],
)
def test_auto_chooses_the_model_and_size_from_the_images_and_says_why(shape, options, model, says):
    chosen, reason = get_task("classification", options).resolve_model("auto", _info(*shape))
    assert chosen == model and says in reason


def test_a_model_the_user_names_is_kept_whatever_the_images():
    assert get_task("classification").resolve_model("mnist_cnn", _info(300, 300, 3)) == ("mnist_cnn", None)
    assert get_task("classification").run_defaults.model == "auto"


def test_the_transfer_classifier_sees_photos_at_the_fitted_side():
    from trainer.tasks.classification.model import build_model, fitted_side

    assert [fitted_side(*s) for s in ((28, 28), (150, 200), (1000, 900), (95, 400))] == [32, 128, 224, 64]
    model = build_model("transfer_classifier", (150, 200, 3), 3, backbone="mobilenet_v3_small")
    assert model.input_shape == (None, 150, 200, 3)
    assert model.get_layer("resize").output.shape[1:3] == (128, 128)


def test_training_with_auto_records_the_choice(tmp_path):
    from trainer.config import TrainConfig
    from trainer.train import train

    folder = write_test_dataset(tmp_path / "mnist", {"train": 16, "validation": 8}, num_classes=2)
    config = TrainConfig(model="auto", epochs=1, steps_per_epoch=1, batch_size_per_replica=8)
    summary = train(str(folder), str(tmp_path / "m"), config)
    recorded = json.loads((tmp_path / "m" / "training.json").read_text())
    assert summary.model == recorded["model"] == "mnist_cnn"
    assert "the notebook's CNN" in recorded["model_reason"]
    assert "model: mnist_cnn" in (tmp_path / "m" / "config.yaml").read_text()
    assert "model chosen:" in (tmp_path / "m" / "model_card.md").read_text()


def test_classifier_weights_of_another_backbone_are_refused_with_the_fix(tmp_path):
    import keras

    from trainer.tasks.classification.model import ModelError, build_model

    other = keras.applications.MobileNetV3Small(include_top=False, weights=None, input_shape=(32, 32, 3))
    other.save_weights(tmp_path / "small.weights.h5")
    with pytest.raises(ModelError, match="does not fit MobileNetV2.*another architecture"):
        build_model("transfer_classifier", (32, 32, 3), 2, weights=str(tmp_path / "small.weights.h5"))


def test_the_console_and_the_run_report_say_which_model_was_chosen(tmp_path):
    from components.report.run import training_section
    from pipelines.run_local import headline

    reason = "150x200x3 images: a transfer classifier (mobilenet_v2) seeing them at 128 x 128"
    step = tmp_path / "train-model"
    step.mkdir()
    metadata = {"model": "transfer_classifier", "model_reason": reason}
    artifacts = {
        "model": {"artifacts": [{"metadata": metadata}]},
        "metrics": {"artifacts": [{"metadata": {"images_per_sec": 100.0}}]},
    }
    (step / "executor_output.json").write_text(json.dumps({"artifacts": artifacts}))
    assert headline(tmp_path, "train-model").startswith(f"transfer_classifier ({reason}), 100 training images/s")
    summary = {"model": "transfer_classifier", "model_reason": reason, "task": "classification", "history": []}
    (tmp_path / "training.json").write_text(json.dumps(summary))
    assert f"; chosen: {reason}" in training_section(str(tmp_path)).replace("&#x27;", "'")
