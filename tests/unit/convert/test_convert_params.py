"""The convert parameters: one translation into ConvertConfig, and the run-form copies agree with it."""

import dataclasses

import pytest

from components.convert.component import convert_to_tfrecords, plan_tfrecords
from components.convert.config import ConvertConfig
from components.convert.run import config_from_params
from components.params import none_if_empty
from pipelines.tfrecords import pipeline as tfrecords_pipeline
from trainer.config import ConfigError

# Parameters of the convert components that are not ConvertConfig fields.
# Not conversion settings: the steps' own, and the Secret every pipeline takes (pipelines/platform.py).
STEP_ONLY = {"verify", "parallelism", "secret_name"}


@pytest.mark.parametrize("value", [None, "", 0, 0.0, {}, []])
def test_stand_ins_for_none_become_none(value):
    assert none_if_empty(value) is None


@pytest.mark.parametrize("value", [False, True, "GZIP", 3, 0.5, {"a": 1}, [0]])
def test_values_pass_unchanged(value):
    assert none_if_empty(value) is value


def test_stand_ins_translate_to_the_config_defaults():
    config = config_from_params(
        source="digits", source_format="", limit_per_split=0, compression="", resize_height=0, resize_width=0, workers=0
    )
    assert config == ConvertConfig(source="digits")
    assert (config.source_format, config.limit_per_split, config.compression, config.resize, config.workers) == (
        None,
        None,
        None,
        None,
        None,
    )


def test_values_reach_the_config():
    config = config_from_params(
        source="gs://b/photos",
        source_format="folder",
        limit_per_split=7,
        target_shard_mb=12.5,
        compression="GZIP",
        stratify=True,
        power_of_two_shards=True,
        resize_height=96,
        resize_width=128,
        resize_mode="pad",
        seed=0,  # 0 is a seed, not "none": only fields that may be None are translated
        workers=3,
    )
    assert config == ConvertConfig(
        source="gs://b/photos",
        source_format="folder",
        limit_per_split=7,
        target_shard_mb=12.5,
        compression="GZIP",
        stratify=True,
        power_of_two_shards=True,
        resize=(96, 128),
        resize_mode="pad",
        seed=0,
        workers=3,
    )
    # kfp.local hands ints over as floats in places (Collected, dict contents): still ints here.
    assert config_from_params(source="digits", limit_per_split=5.0).limit_per_split == 5


def test_half_a_resize_and_unknown_names_are_refused():
    with pytest.raises(ConfigError, match="give both resize_height and resize_width"):
        config_from_params(source="digits", resize_height=32, resize_width=0)
    with pytest.raises(ConfigError, match="limit: unknown key in ConvertConfig; known keys: source"):
        config_from_params(source="digits", limit=3)
    with pytest.raises(ConfigError, match="compression"):
        config_from_params(source="digits", compression="zip")


def _defaults(spec_inputs):
    return {name: spec.default for name, spec in spec_inputs.items() if name not in STEP_ONLY}


@pytest.mark.parametrize("step", [convert_to_tfrecords, plan_tfrecords, tfrecords_pipeline], ids=lambda s: s.name)
def test_every_run_form_default_is_the_config_default(step):
    """The components' and the pipeline's parameter lists are copies (KFP needs literal
    signatures): each name must be a config field (or resize's halves), each default the config's."""
    defaults = _defaults(step.component_spec.inputs)
    defaults.pop("source")  # required on the components; the pipeline's default is the config's
    config = config_from_params(source="digits", **defaults)
    assert config == ConvertConfig(source="digits"), step.name
    fields = {f.name for f in dataclasses.fields(ConvertConfig)} | {"resize_height", "resize_width"}
    assert set(defaults) <= fields


def test_the_two_components_take_the_same_conversion_parameters():
    one = _defaults(convert_to_tfrecords.component_spec.inputs)
    fan = _defaults(plan_tfrecords.component_spec.inputs)
    assert one == fan
    pipe = _defaults(tfrecords_pipeline.component_spec.inputs)
    assert set(pipe) <= set(one)
    assert {k: v for k, v in one.items() if k in pipe and k not in ("source", "compression")} == {
        k: v for k, v in pipe.items() if k not in ("source", "compression")
    }


def test_optional_where_kfp_local_accepts_it():
    """kfp.local accepts Optional[str] = None on a component (test_convert_component runs it)."""
    for step in (convert_to_tfrecords, plan_tfrecords):
        inputs = step.component_spec.inputs
        for name in ("compression", "source_format"):
            assert inputs[name].type == "String" and inputs[name].optional and inputs[name].default is None
        # kfp.local calls int(None) for Optional[int] = None: 0 stays the stand-in for these.
        for name in ("limit_per_split", "resize_height", "resize_width", "workers"):
            assert inputs[name].type == "Integer" and inputs[name].default == 0
    # A pipeline refuses Optional[str] = None (no parameter type): "" is its stand-in.
    assert tfrecords_pipeline.component_spec.inputs["compression"].default == ""
