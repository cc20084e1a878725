"""The shape of the code, kept true by tests: short functions, modules of one job (under a size
ceiling), one name for a step's logic, a repository that explains itself (no references to files
outside it or to an issue tracker).

Each check runs over the project's own files and has a test showing it can fail.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("components", "pipelines", "trainer")
MAX_BODY_LINES = 60
# A module over this many lines holds several jobs: split it along them (docs/ARCHITECTURE.md).
MAX_MODULE_LINES = 800
# A citation of a design note outside this repository, or of an issue by its number.
OUTSIDE = re.compile(r"DESIGN\.md|\.\./shared|\b[Ii]ssues? #?\d+\b")


def _sources(root: Path = ROOT) -> list[Path]:
    return sorted(p for package in PACKAGES for p in (root / package).rglob("*.py"))


def long_functions(paths: list[Path], root: Path = ROOT, limit: int = MAX_BODY_LINES) -> list[str]:
    """``file:function (n lines)`` for every function whose body, docstring excluded, is over ``limit``."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                body = body[1:]
            if body:
                lines = body[-1].end_lineno - body[0].lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root)}:{node.name} ({lines} lines)")
    return found


def outside_references(paths: list[Path]) -> list[str]:
    """``file:line`` for every line citing a design file outside the repository or an issue number."""
    return [
        f"{path}:{number}: {line.strip()}"
        for path in paths
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if OUTSIDE.search(line)
    ]


def test_no_function_is_over_sixty_lines():
    assert long_functions(_sources()) == []


def test_the_length_check_can_fail(tmp_path):
    long = tmp_path / "pkg" / "long.py"
    long.parent.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    long.write_text(f'def short():\n    """Doc."""\n    return 1\n\n\ndef long():\n    """Doc."""\n{body}\n')
    assert long_functions([long], tmp_path) == ["pkg/long.py:long (61 lines)"]


def long_modules(paths: list[Path], root: Path = ROOT, limit: int = MAX_MODULE_LINES) -> list[str]:
    """``file (n lines)`` for every module over ``limit`` lines."""
    counts = ((path, len(path.read_text().splitlines())) for path in paths)
    return [f"{path.relative_to(root)} ({n} lines)" for path, n in counts if n > limit]


def test_no_module_is_over_eight_hundred_lines():
    assert long_modules(_sources()) == []


def test_the_module_size_check_can_fail(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "big.py").write_text("\n".join(f"x{i} = {i}" for i in range(801)) + "\n")
    (package / "fits.py").write_text("\n".join(f"x{i} = {i}" for i in range(800)) + "\n")
    assert long_modules(sorted(package.glob("*.py")), tmp_path) == ["pkg/big.py (801 lines)"]


def test_every_step_keeps_its_logic_in_run_py():
    steps = sorted(p.parent for p in (ROOT / "components").glob("*/component.py"))
    assert steps and [s.name for s in steps if not (s / "run.py").is_file()] == []


def test_the_repository_cites_nothing_outside_itself():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    tests = sorted(p for p in (ROOT / "tests").rglob("*.py") if p != Path(__file__).resolve())
    assert outside_references([*_sources(), *docs, *tests, ROOT / "Makefile"]) == []


def test_the_citation_check_can_fail(tmp_path):
    text = tmp_path / "t.md"
    design = "DESIGN" + ".md"  # spelled apart, so that this file cites nothing itself
    text.write_text(
        f"fine\nas {design} section 3 says\nsee issue 12\nIssue #45 again\nkeras-team/keras#19246 is fine\n"
    )
    assert [line.split(": ", 1)[0] for line in outside_references([text])] == [f"{text}:2", f"{text}:3", f"{text}:4"]


def upward_imports(paths: list[Path], forbidden: tuple[str, ...] = ("components", "pipelines", "kfp")) -> list[str]:
    """``file: module`` for every import of a layer above the library (function-level ones too)."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            found += [f"{path.name}: {name}" for name in names if name.split(".")[0] in forbidden]
    return found


def test_the_library_imports_neither_the_steps_nor_the_pipelines_nor_kfp():
    assert upward_imports(sorted((ROOT / "trainer").rglob("*.py"))) == []


def test_the_import_direction_check_can_fail(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("import os\n\n\ndef f():\n    from components.serving import targets\n    import kfp.dsl\n")
    assert upward_imports([module]) == ["m.py: components.serving", "m.py: kfp.dsl"]


# The run form's budget texts are read once, into TrainConfig.limits; other files read that value.
BUDGET_PARSERS = re.compile(r"\b(parse_time_budget|parse_cost_budget|parse_patience|parse_stop_at|parse_stop_step)\(")
# A search file's own budgets (its rungs, its objective, its spend cap) are read by its spec.
BUDGET_READERS = ("trainer/budget/limits.py", "components/sweep/search/space.py")


def budget_parses(paths: list[Path], root: Path = ROOT) -> list[str]:
    """``file:line`` for every call of a budget text's parser outside the modules that read budgets."""
    return [
        f"{path.relative_to(root)}:{number}"
        for path in paths
        if str(path.relative_to(root)) not in BUDGET_READERS
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if BUDGET_PARSERS.search(line)
    ]


def test_budget_texts_are_parsed_only_where_budgets_are_read():
    assert budget_parses(_sources()) == []


def test_the_budget_parse_check_can_fail(tmp_path):
    module = tmp_path / "pkg" / "m.py"
    module.parent.mkdir()
    module.write_text("def f(c):\n    return parse_time_budget(c.time_budget)\n")
    assert budget_parses([module], tmp_path) == ["pkg/m.py:2"]
