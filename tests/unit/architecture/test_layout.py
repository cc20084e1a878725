"""The layout's rules (docs/ARCHITECTURE.md), kept true by tests.

- A step is a folder under components/ with a component.py; no step folder imports another step
  folder (shared packages such as components.serving, components.kube, components.images are fine).
- Every step runs from the command line: ``python -m components.<step> --help`` exits 0, and
  without importing TensorFlow (a command line's help must be instant).
- No import cycle among trainer/'s modules, counting imports inside functions too (a lazy import
  hides a cycle; it does not remove it). Imports under ``if TYPE_CHECKING:`` never run and do not count.

The "no TensorFlow at compile time" rule is kept by tests/pipelines.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
COMPONENTS = ROOT / "components"
TRAINER = ROOT / "trainer"


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


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST):
    """Every node of a module except those under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and getattr(child.test, "id", getattr(child.test, "attr", "")) == (
                "TYPE_CHECKING"
            ):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (at any level: module, class or function body)."""
    paths = {_module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        is_package = path.name == "__init__.py"
        base = name.split(".") if is_package else name.split(".")[:-1]
        targets = set()
        for node in _runtime_nodes(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:
                    module = ".".join([*base[: len(base) - (node.level - 1)], *([module] if module else [])])
                for alias in node.names:
                    full = f"{module}.{alias.name}"
                    targets.add(full if full in paths else module)
        graph[name] = {t for t in targets if t in paths and t != name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of an import graph, one per strongly connected component (``[a, b, ..., a]``)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append([*sorted(component), sorted(component)[0]])

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


def test_no_import_cycle_in_trainer():
    graph = import_graph(TRAINER)
    assert "trainer.tasks.classification.model" in graph  # the check sees the task packages
    assert import_cycles(graph) == []


def test_no_import_cycle_in_components():
    graph = import_graph(COMPONENTS)
    assert {"components.evaluate.renderers", "components.serving.targets.base"} <= set(graph)
    assert "components.evaluate.renderers" in graph["components.evaluate.renderers.detection"]
    assert import_cycles(graph) == []


def test_the_cycle_check_sees_a_cycle_through_a_function_level_import(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import c\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    (pkg / "d.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n")
    graph = import_graph(pkg)
    assert graph["pkg.sub.b"] == {"pkg.c"} and graph["pkg.d"] == set()
    assert import_cycles(graph) == [["pkg.a", "pkg.c", "pkg.sub.b", "pkg.a"]]


def test_every_module_the_suite_runs_first_exists():
    # A renamed module would silently fall out of the order that balances make test's workers.
    from tests.conftest import SLOWEST_FIRST

    assert [path for path in SLOWEST_FIRST if not (ROOT / path).is_file()] == []
