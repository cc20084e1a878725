"""``python -m trainer`` (main()): config loading and exit statuses, without training."""

import pytest

from trainer.__main__ import load_config, main
from trainer.config import ConfigError


def test_config_file_sets_and_flags(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text("epochs: 7\nlearning_rate: 0.01\n")
    config = load_config(str(path), ["precision=float32", "model_options={backbone: resnet50}"], {"epochs": 2})
    assert (config.epochs, config.learning_rate, config.precision) == (2, 0.01, "float32")
    assert dict(config.model_options) == {"backbone": "resnet50"}


def test_whole_run_config_file(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("convert: {source: digits}\ntrain: {epochs: 4}\n")
    assert load_config(str(path), [], {}).epochs == 4


def test_bad_set(tmp_path):
    with pytest.raises(ConfigError, match="expected field=value"):
        load_config(None, ["epochs"], {})


def test_exit_status_2_for_a_bad_config_or_dataset(tmp_path, capsys):
    assert main(["--dataset", str(tmp_path), "--model-dir", str(tmp_path / "m"), "--set", "bogus=1"]) == 2
    assert "bogus: unknown key in TrainConfig" in capsys.readouterr().err
    assert main(["--dataset", str(tmp_path), "--model-dir", str(tmp_path / "m")]) == 2
    assert "has no dataset.json" in capsys.readouterr().err


def test_exit_status_2_for_an_option_the_dataset_s_task_does_not_take(tmp_path, capsys):
    from tests.datasets import write_test_dataset

    dataset = write_test_dataset(tmp_path / "dataset", {"train": 4})
    argv = ["--dataset", str(dataset), "--model-dir", str(tmp_path / "m"), "--set", "model_options={bogus: 1}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: model_options.bogus: unknown key in ClassifierOptions") and err.count("\n") == 1
    assert not (tmp_path / "m").exists()
