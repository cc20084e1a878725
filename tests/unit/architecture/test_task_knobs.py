"""A setting that one task reads lives in that task's typed options, not in a generic step config.

Two rules, each shown to fail on a planted violation:

- **Read by one task.** The step config the tasks are handed (``Task.evaluate``'s ``config``, an
  ``EvaluateConfig``) is read in the task packages as ``config.<field>``. A field that some
  built-in task reads and another ignores is the first task's knob (``top_k`` was the classifier's):
  it belongs in the task's step options (``Task.step_options_types``; ``evaluation_options``),
  which are exempt, as a task that takes no options of a step never reads them.
- **Once.** A key of a task's step options is not also a field of the step config that holds
  those options (``EvaluateConfig.top_k`` beside ``evaluation_options.top_k``, or
  ``PredictConfig.coco`` beside the detector's ``prediction_options.coco``).
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import ClassVar

import pytest

from components.batch_predict.config import PredictConfig
from components.select.config import SelectConfig
from trainer.config import ConfigBase, ConfigError, EvaluateConfig
from trainer.tasks import TaskError, get_task, task_types
from trainer.tasks.base import Task

ROOT = Path(__file__).resolve().parents[3]

# The step configs a task's methods are handed (Task.evaluate's ``config``).
HANDED_TO_TASKS: tuple[type[ConfigBase], ...] = (EvaluateConfig,)
# The step configs that hold a mapping of the tasks' own settings, by that mapping's name.
HOLDERS: dict[str, type[ConfigBase]] = {
    "evaluation_options": EvaluateConfig,
    "prediction_options": PredictConfig,
    "selection_options": SelectConfig,
}


def _fields(section: type) -> set[str]:
    return {f.name for f in dataclasses.fields(section)}


def built_in_task_sources(root: Path = ROOT) -> dict[str, dict[str, str]]:
    """Task -> its package's modules (relative path -> source): trainer/tasks/<task>/."""
    packages = sorted(p.parent for p in (root / "trainer" / "tasks").glob("*/__init__.py"))
    return {
        package.name: {str(p.relative_to(root)): p.read_text() for p in sorted(package.rglob("*.py"))}
        for package in packages
    }


def config_reads(sources: Mapping[str, str]) -> set[str]:
    """The attributes the modules read as ``config.<name>``."""
    names = set()
    for path, source in sources.items():
        for node in ast.walk(ast.parse(source, filename=path)):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "config":
                names.add(node.attr)
    return names


def one_task_knobs(
    task_sources: Mapping[str, Mapping[str, str]], section: type[ConfigBase], exempt: Collection[str]
) -> list[str]:
    """``Section.field: ...`` for each field of ``section`` some of the tasks read and others do not.

    Args:
        task_sources: task -> its package's modules (relative path -> source).
        section: a step config the tasks are handed.
        exempt: the mappings of the tasks' own settings (a task that takes none does not read them).
    """
    fields = _fields(section) - set(exempt)
    reads = {task: config_reads(sources) & fields for task, sources in task_sources.items()}
    found = []
    for name in sorted(set().union(*reads.values()) - set.intersection(*reads.values())):
        readers = [task for task, read in sorted(reads.items()) if name in read]
        found.append(
            f"{section.__name__}.{name}: read by {', '.join(readers)} only; a task's own setting goes in its "
            "typed step options (Task.step_options_types), not in the generic config"
        )
    return found


def options_also_in_the_config(types: Mapping[str, type[Task]], holders: Mapping[str, type[ConfigBase]]) -> list[str]:
    """``task: Config.field ...`` for each key of a task's step options that is a field of the config holding them."""
    found = []
    for name, task_type in sorted(types.items()):
        for field, options_type in task_type.step_options_types.items():
            holder = holders[field]
            for key in sorted(_fields(options_type) & _fields(holder)):
                found.append(f"{name}: {holder.__name__}.{key} is also {field}.{key}; keep the task's alone")
    return found


def _exempt() -> set[str]:
    return {field for task_type in task_types().values() for field in task_type.step_options_types}


def test_no_field_of_a_config_handed_to_the_tasks_is_read_by_one_task_only():
    sources = built_in_task_sources()
    assert {"classification", "detection"} <= set(sources)
    for section in HANDED_TO_TASKS:
        assert config_reads(sources["detection"]) & _fields(section), "the rule reads nothing: is config renamed?"
        assert one_task_knobs(sources, section, _exempt()) == []


def test_the_one_task_rule_reports_a_planted_knob():
    planted = {
        "classification": {
            "trainer/tasks/classification/__init__.py": (
                "def evaluate(self, config):\n"
                "    own = self.step_options('evaluation_options', config.evaluation_options)\n"
                "    return score(config.split, config.batch_size, config.top_k, own)\n"
            )
        },
        "detection": {
            "trainer/tasks/detection/__init__.py": "def evaluate(self, config):\n    return score(config.split)\n",
            "trainer/tasks/detection/evaluation.py": "def f(config, o):\n    return config.batch_size, o.top_k\n",
        },
    }

    @dataclasses.dataclass(frozen=True)
    class Section(ConfigBase):
        split: str = "test"
        batch_size: int = 1
        top_k: int = 3
        evaluation_options: Mapping = dataclasses.field(default_factory=dict)

    assert one_task_knobs(planted, Section, {"evaluation_options"}) == [
        "Section.top_k: read by classification only; a task's own setting goes in its typed step options "
        "(Task.step_options_types), not in the generic config"
    ]
    assert one_task_knobs(planted, Section, ()) == [  # the mapping itself, were it not the tasks' place
        "Section.evaluation_options: read by classification only; a task's own setting goes in its typed step "
        "options (Task.step_options_types), not in the generic config",
        "Section.top_k: read by classification only; a task's own setting goes in its typed step options "
        "(Task.step_options_types), not in the generic config",
    ]


def test_a_task_s_step_options_are_not_also_fields_of_the_generic_config():
    types = task_types()
    assert "evaluation_options" in types["classification"].step_options_types
    assert "prediction_options" in types["detection"].step_options_types
    assert set(HOLDERS) >= _exempt()
    assert options_also_in_the_config(types, HOLDERS) == []


def test_the_once_rule_reports_a_planted_knob_left_in_the_config():
    @dataclasses.dataclass(frozen=True)
    class Options(ConfigBase):
        top_k: int = 3
        coco: bool = True

    class Planted(type(get_task("classification"))):
        name = "planted"
        step_options_types: ClassVar = {"evaluation_options": Options, "prediction_options": Options}

    assert options_also_in_the_config({"planted": Planted}, HOLDERS) == [
        "planted: PredictConfig.top_k is also prediction_options.top_k; keep the task's alone",
    ]

    @dataclasses.dataclass(frozen=True)
    class OldEvaluateConfig(ConfigBase):
        split: str = "test"
        top_k: int = 3

    assert options_also_in_the_config({"planted": Planted}, {**HOLDERS, "evaluation_options": OldEvaluateConfig}) == [
        "planted: OldEvaluateConfig.top_k is also evaluation_options.top_k; keep the task's alone",
        "planted: PredictConfig.top_k is also prediction_options.top_k; keep the task's alone",
    ]


# --------------------------------------------------------------------------- the moved knobs


def test_the_classifier_s_top_k_is_its_evaluation_option():
    task = get_task("classification")
    assert task.step_options("evaluation_options", {}).top_k == 3
    assert task.step_options("evaluation_options", {"top_k": 5.0}).top_k == 5  # KFP hands ints over as floats
    with pytest.raises(TaskError, match=r"evaluation_options.top_k: must be >= 1, got 0"):
        task.step_options("evaluation_options", {"top_k": 0})
    with pytest.raises(TaskError, match=r"evaluation_options.topk: unknown key .*; known keys: top_k"):
        task.step_options("evaluation_options", {"topk": 5})
    with pytest.raises(TaskError, match=r"evaluation_options.top_k: task 'detection' takes no evaluation options"):
        get_task("detection").step_options("evaluation_options", {"top_k": 5})
    assert get_task("detection").step_options("evaluation_options", {}) is None


def test_the_detector_s_coco_is_its_prediction_option():
    assert get_task("detection").step_options("prediction_options", None).coco is True
    assert get_task("detection").step_options("prediction_options", {"coco": False}).coco is False
    with pytest.raises(TaskError, match=r"prediction_options.coco: task 'classification' takes no prediction options"):
        get_task("classification").step_options("prediction_options", {"coco": True})


def test_the_configs_check_what_some_task_takes_and_name_the_new_place_of_an_old_key():
    assert dict(EvaluateConfig.from_dict({"evaluation_options": {"top_k": 5}}).evaluation_options) == {"top_k": 5}
    with pytest.raises(ConfigError, match=r"^evaluate.evaluation_options.top_k: must be >= 1, got 0$"):
        EvaluateConfig(evaluation_options={"top_k": 0})
    with pytest.raises(ConfigError, match=r"^evaluate.evaluation_options.k: unknown key in the classifier's"):
        EvaluateConfig(evaluation_options={"k": 5})
    with pytest.raises(ConfigError, match=r"^evaluate.top_k: renamed; set evaluate.evaluation_options.top_k instead$"):
        EvaluateConfig.from_dict({"top_k": 3}, _prefix="evaluate.")
    base = {"data": "x", "output_uri": "o", "model_dir": "m"}
    assert PredictConfig(**base).prediction_options == {}
    with pytest.raises(ConfigError, match=r"^predict.prediction_options.coco: expected true or false, got 'on'$"):
        PredictConfig(**base, prediction_options={"coco": "on"})
    with pytest.raises(ConfigError, match=r"^predict.coco: renamed; set predict.prediction_options.coco instead$"):
        PredictConfig.from_dict({**base, "coco": "off"}, _prefix="predict.")


def test_batch_predict_s_run_form_takes_the_task_s_prediction_options_and_names_the_old_coco():
    from pipelines import batch_predict
    from pipelines.tools import params

    form = params.run_form(batch_predict.pipeline)
    assert "coco" not in form and form["prediction_options"].default == {}
    with pytest.raises(params.ParameterError) as err:
        params.resolve(form, [params.parse_set("coco=off")], batch_predict.NAME)
    assert err.value.problems == [
        "coco (SET): renamed; set prediction_options.coco instead (a dotted name sets one key of a mapping)"
    ]
    given = params.parse_set("data=photos output_uri=out model_dir=m prediction_options.coco=false")
    values = params.resolve(form, [given], batch_predict.NAME).values
    assert values["prediction_options"] == {"coco": False}
    params.check_steps(batch_predict.pipeline, values)
    wrong = params.parse_set("data=photos output_uri=out model_dir=m prediction_options.cocoa=true")
    with pytest.raises(params.ParameterError) as err:
        params.check_steps(batch_predict.pipeline, params.resolve(form, [wrong], batch_predict.NAME).values)
    known = "prediction_options.cocoa: unknown key in the detector's prediction options; known keys: coco"
    assert known in err.value.problems
