"""The task registry: configured tasks with typed options, their tables, and their renderers."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import trainer.tasks
from components.evaluate.renderers import renderers_of
from trainer.extensions import EXTENSIONS_ENV
from trainer.tasks import RunDefaults, Task, TaskError, get_task, task_names, task_types

ROOT = Path(__file__).resolve().parents[2]


def test_the_built_in_tasks_are_registered():
    assert {"classification", "detection"} <= set(task_names())


@pytest.mark.parametrize("name", task_names())
def test_every_registered_task_has_renderers(name):
    renderers = renderers_of(name)
    assert callable(renderers.report) and callable(renderers.page)


@pytest.mark.parametrize("name", task_names())
def test_every_task_s_tables_name_its_own_metrics(name):
    task = get_task(name)
    names = {m.name for m in task.metrics}
    assert task.headline_metric in names
    assert task.quality_metrics and set(task.quality_metrics) <= names
    assert set(task.default_value_thresholds) <= names
    assert set(task.run_defaults.headline) <= names and task.run_defaults.headline[0] == task.headline_metric
    label, value = task.headline({task.headline_metric: 0.5})
    assert label.startswith("test ") and value == 0.5


def test_a_task_without_renderers_fails_plainly(monkeypatch):
    class Bare(type(get_task("classification"))):
        name = "bare"

    monkeypatch.setitem(trainer.tasks._TASKS._entries, "bare", Bare)
    assert "bare" in task_names()
    with pytest.raises(TaskError, match="no renderers for task 'bare'; tasks with renderers: .*classification"):
        renderers_of("bare")


def test_options_are_typed_and_strict():
    assert get_task("detection", {"image_size": 128.0, "max_level": 4}).options.image_size == 128
    with pytest.raises(TaskError, match="model_options.image_size: expected an integer or 'auto', got 'big'"):
        get_task("detection", {"image_size": "big"})
    with pytest.raises(TaskError, match="model_options.backbon: unknown key .*known keys: backbone, weights"):
        get_task("classification", {"backbon": "resnet50"})
    with pytest.raises(TaskError, match="unknown task 'segmentation'; expected one of classification, detection"):
        get_task("segmentation")


def test_a_task_must_implement_every_abstract_method():
    class Half(Task):
        name = "half"
        run_defaults = RunDefaults(data="x", limit=0, epochs=1, served_model_name="half", model="m")

    with pytest.raises(TypeError, match="abstract"):
        Half()


def test_a_bad_task_module_is_named(monkeypatch):
    monkeypatch.setenv(EXTENSIONS_ENV, "tests.no_such_task_module")
    with pytest.raises(TaskError, match="LTP_EXTENSIONS: cannot import extension module 'tests.no_such_task_module'"):
        task_types()


# Task knowledge lives in trainer/tasks/<task>/ and in the renderers: no step, pipeline or other
# library module tests a task's name or sniffs its outputs.
_SNIFFS = re.compile(r'[!=]= "(classification|detection)"|"probabilities" (not )?in')
_STEPS = ["components", "pipelines"]


def test_nothing_outside_the_tasks_tests_a_task_s_name_or_sniffs_its_outputs():
    paths = [p for s in _STEPS for p in ((ROOT / s).rglob("*.py") if (ROOT / s).is_dir() else [ROOT / s])]
    paths += [p for p in (ROOT / "trainer").rglob("*.py") if "tasks" not in p.relative_to(ROOT).parts]
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in paths for m in _SNIFFS.finditer(p.read_text())]
    assert len(paths) > 20 and found == []


def test_a_subprocess_sees_an_extra_task_only_when_the_registry_is_looked_up():
    code = (
        "import sys\n"
        "import trainer.config, trainer.tasks\n"
        "assert 'tests.toy_task' not in sys.modules  # importing is not looking up\n"
        "from trainer.tasks import get_task, task_names\n"
        "print(task_names(), get_task('brightness', {'exact_start': False}).options.exact_start)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), EXTENSIONS_ENV: "tests.toy_task"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['brightness',", "'classification',", "'detection']", "False"]
