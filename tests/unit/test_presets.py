"""Pretrained weights by name (trainer.presets): a trained detector saved as a keras-hub preset,
fine-tuned from on other classes (re-headed, said in the log) and still served; and the bad inputs
(a preset that does not exist, an unreachable hub, weights of another architecture), each one
clear error. Nothing downloads: the hub is replaced by one that fails as an offline one does."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest

from tests.detection_fixtures import tiny_detection
from trainer import model_folder
from trainer.config import TrainConfig
from trainer.presets import PresetError, pixel_scale_of, resolve_weights
from trainer.tasks import get_task

# ImageNet's mean and standard deviation as keras-hub's converters apply them to 0..255 pixels.
SCALE = [1 / (255 * 0.229), 1 / (255 * 0.224), 1 / (255 * 0.225)]
OFFSET = [-0.485 / 0.229, -0.456 / 0.224, -0.406 / 0.225]
# A few steps of the small detector on a few dozen 64 px images: plumbing, not quality.
TINY = {"model": "retinanet", "epochs": 1, "steps_per_epoch": 3, "batch_size_per_replica": 8, "validation_steps": 1}


def _two_class_coco(coco: Path, out: Path) -> Path:
    """The shapes COCO file with its classes merged into two others (``round``, ``angular``).

    Written beside the images with their relative names: the converter assigns splits by a hash of
    each image's key, so keys holding the test's temporary folder would split differently in
    every run (and a 40-image set could leave a split empty).
    """
    data = json.loads(coco.read_text())
    names = {c["id"]: c["name"] for c in data["categories"]}
    data["categories"] = [{"id": 1, "name": "round"}, {"id": 2, "name": "angular"}]
    for a in data["annotations"]:
        a["category_id"] = 1 if names[a["category_id"]] == "circle" else 2
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data))
    return out


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """The suite's 3-class shapes dataset (tests/detection_fixtures.py) and a 2-class one of other images."""
    from components.convert import convert
    from components.convert.config import ConvertConfig
    from components.image_input import shapes

    root = tmp_path_factory.mktemp("presets")
    generated = shapes.generate(root / "coco-two", count=40, seed=2)
    coco = _two_class_coco(generated, generated.parent / "instances-two-classes.json")
    convert(ConvertConfig(source=str(coco), workers=1), str(root / "two"))
    return {"three": tiny_detection()["dataset"], "two": str(root / "two"), "root": str(root)}


@pytest.fixture(scope="module")
def trained():
    """The suite's tiny detector, trained on the 3-class set: its model folder holds ``preset/``."""
    return tiny_detection()["model"]


def test_a_trained_detector_is_a_preset_a_run_on_other_classes_fine_tunes_from(datasets, trained, tmp_path, caplog):
    import keras
    import keras_hub
    import numpy as np
    from keras_hub.src.utils import preset_utils

    from trainer import tfrecords
    from trainer.tasks.detection.export import predict_in_process
    from trainer.tasks.detection.input import read_detection_split
    from trainer.train import train

    saved = model_folder.preset_dir(trained)
    assert (Path(saved) / "config.json").is_file() and (Path(saved) / "task.weights.h5").is_file()
    # As a COCO or ImageNet preset does, this one carries ImageNet's pixel scaling in its image converter.
    preset = str(tmp_path / "preset")
    shutil.copytree(saved, preset)
    keras_hub.layers.ImageConverter(scale=SCALE, offset=OFFSET).save_to_preset(preset)
    assert resolve_weights(preset, "weights").kind == "preset"

    config = TrainConfig(**TINY, model_options={"weights": preset})
    with caplog.at_level(logging.INFO, logger="trainer.tasks.detection.model"):
        summary = train(datasets["two"], str(tmp_path / "tuned"), config)
    log = " ".join(r.getMessage() for r in caplog.records)
    assert "re-headed" in log and "3 classes, the dataset 2" in log, log
    assert summary.class_names == ["round", "angular"]

    # The pixel scaling trained with is the tuned model's preprocessor, in its preset too.
    tuned = keras.saving.load_model(str(tmp_path / "tuned" / "model.keras"))
    assert np.allclose(tuned.preprocessor.scale, [255 * s for s in SCALE])
    loader = preset_utils.get_preset_loader(model_folder.preset_dir(str(tmp_path / "tuned")))
    scale, offset = pixel_scale_of(loader)
    assert np.allclose(scale, SCALE) and np.allclose(offset, OFFSET)

    info = tfrecords.load_dataset_info(datasets["two"])
    task = get_task("detection", config.model_options)
    _loaded, fn = task.serving_function(model_folder.saved_model_dir(str(tmp_path / "tuned")), info)
    images = [r["encoded"] for r in read_detection_split(info, "test", 2)]
    for prediction in predict_in_process(fn, images, 2):
        task.check_prediction(prediction)
        assert set(prediction["detection_class_names"]) <= {"", "round", "angular"}


def test_same_classes_keep_the_heads_and_the_class_bias_stays_the_trained_one(datasets, trained, caplog):
    import numpy as np

    from trainer import tfrecords

    info = tfrecords.load_dataset_info(datasets["three"])
    # The options the training's fit resolved (config.yaml), as a run starting from it would have them.
    fitted = TrainConfig.from_yaml(Path(trained) / model_folder.CONFIG).model_options
    task = get_task("detection", {**fitted, "weights": model_folder.preset_dir(trained), "image_size": 96})
    with caplog.at_level(logging.INFO, logger="trainer.tasks.detection.model"):
        model = task.build_model("retinanet", info)
    assert "heads included" in " ".join(r.getMessage() for r in caplog.records)
    bias = np.asarray(model.classification_head.prediction_layer.bias)
    assert not np.allclose(bias, bias.flat[0]), "the trained class bias, not a fresh prior"
    # Built for any input size: a preset trained at 64 px fine-tunes at 96.
    out = model(np.zeros((1, 96, 96, 3), "float32"))
    assert out["cls_logits"].shape[-1] == 3


def test_a_preset_that_does_not_exist_is_one_error_naming_the_forms(tmp_path):
    with pytest.raises(PresetError, match="unknown preset 'retinanet_resnet50_fpn_cocoo'.*hf://"):
        resolve_weights("retinanet_resnet50_fpn_cocoo", "model_options.weights")
    with pytest.raises(PresetError, match="not a keras-hub preset directory.*save_to_preset"):
        resolve_weights(str(tmp_path), "model_options.weights")
    with pytest.raises(PresetError, match="does not exist"):
        resolve_weights(str(tmp_path / "missing.weights.h5"), "model_options.weights")


def test_an_unreachable_hub_is_one_error_naming_credentials_and_the_mirror(monkeypatch, datasets):
    import huggingface_hub
    import kagglehub
    import requests
    from huggingface_hub.errors import LocalEntryNotFoundError

    from trainer import tfrecords

    def offline(*args, **kwargs):
        raise requests.exceptions.ConnectionError("Failed to resolve 'api.kaggle.com'")

    monkeypatch.setattr(kagglehub, "model_download", offline)
    task = get_task("detection", {"weights": "retinanet_resnet50_fpn_coco", "image_size": 128})
    with pytest.raises(PresetError, match="cannot download 'retinanet_resnet50_fpn_coco'.*KAGGLE_KEY.*gs://"):
        task.build_model("retinanet", tfrecords.load_dataset_info(datasets["three"]))

    # huggingface_hub offline and without a cached copy: keras-hub reports "no config.json".
    def not_cached(*args, **kwargs):
        raise LocalEntryNotFoundError("Connection error, and the requested file is not in the disk cache")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", not_cached)
    task = get_task("detection", {"weights": "hf://keras/no-such-retinanet", "image_size": 128})
    with pytest.raises(PresetError, match="cannot load 'hf://keras/no-such-retinanet'.*HF_TOKEN"):
        task.build_model("retinanet", tfrecords.load_dataset_info(datasets["three"]))


def test_weights_of_another_architecture_are_refused_with_the_fix(datasets, tmp_path):
    import keras_hub

    from trainer import tfrecords

    info = tfrecords.load_dataset_info(datasets["three"])
    encoder = keras_hub.models.ResNetBackbone(
        input_conv_filters=[64], input_conv_kernel_sizes=[7], stackwise_num_filters=[64, 64],
        stackwise_num_blocks=[1, 1], stackwise_num_strides=[1, 2], block_type="basic_block",
        image_shape=(None, None, 3),
    )  # fmt: skip
    encoder.save_to_preset(str(tmp_path / "resnet"))
    task = get_task("detection", {"weights": str(tmp_path / "resnet")})
    with pytest.raises(PresetError, match="holds a ResNetBackbone, not a RetinaNetBackbone.*backbone_weights"):
        task.build_model("retinanet", info)
    # A weights file of a two-stack ResNet does not fit the three-stack encoder the options build.
    encoder.save_weights(str(tmp_path / "resnet.weights.h5"))
    task = get_task("detection", {"backbone_weights": str(tmp_path / "resnet.weights.h5")})
    with pytest.raises(PresetError, match="another architecture"):
        task.build_model("retinanet", info)
