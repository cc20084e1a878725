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
    from pipelines.tools.run_local import headline

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


# ------------------------------------------------------------------ a folder of photos of mixed sizes

MIXED = [(96, 128), (120, 90), (100, 100), (160, 120), (110, 150), (90, 96)]  # (height, width)
HEIGHTS, WIDTHS = [h for h, _ in MIXED], [w for _, w in MIXED]


@pytest.mark.parametrize(
    "heights, widths, channels, image_size, shape, says",
    [
        (HEIGHTS, WIDTHS, [3] * 6, None, (96, 96, 3), "median 105x110"),
        (HEIGHTS, WIDTHS, [1] * 5 + [3], None, (96, 96, 3), "90..160 px a side"),
        ([480, 600, 500], [640, 800, 700], [1, 1, 1], None, (224, 224, 1), "to a multiple of 32 in 32..224"),
        ([28, 30, 32], [28, 26, 40], [1, 1, 1], None, (30, 30, 1), "the median's long side"),
        (HEIGHTS, WIDTHS, [3] * 6, 160, (160, 160, 3), "model_options.image_size"),
    ],
)
def test_images_of_mixed_sizes_get_a_square_shape_fitted_to_them(heights, widths, channels, image_size, shape, says):
    import numpy as np

    from trainer.tasks.classification.fit import SizeSample, mixed_input_shape

    sample = SizeSample(np.array(heights), np.array(widths), np.array(channels))
    fitted, why = mixed_input_shape(sample, image_size)
    assert fitted == shape and says in why and f"resized to {shape[0]}x{shape[1]}x{shape[2]}" in why


def _photo_folder(root, sizes):
    """Three classes of JPEG and PNG photos of the given sizes (one grayscale), each class its own colour."""
    import io

    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for i, (h, w) in enumerate(sizes * 4):
        label = i % 3
        pixels = rng.integers(0, 60, (h, w, 3)) + np.array([[[180, 0, 0], [0, 180, 0], [0, 0, 180]][label]])
        image = Image.fromarray(pixels.clip(0, 255).astype("uint8"))
        image = image.convert("L") if i == 5 else image
        buf = io.BytesIO()
        image.save(buf, "JPEG" if i % 2 else "PNG")
        folder = root / f"class{label}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i:03d}.{'jpg' if i % 2 else 'png'}").write_bytes(buf.getvalue())
    return root


@pytest.fixture(scope="module")
def mixed_dataset(tmp_path_factory):
    from components.convert import convert
    from components.convert.config import ConvertConfig

    root = tmp_path_factory.mktemp("mixed")
    folder = _photo_folder(root / "photos", MIXED)
    manifest = convert(ConvertConfig(source=str(folder), workers=1), str(root / "ds"), log=lambda m: None)
    assert manifest["image"] is None  # the photos are kept as they are: no single size
    return root / "ds"


def test_a_dataset_of_mixed_sizes_is_read_at_the_fitted_shape(mixed_dataset):
    from trainer.data import make_dataset

    task = get_task("classification")
    info = tfrecords.load_dataset_info(str(mixed_dataset))
    assert task.input_shape(info) == (96, 96, 3)
    model, why = task.resolve_model("auto", info)
    assert model == "transfer_classifier" and "images of mixed sizes" in why and "at 96 x 96" in why
    images, labels = next(iter(make_dataset(str(mixed_dataset), "train", 64, training=False, task=task)))
    assert images.shape == (info.split_count("train"), 96, 96, 3)
    # Resizing keeps what the picture shows: each class's colour stays the brightest channel (the
    # grayscale photo, decoded to three equal channels, has none).
    means = images.numpy().mean(axis=(1, 2))
    coloured = means.max(axis=1) - means.min(axis=1) > 0.2
    assert coloured.sum() == len(means) - 1
    assert (means.argmax(axis=1) == labels.numpy())[coloured].all()


@pytest.mark.slow
def test_a_folder_of_photos_of_mixed_sizes_trains_and_serves_any_size(mixed_dataset, tmp_path):
    import io

    import numpy as np
    import tensorflow as tf
    from PIL import Image

    from trainer.config import TrainConfig
    from trainer.train import train

    config = TrainConfig(model="auto", epochs=1, steps_per_epoch=2, batch_size_per_replica=8, validation_split=None)
    summary = train(str(mixed_dataset), str(tmp_path / "m"), config)
    assert (summary.model, summary.image_shape) == ("transfer_classifier", [96, 96, 3])
    assert "images of mixed sizes" in json.loads((tmp_path / "m" / "training.json").read_text())["model_reason"]
    serve = tf.saved_model.load(str(tmp_path / "m" / "saved_model")).signatures["serving_default"]
    photos = []
    for size in ((300, 200), (64, 64)):
        buf = io.BytesIO()
        Image.fromarray(np.full((*size, 3), 128, np.uint8)).save(buf, "JPEG")
        photos.append(buf.getvalue())
    out = serve(image_bytes=tf.constant(photos))
    assert out["probabilities"].shape == (2, 3)
    assert np.allclose(out["probabilities"].numpy().sum(axis=1), 1.0, atol=1e-3)
