"""The run forms are generated from the tasks and the step configs (``pipelines.flow.pipeline``)."""

import dataclasses
import inspect

import pytest

from pipelines import detection, end_to_end, flow
from trainer import config
from trainer.config import TrainConfig

SECTIONS = [
    cls
    for cls in vars(config).values()
    if isinstance(cls, type) and issubclass(cls, config.ConfigBase) and cls.__module__ == config.__name__
]


@pytest.mark.parametrize("section", SECTIONS, ids=lambda cls: cls.__name__)
def test_every_config_field_is_documented(section):
    # The forms' descriptions come from these: a field without one would show an empty line in the UI.
    docs = section.field_docs()
    assert [f.name for f in dataclasses.fields(section) if not docs.get(f.name)] == []


@pytest.mark.parametrize("module", [end_to_end, detection], ids=lambda m: m.NAME)
def test_a_generated_form_has_every_parameter_typed_with_its_default_and_description(module):
    form = flow.form_parameters(module.TASK)
    inputs = module.pipeline.component_spec.inputs
    # the platform's secret_name comes last (pipelines/platform.py); build's preset is compile-time
    assert list(inputs) == [*form, "secret_name"]
    assert {*form, "preset"} == set(inspect.signature(flow.build).parameters)
    for name, parameter in form.items():
        spec = inputs[name]
        assert spec.default == parameter.default, name
        assert spec.description == parameter.description and len(spec.description) > 10, name
        assert "``" not in spec.description
    assert inputs["learning_rate"].description.startswith(TrainConfig.field_docs()["learning_rate"].replace("``", ""))


def test_the_task_s_defaults_and_notes_are_on_its_form_only():
    det, cls = flow.form_parameters("detection"), flow.form_parameters("classification")
    assert det["batch_size_per_replica"].default == 16 and cls["batch_size_per_replica"].default == 128
    assert det["value_thresholds"].default == {"ap50": 0.5} and cls["value_thresholds"].default == {"accuracy": 0.8}
    assert "preset: tpu-512" in det["model_options"].description
    assert "preset" not in cls["model_options"].description
    assert det["model_options"].default is not detection.FORM["model_options"]  # a copy each time


def test_a_config_field_named_in_the_form_reaches_the_compiled_form(monkeypatch):
    # One line in flow._FIELDS, and build() taking the parameter: the UI form shows it, typed, with
    # its default and the field's documentation; nothing is written by hand anywhere else.
    monkeypatch.setitem(flow._FIELDS, "shuffle_buffer", (TrainConfig, "shuffle_buffer"))
    real_build = flow.build
    seen = {}

    def build(shuffle_buffer, **parameters):
        seen["shuffle_buffer"] = shuffle_buffer
        real_build(**parameters)

    monkeypatch.setattr(flow, "build", build)
    made = flow.pipeline("classification", name="probe", description="a probe", summary="Probes.")
    spec = made.component_spec.inputs["shuffle_buffer"]
    assert (str(spec.type), spec.default) == ("Integer", 10_000)
    assert spec.description == TrainConfig.field_docs()["shuffle_buffer"]
    assert "shuffle_buffer" in seen  # the body received it, by name
