"""The step command lines' flags generated from config fields (``components.cli.add_config_flags``)."""

import argparse
import dataclasses
from typing import Optional

import pytest

from components.benchmark.config import BenchmarkConfig
from components.cli import add_config_flags, field_docs, flags_to_fields, load_section
from components.convert.config import ConvertConfig
from components.serving.config import MonitorConfig, PromoteConfig
from trainer.config import ConfigBase, ConfigError, EvaluateConfig, TrainConfig

SECTIONS = (ConvertConfig, TrainConfig, EvaluateConfig, BenchmarkConfig, PromoteConfig, MonitorConfig)


def _parser(cls, **kwargs) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(exit_on_error=False)
    add_config_flags(p, cls, **kwargs)
    return p


@pytest.mark.parametrize("cls", SECTIONS, ids=lambda c: c.__name__)
def test_every_field_gets_a_flag_with_its_docstring_line_and_no_default(cls):
    parser = _parser(cls)
    fields = flags_to_fields(parser.parse_args([]))
    assert sorted(fields) == sorted(f.name for f in dataclasses.fields(cls))
    assert set(fields.values()) == {None}  # not given: load_section keeps the YAML's or the default
    helps = field_docs(cls)
    assert sorted(helps) == sorted(fields), f"{cls.__name__}: every field needs a line under Attributes:"
    text = parser.format_help().replace("\n", " ")
    for name in fields:
        assert "--" + name.replace("_", "-") in text


def test_types_come_from_the_annotations():
    argv = ["--resize", "32", "48", "--classes", "cat", "dog", "--no-stratify", "--limit-per-split", "5"]
    argv += ["--target-shard-mb", "1.5", "--compression", "GZIP", "--resize-mode", "pad"]
    fields = flags_to_fields(_parser(ConvertConfig).parse_args(argv))
    assert fields["resize"] == (32, 48) and fields["classes"] == ("cat", "dog")
    assert fields["stratify"] is False and fields["limit_per_split"] == 5 and fields["target_shard_mb"] == 1.5
    config = load_section(ConvertConfig, None, fields)
    assert (config.compression, config.resize_mode, config.resize) == ("GZIP", "pad", (32, 48))
    with pytest.raises(argparse.ArgumentError):
        _parser(ConvertConfig).parse_args(["--resize-mode", "stretch"])  # a Literal's values are the choices


def test_renamed_pairs_and_nested_sections():
    rename = {"value_thresholds": "--value-threshold"}
    args = _parser(EvaluateConfig, rename=rename).parse_args(
        ["--value-threshold", "accuracy=0.8", "--value-threshold", "loss=2"]
    )
    assert flags_to_fields(args)["value_thresholds"] == {"accuracy": 0.8, "loss": 2}
    bad = _parser(EvaluateConfig, rename=rename).parse_args(["--value-threshold", "accuracy"])
    with pytest.raises(ConfigError, match="--value-threshold 'accuracy': expected name=value"):
        flags_to_fields(bad)
    args = _parser(PromoteConfig).parse_args(["--load-test", "{clients: 2, max_p99_ms: 500}"])
    assert load_section(PromoteConfig, None, flags_to_fields(args)).load_test.clients == 2


def test_include_exclude_and_overrides():
    parser = _parser(TrainConfig, include=("epochs", "model"), overrides={"model": {"choices": ["a", "b"]}})
    assert sorted(flags_to_fields(parser.parse_args(["--model", "a"]))) == ["epochs", "model"]
    with pytest.raises(argparse.ArgumentError):
        parser.parse_args(["--model", "c"])
    assert "source" not in flags_to_fields(_parser(ConvertConfig, exclude=("source",)).parse_args([]))


@dataclasses.dataclass(frozen=True)
class _Odd(ConfigBase):
    """A section with a field no flag can express.

    Attributes:
        either: an int or a string.
    """

    either: Optional[int | str] = None


def test_a_field_no_flag_can_express_is_refused():
    with pytest.raises(TypeError, match="give the flag by hand"):
        _parser(_Odd)
    assert flags_to_fields(_parser(_Odd, exclude=("either",)).parse_args([])) == {}
