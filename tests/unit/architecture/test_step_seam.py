"""A step is its folder and its surface declaration (components/surface.py), proven from outside the tree.

A probe step is planted in a temporary folder added to the ``components`` package's path: its
``component.py`` (a KFP component over ``EvaluateConfig``'s ``batch_size``) and its ``surface.py``.
With nothing else changed, the surface test's check accepts its parameters, a run's parameter
check builds its config (a bad value fails before anything runs) and ``make run``'s console asks
it for its line.
"""

import json
import sys
import textwrap

import pytest

import components
from components.surface import step_folders, surface_of, surfaces
from pipelines.tools import params, run_local
from tests.unit.architecture.test_parameter_surfaces import component_disagreements

COMPONENT = textwrap.dedent(
    """
    from kfp import dsl


    @dsl.component(base_image="python:3.11")
    def probe_step(batch_size: int = 256, note: str = "") -> int:
        return batch_size
    """
)
SURFACE = textwrap.dedent(
    """
    from components.probe.component import probe_step
    from components.surface import StepOutputs, Surface
    from trainer.config import EvaluateConfig


    def headline(out: StepOutputs) -> str:
        return f"probe scored {out.parameters['Output']} in batches"


    SURFACES = (Surface(probe_step, EvaluateConfig, step_only=frozenset({"note"}), headline=headline),)
    """
)


@pytest.fixture
def probe_step(tmp_path, monkeypatch):
    folder = tmp_path / "probe"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "component.py").write_text(COMPONENT)
    (folder / "surface.py").write_text(SURFACE)
    monkeypatch.setattr(components, "__path__", [*components.__path__, str(tmp_path)])
    yield surfaces()["probe-step"]
    for name in [m for m in sys.modules if m.startswith("components.probe")]:
        del sys.modules[name]


def test_a_planted_step_is_found_and_checked_through_its_declaration(probe_step, tmp_path):
    from kfp import dsl

    assert "probe" in step_folders()
    assert component_disagreements(probe_step.func, probe_step) == []

    @dsl.pipeline(name="probe")
    def pipeline(batch: int = 256):
        probe_step.component(batch_size=batch)

    params.check_steps(pipeline, {"batch": 64})
    with pytest.raises(params.ParameterError, match="batch: must be >= 1, got 0"):
        params.check_steps(pipeline, {"batch": 0})

    (tmp_path / "run" / "probe-step-2").mkdir(parents=True)
    (tmp_path / "run" / "probe-step-2" / "executor_output.json").write_text(
        json.dumps({"parameterValues": {"Output": 64}})
    )
    assert surface_of("probe-step-2") is probe_step
    assert run_local.headline(tmp_path / "run", "probe-step-2") == "probe scored 64 in batches"


def test_every_component_of_a_step_is_declared():
    import importlib

    from kfp.dsl.python_component import PythonComponent

    declared = set(surfaces())
    for step in step_folders():
        module = importlib.import_module(f"components.{step}.component")
        made = {c.name for c in vars(module).values() if isinstance(c, PythonComponent)}
        assert made <= declared, f"components/{step}/surface.py does not declare {sorted(made - declared)}"


def test_a_step_whose_component_is_not_declared_is_caught(probe_step, tmp_path):
    (tmp_path / "probe" / "component.py").write_text(
        COMPONENT + "\n\n@dsl.component(base_image='python:3.11')\ndef forgotten() -> int:\n    return 1\n"
    )
    sys.modules.pop("components.probe.component", None)
    with pytest.raises(AssertionError, match=r"does not declare \['forgotten'\]"):
        test_every_component_of_a_step_is_declared()


def step_names_outside_surfaces(paths, names) -> list[str]:
    """``file:line: name`` for every string literal that is a component's compiled name (``train-model``)
    outside the steps' surface declarations: the rest of the project asks a surface (or the
    component's ``.name``) which components do what, rather than spelling their names.

    A step's ``__main__.py`` is left out: its subcommands are the command line's words.
    """
    import ast

    found = []
    for path in paths:
        if path.name in ("surface.py", "__main__.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                found.append(f"{path}:{node.lineno}: {node.value}")
    return found


def _project_sources():
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    return sorted(p for package in ("components", "pipelines", "trainer") for p in (root / package).rglob("*.py"))


def test_no_step_name_is_spelled_outside_its_surface():
    assert step_names_outside_surfaces(_project_sources(), set(surfaces())) == []


def test_the_step_name_check_can_fail(tmp_path):
    planted = tmp_path / "platform.py"
    planted.write_text('LONG_STEPS = frozenset({"train-model", "run-notebook"})\nOTHER = "train-a-model"\n')
    assert step_names_outside_surfaces([planted], set(surfaces())) == [
        f"{planted}:1: train-model",
        f"{planted}:1: run-notebook",
    ]
