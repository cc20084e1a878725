"""A pipeline's run form set from a YAML file and ``name=value`` pairs: ``make run``, ``sweep``, ``submit``.

The form is the compiled pipeline's own (``pipeline.component_spec.inputs``: the names, KFP types
and defaults the Kubeflow UI shows), so a parameter added to a pipeline can be set here with no
change. Values come in layers, later over earlier: the form's defaults, a command's own defaults
(``make run`` trains on a subset), the ``CONFIG`` file, the command's shorthands (``EPOCHS``,
``DATA``, ...) and ``SET``. A dotted name (``model_options.image_size``) sets one key of a mapping
parameter and keeps its other keys; a plain name replaces the whole value. Every value is checked
against its parameter's type; then the step configs the pipeline feeds are built from the merged
values (:func:`check_steps`), so a value out of range fails in a second, before anything runs.
No TensorFlow here.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import yaml

from components.params import none_if_empty
from components.surface import surfaces
from trainer.config import (
    ConfigBase,
    ConfigError,
    TrainConfig,
)
from trainer.configbase import whole_int

# What a value of each KFP parameter type must be, as the messages say it.
TYPE_WORDS = {
    "Integer": "an integer",
    "Float": "a number",
    "Boolean": "true or false",
    "String": "a string",
    "Dict": "a mapping, e.g. {key: value}",
    "List": "a list, e.g. [a, b]",
}


# Run-form parameters that were renamed -> their new spelling: a CONFIG file or SET that still
# names one gets a line that says what to write instead.
# (batch_predict's coco, auto/on/off, is the detector's own setting now: a boolean, true by default.)
RENAMED = {"kserve_mode": "serving_options.mode", "coco": "prediction_options.coco"}


class ParameterError(ValueError):
    """The run's parameters are wrong; one line per problem, each naming the valid form."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = list(problems)


@dataclasses.dataclass(frozen=True)
class FormParameter:
    """One parameter of a pipeline's run form.

    Attributes:
        name: its name.
        type: its KFP type name (``Integer``, ``Float``, ``Boolean``, ``String``, ``Dict``, ``List``).
        default: its default, as the form shows it.
    """

    name: str
    type: str
    default: Any


def run_form(pipeline: Any) -> dict[str, FormParameter]:
    """The run form of a ``@dsl.pipeline`` function, in the order of its signature."""
    return {
        name: FormParameter(name, str(spec.type), copy.deepcopy(spec.default))
        for name, spec in pipeline.component_spec.inputs.items()
    }


@dataclasses.dataclass(frozen=True)
class Layer:
    """Values from one place, by (dotted) parameter name.

    Attributes:
        origin: where they come from, for messages and the report (``SET``, ``CONFIG run.yaml``).
        values: name -> value; a dotted name sets a key of a mapping parameter.
        text: the values are the command line's text, read here as YAML scalars (a ``String``
            parameter keeps the text as it is: ``served_model_name=007`` stays ``"007"``).
    """

    origin: str
    values: Mapping[str, Any]
    text: bool = False


@dataclasses.dataclass(frozen=True)
class RunParameters:
    """Every parameter of a run form with its value, its default and where the value came from.

    Attributes:
        pipeline: the pipeline's name.
        values: name -> the value the run gets (every parameter of the form).
        defaults: name -> the form's default.
        origins: name -> where its value came from (``default`` where nothing set it).
    """

    pipeline: str
    values: dict[str, Any]
    defaults: dict[str, Any]
    origins: dict[str, str]

    def changed(self) -> dict[str, Any]:
        """The parameters whose values differ from the form's defaults."""
        return {k: v for k, v in self.values.items() if v != self.defaults.get(k)}

    def records(self) -> list[dict[str, Any]]:
        """The changed parameters as records: name, value, default, origin (``from``)."""
        return [
            {"name": k, "value": v, "default": self.defaults.get(k), "from": self.origins.get(k, "default")}
            for k, v in self.changed().items()
        ]

    def describe(self) -> str:
        """One line: the changed parameters and where each came from (or that there are none)."""
        items = [f"{r['name']}={format_value(r['value'])} ({r['from']})" for r in self.records()]
        return ", ".join(items) if items else "the run form's defaults"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data: the pipeline, every value, and the changed ones with their defaults."""
        return {"pipeline": self.pipeline, "values": self.values, "changed": self.records()}


def format_value(value: Any) -> str:
    """A value as a person types it: JSON for mappings and lists, YAML's words for the rest."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(", ", ": "))
    return str(value)


_ITEM = re.compile(r"^[A-Za-z_][\w.:-]*=")  # ":" for slice keys: slice_thresholds.camera:night.accuracy=0.8


def parse_set(text: Optional[str], origin: str = "SET") -> Layer:
    """``SET='epochs=20 model_options.image_size=128'`` as a layer.

    Items are separated by spaces (shell quoting allowed); a word that does not start with
    ``name=`` continues the item before it, so a YAML value may hold spaces:
    ``grid_cells=[{accelerator: cpu, epochs: 1}]``.

    Raises:
        ParameterError: text before the first ``name=``.
    """
    items: list[str] = []
    for word in shlex.split(text or ""):
        if _ITEM.match(word):
            items.append(word)
        elif items:
            items[-1] += " " + word
        else:
            example = "epochs=20 model_options.image_size=128"
            raise ParameterError([f"{origin} {word!r}: expected name=value, e.g. {origin}='{example}'"])
    values = {}
    for item in items:
        name, _, value = item.partition("=")
        values[name] = value
    return Layer(origin, values, text=True)


def read_config(path: str | Path) -> Layer:
    """A ``CONFIG`` file: a YAML mapping of run-form parameters (dotted names allowed) as a layer.

    Raises:
        ParameterError: the file is missing, not YAML, or not a mapping.
    """
    file = Path(path)
    where = f"CONFIG {path}"
    if not file.is_file():
        raise ParameterError([f"{where}: no such file; give a YAML file of run-form parameters (epochs: 20)"])
    try:
        data = yaml.safe_load(file.read_text())
    except yaml.YAMLError as err:
        raise ParameterError([f"{where} is not YAML: {' '.join(str(err).split())}"]) from None
    if data is None:
        data = {}
    if not isinstance(data, Mapping) or not all(isinstance(k, str) for k in data):
        raise ParameterError([f"{where}: expected a mapping of parameter names to values, got {data!r}"])
    return Layer(where, data)


def _check_type(name: str, value: Any, kind: str) -> Any:
    """``value`` as a value of the KFP type ``kind``; raises ConfigError naming the valid form."""
    ok: Any = None
    if kind == "Integer":
        ok = whole_int(value)
    elif kind == "Float":
        ok = None if isinstance(value, bool) or not isinstance(value, (int, float)) else float(value)
    elif kind == "Boolean":
        ok = value if isinstance(value, bool) else None
    elif kind == "String":
        ok = value if isinstance(value, str) else None
    elif kind == "Dict":
        ok = copy.deepcopy(dict(value)) if isinstance(value, Mapping) else None
    elif kind == "List":
        ok = copy.deepcopy(list(value)) if isinstance(value, (list, tuple)) else None
    else:  # a type this module does not know: the pipeline's compiler checks it
        ok = value
    if ok is None:
        raise ConfigError(f"{name}: expected {TYPE_WORDS.get(kind, kind)} ({kind} parameter), got {value!r}")
    return ok


def _unknown(name: str, form: Mapping[str, FormParameter], origin: str, pipeline: str) -> str:
    new = RENAMED.get(name)
    if new is not None and new.split(".")[0] in form:
        return f"{name} ({origin}): renamed; set {new} instead (a dotted name sets one key of a mapping)"
    close = difflib.get_close_matches(name, list(form), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]!r}? " if close else ""
    whose = f"the {pipeline} pipeline's parameters" if pipeline else "the run form's parameters"
    return f"{name} ({origin}): no such parameter; {hint}{whose}: {', '.join(form)}"


def _read(value: Any, text: bool, kind: Optional[str]) -> Any:
    """A layer's value: the command line's text read as a YAML scalar (kept as text for a String)."""
    if not text or not isinstance(value, str) or kind == "String":
        return value
    try:
        read = yaml.safe_load(value) if value.strip() else ""
    except yaml.YAMLError:
        return value  # not YAML: the type check says what was expected
    if kind == "Float" and isinstance(read, str):
        try:
            return float(read)  # YAML 1.1 reads 1e-3 as text; a person means a number
        except ValueError:
            return read
    return read


def _set_key(current: Any, keys: Sequence[str], value: Any) -> dict[str, Any]:
    """A copy of the mapping ``current`` with ``keys`` (a path) set to ``value``."""
    out = copy.deepcopy(dict(current)) if isinstance(current, Mapping) else {}
    if len(keys) == 1:
        out[keys[0]] = value
    else:
        out[keys[0]] = _set_key(out.get(keys[0]), keys[1:], value)
    return out


def _apply(
    layer: Layer, form: Mapping[str, FormParameter], values: dict[str, Any], origins: dict[str, str], pipeline: str
) -> list[str]:
    """Puts one layer's values into ``values``; returns its problems, one line each."""
    problems = []
    mappings = [p.name for p in form.values() if p.type == "Dict"]
    for name, raw in layer.values.items():
        head, _, rest = name.partition(".")
        param = form.get(head)
        if param is None:
            problems.append(_unknown(head, form, layer.origin, pipeline))
            continue
        if rest and param.type != "Dict":
            problems.append(
                f"{name} ({layer.origin}): {head} is not a mapping ({param.type} parameter); dotted names set "
                f"keys of the mapping parameters: {', '.join(mappings) or 'none here'}"
            )
            continue
        try:
            if rest:
                value = _read(raw, layer.text, None)
                values[head] = _set_key(values[head], rest.split("."), value)
            else:
                values[head] = _check_type(head, _read(raw, layer.text, param.type), param.type)
        except ConfigError as err:
            problems.append(f"{err} ({layer.origin})")
            continue
        # A key merged into a mapping keeps where the mapping's other keys came from.
        before = origins.get(head)
        if not rest or before is None:
            origins[head] = layer.origin
        elif layer.origin not in before.split(" + "):
            origins[head] = f"{before} + {layer.origin}"
    return problems


def resolve(form: Mapping[str, FormParameter], layers: Sequence[Layer], pipeline: str = "") -> RunParameters:
    """The run's parameters: the form's defaults with the layers on top, in order, each checked.

    Args:
        form: the run form (:func:`run_form`).
        layers: values by (dotted) name, later layers over earlier ones.
        pipeline: the pipeline's name, for messages.

    Raises:
        ParameterError: unknown names (with the valid ones) and values of the wrong type, one line each.
    """
    values = {name: copy.deepcopy(p.default) for name, p in form.items()}
    origins: dict[str, str] = {}
    problems: list[str] = []
    for layer in layers:
        problems += _apply(layer, form, values, origins, pipeline)
    if problems:
        raise ParameterError(problems)
    return RunParameters(pipeline, values, {n: copy.deepcopy(p.default) for n, p in form.items()}, origins)


# ------------------------------------------------------------------------ the steps' own checks


@dataclasses.dataclass(frozen=True)
class _StepCall:
    """A component task of a compiled pipeline: its inputs fed by the run form or by constants."""

    component: str
    bound: dict[str, str]  # component parameter -> the run-form parameter feeding it
    constants: dict[str, Any]
    defaults: dict[str, Any]  # the component's own defaults


def _component_name(ref: str) -> str:
    """``comp-promote-model-2`` -> ``promote-model`` (the compiler numbers repeated components)."""
    return re.sub(r"-\d+$", "", ref.removeprefix("comp-"))


def _calls(spec: Any, dag: Any, env: Mapping[str, Optional[str]]) -> list[_StepCall]:
    """The component tasks of ``dag`` and of the DAGs nested in it, with their run-form bindings."""
    found = []
    for task in dag.tasks.values():
        bound: dict[str, str] = {}
        constants: dict[str, Any] = {}
        for name, given in task.inputs.parameters.items():
            kind = given.WhichOneof("kind")
            if kind == "component_input_parameter" and env.get(given.component_input_parameter):
                bound[name] = env[given.component_input_parameter]
            elif kind == "runtime_value" and given.runtime_value.WhichOneof("value") == "constant":
                constants[name] = _plain(given.runtime_value.constant)
        component = spec.components[task.component_ref.name]
        if component.WhichOneof("implementation") == "dag":
            found += _calls(spec, component.dag, bound)
            continue
        declared = component.input_definitions.parameters
        defaults = {n: _plain(p.default_value) for n, p in declared.items() if p.HasField("default_value")}
        found.append(_StepCall(_component_name(task.component_ref.name), bound, constants, defaults))
    return found


def _plain(value: Any) -> Any:
    """A protobuf ``Value`` of the compiled spec (a constant, a default) as plain Python data."""
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return {k: _plain(v) for k, v in value.struct_value.fields.items()}
    if kind == "list_value":
        return [_plain(v) for v in value.list_value.values]
    if kind == "number_value":
        number = value.number_value
        return int(number) if number.is_integer() else number
    return None if kind in (None, "null_value") else getattr(value, kind)


def step_calls(pipeline: Any) -> list[Any]:
    """Every component task of a ``@dsl.pipeline`` function (nested groups included) and which of
    its parameters each run-form parameter feeds.
    """
    spec = pipeline.pipeline_spec
    env = {name: name for name in spec.root.input_definitions.parameters}
    return _calls(spec, spec.root.dag, env)


def _step_fields(call: _StepCall, cls: type[ConfigBase], aliases: Mapping[str, str], values: Mapping[str, Any]):
    """The section's fields the call sets (a stand-in for "none" as None, or left to the section's default)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    data: dict[str, Any] = {}
    for name in dict.fromkeys([*call.bound, *call.constants]):
        field = aliases.get(name, name)
        if field not in fields:
            continue  # a step's own parameter (a place, a run id), no field
        value = values[call.bound[name]] if name in call.bound else call.constants[name]
        if isinstance(value, str) and "{{$" in value:
            continue  # a placeholder KFP fills in at run time
        stand_in = none_if_empty(value) is None and not isinstance(value, bool)
        optional = fields[field].default is None or "Optional[" in str(fields[field].type)
        if stand_in and optional:
            data[field] = None  # KFP's stand-in for "none": the step passes None on
        elif stand_in and value == call.defaults.get(name):
            continue  # the step's own default, passed on
        else:
            data[field] = value
    return data


def _reword(message: str, call: _StepCall, aliases: Mapping[str, str], cls: type[ConfigBase]) -> str:
    """A section's message about ``train.epochs`` as one about the run-form parameter ``epochs``."""
    section = cls._section
    if not message.startswith(section):
        return message
    field, _, rest = message[len(section) :].partition(":")
    by_field = {aliases.get(name, name): name for name in call.bound}
    param = call.bound.get(by_field.get(field.split(".")[0], ""))
    if param is None:
        return message
    return f"{param}{field[len(field.split('.')[0]) :]}:{rest}"


def _build(cls: type[ConfigBase], fields: Mapping[str, Any], task: Optional[str]) -> None:
    """Builds the section from ``fields`` (its checks run), with the task's model options for
    training and the serving target's options for promotion and monitoring.
    """
    from trainer.tasks import get_task

    config = cls.from_dict(fields)
    if task is not None and isinstance(config, TrainConfig):
        get_task(task, dict(config.model_options))
    if hasattr(config, "serving_options"):
        from components.serving.targets import TargetError, target_class

        try:
            target = target_class(config.target)
        except TargetError as err:
            raise ConfigError(f"{cls._section}target: {err}") from None
        # The target's own settings, parsed by the target as the step will parse them.
        target.options_type.from_dict(config.serving_options, _prefix="serving_options.")


def _field_named(line: str, section: str) -> str:
    """The field a section's message is about: ``train.epochs: ...``, ``model_options.x: ...`` -> its first name."""
    return re.split(r"[.:]", line.removeprefix(section), maxsplit=1)[0]


def _step_problems(call: _StepCall, values: Mapping[str, Any], task: Optional[str]) -> list[str]:
    """What the step's config says of the values: its first refusal, then one line per other refused field.

    A section stops at its first refusal: of the run's values as they are, the first line. A field
    refused alone for its own value gets its own line too, said among the run's other values (less
    those another refusal names), not the section's defaults: a rule between fields (a cost budget
    and the accelerator it is priced at) names what the user gave, and a field refused alone only
    for another's default (epochs 3 beside a budget) is no culprit.
    """
    from trainer.tasks import TaskError

    surface = surfaces()[call.component]
    cls, aliases = surface.config, surface.aliases
    fields = _step_fields(call, cls, aliases, values)

    def refusal(given: Mapping[str, Any]) -> Optional[str]:
        try:
            _build(cls, given, task)
            return None
        except (ConfigError, TaskError) as err:
            return str(err)

    def own_line(name: str) -> Optional[str]:
        alone = refusal({name: fields[name], **({"target": fields["target"]} if "target" in fields else {})})
        if alone is None or _field_named(alone, cls._section) != name:
            return None
        context = dict(fields)
        while (line := refusal(context)) is not None and _field_named(line, cls._section) != name:
            other = _field_named(line, cls._section)
            if other not in context or other in (name, "target"):
                return None
            del context[other]  # another field's refusal: this one's among the rest
        return line

    whole = refusal(fields)
    if whole is None:
        return []
    problems = [whole]
    for name in fields:
        line = own_line(name)
        if line is not None and line not in problems:
            problems.append(line)
    return [_reword(line, call, aliases, cls) for line in problems]


def check_steps(pipeline: Any, values: Mapping[str, Any], task: Optional[str] = None) -> None:
    """Builds the config of every step the pipeline feeds from ``values``: their own range checks.

    Args:
        pipeline: the ``@dsl.pipeline`` function.
        values: every run-form parameter's value (:attr:`RunParameters.values`).
        task: the task the run trains (its model options are checked too); None to skip that.

    Raises:
        ParameterError: one line per value a step's config refuses.
    """
    problems: list[str] = []
    configured = {name for name, surface in surfaces().items() if surface.config is not None}
    for call in step_calls(pipeline):
        if call.component in configured:
            problems += [line for line in _step_problems(call, values, task) if line not in problems]
    if problems:
        order = {name: i for i, name in enumerate(values)}
        raise ParameterError(sorted(problems, key=lambda line: order.get(re.split(r"[.:]", line)[0], len(order))))
