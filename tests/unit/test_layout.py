"""The layout's rules (docs/ARCHITECTURE.md), kept true by tests.

- A step is a folder under components/ with a component.py; no step folder imports another step
  folder (shared packages such as components.serving, components.kube, components.images are fine).
- Every step runs from the command line: ``python -m components.<step> --help`` exits 0, and
  without importing TensorFlow (a command line's help must be instant).

The "no TensorFlow at compile time" rule is kept by tests/pipelines.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPONENTS = ROOT / "components"


def step_folders() -> list[str]:
    """The steps: folders under components/ that hold a component.py."""
    return sorted(p.parent.name for p in COMPONENTS.glob("*/component.py"))


def imported_modules(path: Path) -> set[str]:
    """Every module a Python file imports (absolute names; relative imports resolved to components.<step>)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ["components", *path.relative_to(COMPONENTS).parts[:-1]]  # the module's package
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # from . import x / from ..other import y
                base = package[: len(package) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
                names.add(module)
                names.update(f"{module}.{alias.name}" for alias in node.names)
            elif node.module:
                names.add(node.module)
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def cross_step_imports() -> list[str]:
    """``step -> other (file)`` for every import of another step folder by a step's module."""
    steps = set(step_folders())
    found = []
    for step in sorted(steps):
        for path in sorted((COMPONENTS / step).rglob("*.py")):
            for name in imported_modules(path):
                parts = name.split(".")
                if len(parts) >= 2 and parts[0] == "components" and parts[1] in steps and parts[1] != step:
                    found.append(f"{step} -> {parts[1]} ({path.relative_to(ROOT)}: {name})")
    return sorted(set(found))


def test_the_steps_are_found():
    # the steps of the first wave; a new step only adds to these
    assert {"benchmark", "convert", "evaluate", "promote", "train"} <= set(step_folders())
    assert "serving" not in step_folders()  # a shared package, not a step


def test_no_step_folder_imports_another_step_folder():
    assert cross_step_imports() == []


def test_the_check_sees_a_cross_step_import(tmp_path, monkeypatch):
    # the guard itself can fail: a step importing another (absolute and relative) is reported
    fake = tmp_path / "components"
    for step in ("alpha", "beta"):
        (fake / step).mkdir(parents=True)
        (fake / step / "component.py").write_text("")
    (fake / "shared").mkdir()
    (fake / "alpha" / "logic.py").write_text(
        "import components.shared\nfrom components.beta import component\nfrom ..beta.component import x\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "COMPONENTS", fake)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert cross_step_imports() == [
        "alpha -> beta (components/alpha/logic.py: components.beta)",
        "alpha -> beta (components/alpha/logic.py: components.beta.component)",
        "alpha -> beta (components/alpha/logic.py: components.beta.component.x)",
    ]


@pytest.mark.parametrize("step", step_folders())
def test_every_step_has_a_command_line_whose_help_is_instant(step):
    assert (COMPONENTS / step / "__main__.py").is_file(), f"components/{step} has no __main__.py (a CLI)"
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['python -m components.{step}', '--help']\n"
        "try:\n"
        f"    runpy.run_module('components.{step}', run_name='__main__', alter_sys=True)\n"
        "except SystemExit as exit:\n"
        "    assert exit.code in (0, None), exit.code\n"
        "else:\n"
        "    raise AssertionError('--help did not exit')\n"
        "heavy = sorted(m for m in ('tensorflow', 'keras', 'kfp') if m in sys.modules)\n"
        "assert not heavy, f'--help imported {heavy}'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage: python -m components." in done.stdout
