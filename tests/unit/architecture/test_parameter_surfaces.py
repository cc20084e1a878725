"""A setting's surfaces agree: its config field, the component parameter that repeats it and the
pipeline run-form parameter that feeds that component (name, type, default; docs/CONTRACTS.md).

KFP needs literal signatures (kfp.local runs the components, kfp ships their source), so the
surfaces are copies; this test is what keeps them copies. Agreement allows KFP's stand-ins: a
component or run form may say ``0``, ``""``, ``{}`` or ``None`` where the config says ``None`` or
empty (``components.params.none_if_empty`` translates them). A run-form default may instead be
the task's (``trainer.tasks``: ``run_defaults``, its ``form``, the default thresholds).

No ``from __future__ import annotations`` here: the synthetic components' annotations must be types,
as kfp requires of real ones.
"""

import dataclasses
import importlib
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Optional

import pytest
from google.protobuf import json_format

from components.params import none_if_empty
from components.surface import Surface, surfaces
from pipelines import flow
from trainer.config import ConfigBase
from trainer.tasks import get_task

NO_DEFAULT = inspect.Parameter.empty


# Every step's declaration (components/<step>/surface.py) that says how its parameters meet a
# section (the sweep's and the notebook's components take only their own).
SURFACES = {name: s for name, s in surfaces().items() if s.config is not None or s.step_only}
RUN_FORMS = ("pipelines.end_to_end", "pipelines.detection")
# Run-form parameter -> the RunDefaults attribute that may give its default.
RUN_DEFAULT_OF = {"source": "data", "model": "model", "epochs": "epochs", "served_model_name": "served_model_name"}

_KINDS = {int: "int", float: "float", str: "str", bool: "bool", dict: "dict", list: "list"}


def kind(annotation: Any) -> Optional[str]:
    """The plain type of a parameter or field (int/float/str/bool/dict/list); None for an artifact."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return kind(rest[0]) if len(rest) == 1 else f"union {rest}"
    if origin is typing.Literal:
        return _KINDS.get(type(args[0]))
    if origin is tuple or annotation is tuple:
        return "list"
    if origin in (dict, Mapping, typing.Mapping) or annotation in (dict, Mapping):
        return "dict"
    if isinstance(annotation, type) and issubclass(annotation, ConfigBase):
        return "dict"
    if not isinstance(annotation, typing.Hashable):  # kfp's OutputPath(...): an output, no parameter
        return None
    return _KINDS.get(annotation)  # kfp's Input[...]/Output[...] are no parameters: None


def plain(value: Any) -> Any:
    """Tuples as lists and mappings as dicts, so a config default compares with a KFP default."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    return value


def agree(one: Any, other: Any) -> bool:
    """Equal, or both a stand-in of "none" (None, 0, "", {} or [], never False)."""
    if isinstance(one, bool) or isinstance(other, bool):
        return one is other
    if plain(one) == plain(other):
        return True
    return none_if_empty(plain(one)) is None and none_if_empty(plain(other)) is None


def field_of(cls: type[ConfigBase], name: str) -> tuple[str, Any]:
    """(kind, default) of a config field, or of item i of a tuple field for ``name[i]``."""
    match = re.fullmatch(r"(\w+)\[(\d+)\]", name)
    base = match[1] if match else name
    hints = typing.get_type_hints(cls)
    f = next(f for f in dataclasses.fields(cls) if f.name == base)
    default = f.default
    if default is dataclasses.MISSING:  # a required field: its factory's, or none
        default = NO_DEFAULT if f.default_factory is dataclasses.MISSING else f.default_factory()
    annotation = hints[base]
    if match:
        item = [a for a in typing.get_args(annotation) if a is not type(None)][0]
        return kind(typing.get_args(item)[int(match[2])]), None if default is None else default[int(match[2])]
    return kind(annotation), default


def component_disagreements(func: Callable, surface: Surface) -> list[str]:
    """What a component's signature says differently from its config section (empty: agreement)."""
    names = {f.name for f in dataclasses.fields(surface.config)} if surface.config else set()
    problems = []
    for p in inspect.signature(func).parameters.values():
        if kind(p.annotation) is None or p.name in surface.step_only:
            continue
        field = surface.aliases.get(p.name, p.name)
        if field.split("[")[0] not in names:
            problems.append(f"{p.name}: no field of {getattr(surface.config, '__name__', 'any section')}; "
                            "name the field in aliases or the parameter in step_only")  # fmt: skip
            continue
        field_kind, default = field_of(surface.config, field)
        if kind(p.annotation) != field_kind:
            problems.append(f"{p.name}: type {kind(p.annotation)}, the field {field} is {field_kind}")
        own = p.default is NO_DEFAULT or field in surface.own_default
        if not own and not agree(p.default, default):
            problems.append(f"{p.name}: default {p.default!r}, the field {field}'s is {default!r}")
    return problems


def wiring(pipeline: Any) -> list[tuple[str, str, str]]:
    """(run-form parameter, component name, component parameter) for every edge in the compiled DAGs."""
    spec = json_format.MessageToDict(pipeline.pipeline_spec)
    dags = [spec["root"]["dag"], *(c["dag"] for c in spec["components"].values() if "dag" in c)]
    edges = []
    for dag in dags:
        for task in dag["tasks"].values():
            component = re.sub(r"^comp-|-\d+$", "", task["componentRef"]["name"])
            for param, source in task.get("inputs", {}).get("parameters", {}).items():
                root = source.get("componentInputParameter")
                if root and component in SURFACES and not param.startswith("pipelinechannel--"):
                    edges.append((root.removeprefix("pipelinechannel--"), component, param))
    return edges


def run_form_disagreements(
    signature: inspect.Signature, edges: list[tuple[str, str, str]], task_name: str
) -> list[str]:
    """What a run form's signature says differently from the components it feeds and their sections."""
    quick = get_task(task_name).run_defaults
    problems = []
    for root, component, param in edges:
        surface = SURFACES[component]
        p, q = signature.parameters[root], inspect.signature(surface.func).parameters[param]
        if kind(p.annotation) != kind(q.annotation):
            problems.append(f"{root} -> {component}.{param}: type {kind(p.annotation)}, expected {kind(q.annotation)}")
        allowed = [] if q.default is NO_DEFAULT else [q.default]
        field = surface.aliases.get(param, param)
        if surface.config and field.split("[")[0] in {f.name for f in dataclasses.fields(surface.config)}:
            allowed.append(field_of(surface.config, field)[1])
        if root in quick.form:
            allowed.append(quick.form[root])
        if root in RUN_DEFAULT_OF:
            allowed.append(getattr(quick, RUN_DEFAULT_OF[root]))
        if root == "value_thresholds":
            allowed.append(get_task(task_name).default_value_thresholds)
        if root in flow._OWN:  # the form's own parameters (the pod's accelerator) have their own defaults
            allowed.append(flow._OWN[root][1])
        if not any(agree(p.default, a) for a in allowed):
            problems.append(f"{root} -> {component}.{param}: default {p.default!r}, expected one of {allowed!r}")
    return problems


@pytest.mark.parametrize("component", sorted(SURFACES))
def test_component_parameters_repeat_their_config_fields(component):
    surface = SURFACES[component]
    assert component_disagreements(surface.func, surface) == []


def _task_of(module: str) -> str:
    return importlib.import_module(module).TASK


@pytest.mark.parametrize("module", RUN_FORMS)
def test_run_forms_repeat_the_components_they_feed(module):
    pipeline = importlib.import_module(module).pipeline
    edges = wiring(pipeline)
    assert {c for _, c, _ in edges} >= {"convert-to-tfrecords", "train-model", "evaluate-model", "promote-model"}
    assert run_form_disagreements(inspect.signature(pipeline.pipeline_func), edges, _task_of(module)) == []


def _mismatched(
    epochs: float = 3,
    steps_per_epoch: int = 0,
    batch_size_per_replica: int = 64,
    warmup: int = 1,
    augment: bool = False,
) -> None:
    """A synthetic train component: epochs of the wrong type, a changed default, an unknown name."""


def test_a_mismatched_component_is_caught():
    problems = component_disagreements(_mismatched, SURFACES["train-model"])
    assert len(problems) == 3, problems
    assert problems[0].startswith("epochs: type float, the field epochs is int")
    assert problems[1].startswith("batch_size_per_replica: default 64")
    assert problems[2].startswith("warmup: no field of TrainConfig")


def test_a_mismatched_run_form_is_caught():
    from pipelines import end_to_end

    edges = wiring(end_to_end.pipeline)
    signature = inspect.signature(end_to_end.pipeline.pipeline_func)
    params = dict(signature.parameters)
    params["learning_rate"] = params["learning_rate"].replace(default=0.5)
    params["limit_per_split"] = params["limit_per_split"].replace(annotation=str, default="")
    problems = run_form_disagreements(signature.replace(parameters=list(params.values())), edges, "classification")
    assert any(p.startswith("learning_rate -> train-model.learning_rate: default 0.5") for p in problems), problems
    assert any(p.startswith("limit_per_split -> convert-to-tfrecords.limit_per_split: type str") for p in problems)
    assert len(problems) == 2, problems
