import dataclasses

import pytest
import yaml

from components.convert.config import ConvertConfig
from components.run_config import read_run_yaml, sections
from components.serving.config import PromoteConfig
from trainer.config import ConfigError, EvaluateConfig, TrainConfig


def test_yaml_round_trip_keeps_every_value():
    cfg = {
        "convert": ConvertConfig(source="/data/flowers", splits={"train": 0.9, "test": 0.1}, resize=(224, 224)),
        "train": TrainConfig(model="mnist_cnn", epochs=7, accelerator="tpu"),
        "evaluate": EvaluateConfig(value_thresholds={"accuracy": 0.8}),
    }
    again = read_run_yaml(yaml.safe_dump({name: section.to_dict() for name, section in cfg.items()}))
    assert {name: again[name] for name in cfg} == cfg
    assert again["convert"].resize == (224, 224)
    assert dict(again["evaluate"].value_thresholds) == {"accuracy": 0.8}
    assert again["train"].fingerprint() == cfg["train"].fingerprint() != TrainConfig(epochs=8).fingerprint()


def test_a_whole_run_file_has_a_section_for_every_step_config_the_steps_declare():
    from components.batch_predict.config import PredictConfig
    from components.validate.config import ValidateConfig

    known = sections()
    assert {"convert", "validate", "train", "evaluate", "benchmark", "promote", "monitor", "predict", "sweep"} <= set(
        known
    )
    assert (known["validate"], known["predict"]) == (ValidateConfig, PredictConfig)
    predict = "predict: {data: photos/, output_uri: out/, model_dir: model/, batch_size: 32}\n"
    run = read_run_yaml("validate:\n  near_duplicates: true\n" + predict)
    assert run["validate"].near_duplicates is True and run["predict"].batch_size == 32
    assert set(run) == {"validate", "predict"}  # a section left out is its step's defaults
    with pytest.raises(
        ConfigError,
        match=r"^trian: no step takes this section; the sections are benchmark, convert, evaluate, export, monitor, ",
    ):
        read_run_yaml("trian:\n  epochs: 3\n")


def test_unknown_key_is_an_error_that_lists_the_known_keys():
    with pytest.raises(ConfigError, match=r"train.epoch: unknown key in TrainConfig; known keys: model, epochs"):
        read_run_yaml("train:\n  epoch: 3\n")


@pytest.mark.parametrize(
    ("section", "data", "message"),
    [
        (TrainConfig, {"epochs": 0}, "train.epochs: must be >= 1 or null (fitted to the data), got 0"),
        (TrainConfig, {"batch_size_per_replica": "big"}, "train.batch_size_per_replica: expected an integer"),
        (TrainConfig, {"accelerator": "tpu-v9"}, "train.accelerator: expected one of"),
        (TrainConfig, {"epochs": True}, "expected an integer, got True"),
        (ConvertConfig, {"splits": {"train": 0.8, "test": 0.1}}, "must add up to 1, they add up to 0.9"),
        (ConvertConfig, {"resize": [0, 10]}, "convert.resize: must be two positive sizes"),
        (ConvertConfig, {"compression": "zip"}, "convert.compression"),
        (PromoteConfig, {"stage": "qa"}, "promote.stage: expected one of"),
        (PromoteConfig, {"model_name": "my model!"}, "promote.model_name"),
    ],
)
def test_bad_values_name_the_field(section, data, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        section.from_dict(data)


def test_sections_are_frozen():
    cfg = TrainConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.epochs = 9  # type: ignore[misc]


def test_integral_floats_are_accepted_as_ints_because_kfp_collected_turns_ints_into_floats():
    assert TrainConfig.from_dict({"epochs": 3.0}).epochs == 3
    with pytest.raises(ConfigError):
        TrainConfig.from_dict({"epochs": 3.5})


def test_yaml_that_is_not_a_mapping_is_rejected(tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        read_run_yaml(path)


def test_one_rule_for_numbers_that_arrive_as_floats():
    from trainer.configbase import whole_int

    assert [whole_int(v) for v in (3, 3.0, -2.0, 2.5, True, "3", None)] == [3, 3, -2, None, None, None, None]


def test_a_config_is_a_strict_record_that_checks_on_construction_and_freezes_its_mappings():
    import types

    cfg = EvaluateConfig.from_dict({"value_thresholds": {"accuracy": 1}})
    assert isinstance(cfg.value_thresholds, types.MappingProxyType) and cfg.value_thresholds == {"accuracy": 1.0}
    with pytest.raises(TypeError):
        cfg.value_thresholds["loss"] = 0.1  # type: ignore[index]
    assert type(cfg.to_dict()["value_thresholds"]) is dict  # plain data again
    with pytest.raises(ConfigError, match="evaluate.value_thresholds.accuracy: expected a number, got 'high'"):
        EvaluateConfig(value_thresholds={"accuracy": "high"})  # checked when made, not only when read
