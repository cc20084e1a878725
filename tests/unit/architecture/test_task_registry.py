"""The task registry: configured tasks with typed options, their tables, and their renderers."""

import ast
import json
import os
import subprocess
import sys
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Optional

import pytest

import trainer.tasks
from components.evaluate.renderers import renderers_of
from trainer.extensions import EXTENSIONS_ENV
from trainer.tasks import RunDefaults, Task, TaskError, get_task, task_names, task_types

ROOT = Path(__file__).resolve().parents[3]


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


# Task knowledge lives in trainer/tasks/<task>/ and in that task's renderers module
# (components/evaluate/renderers/<task>.py): no other module of components/, pipelines/ or trainer/
# imports a task's package (trainer.tasks and trainer.tasks.base are the seam, open to all) or
# compares a value with a task's name. The registries name their built-in modules as strings,
# which is not an import.
LAYERS = ("components", "pipelines", "trainer")


def task_packages(root: Path = ROOT) -> set[str]:
    """The task packages on disk: trainer/tasks/<task>/__init__.py."""
    return {p.parent.name for p in (root / "trainer" / "tasks").glob("*/__init__.py")}


def _own_task(path: str, tasks: Collection[str]) -> Optional[str]:
    """The task whose own place ``path`` (relative, with /) is, or None."""
    parts = path.split("/")
    if parts[:2] == ["trainer", "tasks"] and len(parts) > 3 and parts[2] in tasks:
        return parts[2]
    if parts[:3] == ["components", "evaluate", "renderers"] and len(parts) == 4 and parts[3][:-3] in tasks:
        return parts[3][:-3]
    return None


def _imported(tree: ast.AST, path: str) -> list[str]:
    """Every module (and ``module.name``) an import statement anywhere in the module names, absolute."""
    package = path[:-3].split("/")[:-1]  # a module's package; for __init__.py, the package itself
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names += [module, *(f"{module}.{alias.name}" for alias in node.names)]
    return names


def _task_names_compared(tree: ast.AST, tasks: Collection[str]) -> list[str]:
    """The task names a comparison tests a value against (``== "detection"``, ``in ("classification", ...)``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                values = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
                found += [v.value for v in values if isinstance(v, ast.Constant) and v.value in tasks]
    return found


def task_knowledge_outside_the_tasks(sources: Mapping[str, str], tasks: Collection[str]) -> list[str]:
    """``path: what`` for each import of a task's package and each comparison with a task's name outside its places.

    Args:
        sources: relative path (with /) -> the module's source.
        tasks: the task packages' names.
    """
    found = []
    for path, source in sorted(sources.items()):
        tree, own = ast.parse(source, filename=path), _own_task(path, tasks)
        for name in _imported(tree, path):
            parts = name.split(".")
            if parts[:2] == ["trainer", "tasks"] and len(parts) > 2 and parts[2] in tasks and parts[2] != own:
                found.append(f"{path}: imports {'.'.join(parts[:3])}")
        found += [f"{path}: compares with task name {n!r}" for n in _task_names_compared(tree, tasks) if n != own]
    return sorted(set(found))


def _layer_sources() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for layer in LAYERS for p in sorted((ROOT / layer).rglob("*.py"))}


def test_nothing_outside_a_task_s_places_imports_its_package_or_tests_its_name():
    sources = _layer_sources()
    assert len(sources) > 100 and {"classification", "detection"} <= task_packages()
    assert task_knowledge_outside_the_tasks(sources, task_packages()) == []


def test_the_task_knowledge_check_reports_what_is_planted():
    planted = {
        "components/step/run.py": (
            "from trainer.tasks.detection.fit import read_box_sample\n"
            "import trainer.tasks.classification.model\n"
            "def f(task):\n"
            "    from trainer.tasks import detection, get_task\n"
            "    return task.name == 'classification' or task.name in ('detection', 'other')\n"
        ),
        "components/evaluate/renderers/detection.py": (
            "from trainer.tasks.detection.evaluation import METRICS\nfrom trainer.tasks.classification import fit\n"
        ),
        "trainer/tasks/detection/fit.py": "from . import input\nfrom trainer.tasks.detection import model\n",
        "trainer/tasks/__init__.py": "BUILTIN = ('trainer.tasks.classification', 'trainer.tasks.detection')\n",
        "pipelines/flow.py": "import trainer.tasks.base\nfrom trainer.tasks import TaskError, base\n",
        "trainer/tasks/classification/x.py": "from ..detection import fit\n",
    }
    assert task_knowledge_outside_the_tasks(planted, {"classification", "detection"}) == [
        "components/evaluate/renderers/detection.py: imports trainer.tasks.classification",
        "components/step/run.py: compares with task name 'classification'",
        "components/step/run.py: compares with task name 'detection'",
        "components/step/run.py: imports trainer.tasks.classification",
        "components/step/run.py: imports trainer.tasks.detection",
        "trainer/tasks/classification/x.py: imports trainer.tasks.detection",
    ]


# A task's model and built-in data are the task's to name (its run_defaults, its model builders):
# the pipelines and their tools (pipelines/, pipelines/tools/) take them from the task
# (``get_task(TASK).run_defaults``, as pipelines/flow.py, sweep.py and search.py do), so a default, a
# comparison or a flag's value never spells them. A pipeline module names at most its task (``TASK``);
# docstrings are prose, not defaults.
GENERIC_MODEL = "auto"  # TrainConfig.model's "the task chooses": no task's name


def _declared_models(path: Path) -> set[str]:
    """The model builders a task's model.py names: the keys of its ``MODELS``, its ``MODEL_NAME``."""
    names = set()
    for node in ast.parse(path.read_text()).body if path.is_file() else []:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if not isinstance(target, ast.Name):
            continue
        if target.id == "MODELS" and isinstance(value, ast.Dict):
            names |= {k.value for k in value.keys if isinstance(k, ast.Constant)}
        elif target.id == "MODEL_NAME" and isinstance(value, ast.Constant):
            names.add(value.value)
    return names


def task_owned_names(root: Path = ROOT) -> dict[str, str]:
    """Each built-in task's model and data names -> whose and what: its run defaults' data and grid
    data (the built-in kind, before a ``:``) and model, and the model builders its model.py names.
    """
    owned = {}
    for name in sorted(task_packages(root)):
        defaults = get_task(name).run_defaults
        owned.update({data.split(":")[0]: f"{name}'s data" for data in (defaults.data, defaults.grid_data) if data})
        models = {defaults.model, *_declared_models(root / "trainer" / "tasks" / name / "model.py")}
        owned.update({model: f"{name}'s model" for model in models - {GENERIC_MODEL}})
    return owned


def _docstrings(tree: ast.AST) -> set[int]:
    bodies = [n.body for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))]
    return {id(b[0].value) for b in bodies if b and isinstance(b[0], ast.Expr) and isinstance(b[0].value, ast.Constant)}


def task_names_hard_coded(sources: Mapping[str, str], owned: Mapping[str, str]) -> list[str]:
    """``path:line: ...`` for each text in pipelines/ that is a task's model or data name (``shapes:400`` too).

    Args:
        sources: relative path (with /) -> the module's source.
        owned: a task's model or data name -> whose and what (:func:`task_owned_names`).
    """
    found = []
    for path, source in sources.items():
        if not path.startswith("pipelines/"):
            continue
        tree = ast.parse(source, filename=path)
        prose = _docstrings(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)) or id(node) in prose:
                continue
            whose = owned.get(node.value) or owned.get(node.value.split(":")[0])
            if whose:
                found.append((path, node.lineno, node.col_offset, f"{node.value!r} is {whose}"))
    return [f"{path}:{line}: {what}; take it from the task's run_defaults" for path, line, _, what in sorted(found)]


def test_the_task_owned_names_are_found():
    owned = task_owned_names()
    assert {"retinanet", "mnist_cnn", "transfer_classifier"} <= {n for n, w in owned.items() if w.endswith("model")}
    assert {"fashion-mnist", "shapes"} <= {n for n, w in owned.items() if w.endswith("data")}
    assert GENERIC_MODEL not in owned


def test_no_pipeline_or_tool_spells_a_task_s_model_or_data():
    assert task_names_hard_coded(_layer_sources(), task_owned_names()) == []


@pytest.mark.parametrize("name", ["classification", "detection"])
def test_the_sweep_and_search_forms_are_a_task_s_run_defaults(name):
    import inspect

    from pipelines import search, sweep

    defaults = get_task(name).run_defaults
    for module in (sweep, search):
        form = inspect.signature(module.build(task=name).pipeline_func).parameters
        assert (form["source"].default, form["model"].default) == (defaults.data, defaults.model), module.NAME
    ranked = inspect.signature(search.build(task=name).pipeline_func).parameters["search"].default["metric"]
    assert ranked == get_task(name).headline_metric


def test_the_hard_coded_name_check_reports_what_is_planted():
    owned = {
        "shapes": "detection's data",
        "retinanet": "detection's model",
        "fashion-mnist": "classification's data",
        "mnist_cnn": "classification's model",
    }
    planted = {
        "pipelines/sweep.py": (
            '"""The grid on shapes with retinanet."""\n'
            "def pipeline(source: str = 'shapes', model: str = 'retinanet', limit: int = 0):\n"
            '    """retinanet"""\n'
        ),
        "pipelines/tools/run_sweep.py": (
            "LOCAL = {'source': 'shapes:400', 'models': ['auto', 'mnist_cnn']}\n"
            "if args.model != 'retinanet':\n"
            "    print('the fashion-mnist default')\n"
        ),
        "pipelines/end_to_end.py": "TASK = 'classification'\nsource = get_task(TASK).run_defaults.data\n",
        "components/sweep/grid.py": "MODEL = 'mnist_cnn'\n",  # outside the rule's reach: a component's literal
    }
    assert task_names_hard_coded(planted, owned) == [
        "pipelines/sweep.py:2: 'shapes' is detection's data; take it from the task's run_defaults",
        "pipelines/sweep.py:2: 'retinanet' is detection's model; take it from the task's run_defaults",
        "pipelines/tools/run_sweep.py:1: 'shapes:400' is detection's data; take it from the task's run_defaults",
        "pipelines/tools/run_sweep.py:1: 'mnist_cnn' is classification's model; take it from the task's run_defaults",
        "pipelines/tools/run_sweep.py:2: 'retinanet' is detection's model; take it from the task's run_defaults",
    ]


def _step(run_dir: Path, step: str, artifacts: Mapping[str, Mapping], parameters: Optional[dict] = None) -> None:
    (run_dir / step).mkdir(parents=True)
    data = {"artifacts": {k: {"artifacts": [{"metadata": dict(v)}]} for k, v in artifacts.items()}}
    (run_dir / step / "executor_output.json").write_text(json.dumps({**data, "parameterValues": parameters or {}}))


def test_the_run_s_console_lines_ask_the_task_the_records_name(tmp_path):
    from pipelines.tools.run_local import headline

    # metrics of several tasks' names side by side: only the named task's are read
    train = {"images_per_sec": 80.0, "val_box_loss": 0.1312, "val_accuracy": 0.5}
    _step(tmp_path, "train-model", {"model": {"task": "detection", "model": "retinanet"}, "metrics": train})
    assert headline(tmp_path, "train-model") == "80 training images/s, final validation box loss 0.1312"
    metrics, reasons = {"ap50": 0.187, "accuracy": 0.9}, ["blessed: every threshold passed"]
    _step(tmp_path, "evaluate-model", {"metrics": metrics, "blessing": {"task": "detection", "reasons": reasons}})
    assert headline(tmp_path, "evaluate-model", "classification") == "AP@0.5 0.1870, blessed: every threshold passed"
    # records that name no task (an earlier version's): the run's task, never a guess from the names
    _step(tmp_path / "old", "evaluate-model", {"metrics": metrics, "blessing": {"reasons": reasons}})
    assert headline(tmp_path / "old", "evaluate-model", "classification").startswith("accuracy 0.9000, ")
    assert headline(tmp_path / "old", "evaluate-model") == "blessed: every threshold passed"


@pytest.mark.parametrize("name", task_names())
def test_every_task_s_training_figures_are_its_own(name):
    task = get_task(name)
    figures = {m.name for m in task.training_metrics}
    assert set(task.summary_metrics([{"epoch": 1}])) <= figures  # a summary names only its declared figures
    assert task.training_headline({}) == ("", None)
    if figures:
        first = task.training_metrics[0]
        assert task.training_headline({m: 0.25 for m in figures}) == (first.title, 0.25)


def test_a_task_s_own_renderers_module_is_a_built_in_of_the_renderers_registry():
    for name in task_packages():
        assert (ROOT / "components" / "evaluate" / "renderers" / f"{name}.py").is_file(), name
        assert renderers_of(name).sample is not None and renderers_of(name).sections is not None


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


def test_make_run_finds_each_task_s_pipeline_and_an_extension_task_gets_the_flow_with_its_form():
    code = (
        "import inspect\n"
        "from pipelines.tools.run_local import task_pipeline\n"
        "names = task_pipeline('classification').NAME, task_pipeline('detection').NAME\n"
        "assert names == ('end-to-end', 'detection'), names\n"
        "toy = task_pipeline('brightness')\n"
        "form = inspect.signature(toy.pipeline.pipeline_func).parameters\n"
        "print(toy.NAME, form['model'].default, form['served_model_name'].default, form['source'].default)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), EXTENSIONS_ENV: "tests.toy_task"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["brightness", "tiny", "brightness", "brightness:200"]
