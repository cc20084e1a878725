"""The train_model component under kfp.local: the same YAML a cluster runs, in a subprocess."""

import json
import os

import pytest

from tests.datasets import write_test_dataset

pytestmark = pytest.mark.slow


def test_train_model_component_writes_model_and_metrics(tmp_path):
    import kfp.local
    from kfp import dsl

    from components.train.component import train_model

    dataset = write_test_dataset(tmp_path / "ds", {"train": 64, "validation": 16})
    kfp.local.init(runner=kfp.local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))

    @dsl.pipeline
    def pipeline() -> dsl.Model:
        ds = dsl.importer(artifact_uri=str(dataset), artifact_class=dsl.Dataset).output
        return train_model(
            dataset=ds, epochs=1, steps_per_epoch=0, batch_size_per_replica=16, config_yaml="checkpoint_every_steps: 2"
        ).outputs["model"]

    model = pipeline().output
    expected = {"saved_model", "model.keras", "training.json", "config.yaml", "model_card.md"}
    assert expected <= set(os.listdir(model.path))
    summary = json.loads(open(os.path.join(model.path, "training.json")).read())
    assert summary["steps"] == 4 and summary["task"] == "classification"  # steps_per_epoch 0 = one pass: 64 / 16
    meta = model.metadata
    assert meta["accelerator"] == "cpu"
    assert meta["class_names"] == ["class_0", "class_1", "class_2", "class_3"]
    assert meta["input_signature"]["serving_tensors"]["images"] == "float32 [None, 28, 28, 1] in [0, 1]"
    assert len(meta["config_hash"]) == 16
    metrics_dir = os.path.join(str(tmp_path / "root"))
    found = [os.path.join(r, f) for r, _, fs in os.walk(metrics_dir) for f in fs if f == "executor_output.json"]
    assert found, "kfp.local wrote no executor output"
    outputs = json.loads(open(found[0]).read())
    metrics = outputs["artifacts"]["metrics"]["artifacts"][0]["metadata"]
    assert metrics["images_per_sec"] > 0 and 0 <= metrics["val_accuracy"] <= 1


def test_config_from_parameters_and_yaml():
    from components.train.run import train_config
    from trainer.config import ConfigError

    config = train_config("precision: float32\nepochs: 9", epochs=2, steps_per_epoch=None)
    assert config.precision == "float32" and config.epochs == 2 and config.steps_per_epoch is None
    with pytest.raises(ConfigError, match="bogus: unknown key in TrainConfig"):
        train_config("bogus: 1")
    with pytest.raises(ConfigError, match="expected a YAML mapping"):
        train_config("- 1")


def test_checkpoints_go_straight_to_a_remote_model_uri():
    from components.artifacts import checkpoint_uri

    assert (
        checkpoint_uri("gs://bucket/root/run/train-model/model") == "gs://bucket/root/run/train-model/model/checkpoints"
    )
    assert checkpoint_uri("/tmp/local_outputs/model") is None
