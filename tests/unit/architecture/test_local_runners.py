"""The local runners (``make sweep``, ``make search``, ``make predict``, ``make select``) on one skeleton,
``pipelines/tools/runner.py``, and what each says at its end.

- The skeleton's rule: in ``pipelines/tools/``, only ``runner.py`` runs a pipeline under kfp.local
  (``local.init``, the quiet console, ``run_in_console``); every ``run_*.py`` module goes through
  it. A test plants a runner that calls kfp.local itself, and one that calls ``run_in_console``,
  and shows the rule catches both.
- Each tool's last lines from a finished run folder (no pipeline runs): ``make search`` says where
  its results page is; a failed run's lines add no error of their own (the failure said it).
- ``make predict`` and ``make select`` refuse a local ``DATA`` that is not there, one line, before anything starts.
"""

import ast
import io
import json
import time
from pathlib import Path

import pytest

from pipelines.tools import run_predict, run_search, run_select, run_sweep
from pipelines.tools.runner import Finished, Summary

ROOT = Path(__file__).resolve().parents[3]
TOOLS = ROOT / "pipelines" / "tools"
SKELETON = "runner.py"
# What runs a pipeline under kfp.local behind the console: only the skeleton may name these.
ENGINE_NAMES = {"run_in_console", "_run_quietly", "QuietConsole"}


def _kfp_local_calls(tree: ast.AST) -> list[str]:
    """``local.init(...)`` and ``kfp.local.init(...)`` calls, and imports of ``init`` from kfp.local."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "kfp.local":
            found += [f"from kfp.local import {a.name}" for a in node.names if a.name == "init"]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "init":
            owner = ast.unparse(node.func.value)
            if owner in ("local", "kfp.local"):
                found.append(f"{owner}.init(...)")
    return found


def skeleton_violations(folder: Path) -> list[str]:
    """``file: what`` for each module of ``folder`` that runs a pipeline without the skeleton."""
    found = []
    for path in sorted(folder.glob("*.py")):
        if path.name == SKELETON:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        found += [f"{path.name}: {call}: a local run goes through {SKELETON}" for call in _kfp_local_calls(tree)]
        imported = [(n.module, a) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names]
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        names |= {alias.asname or alias.name for _, alias in imported}
        engine = sorted(names & ENGINE_NAMES) if path.name != "console.py" else []  # the console defines its own
        found += [f"{path.name}: {name}: a local run goes through {SKELETON}" for name in engine]
        modules = {module for module, _ in imported} | {f"{module}.{alias.name}" for module, alias in imported}
        if path.name.startswith("run_") and "pipelines.tools.runner" not in modules:
            found.append(f"{path.name}: a runner module that does not use {SKELETON}")
    return found


def test_every_local_runner_runs_its_pipeline_through_the_skeleton():
    assert skeleton_violations(TOOLS) == []


PLANTED_KFP = """
from kfp import local

def main():
    local.init(runner=local.SubprocessRunner(), pipeline_root="out")
    pipeline()
"""
PLANTED_CONSOLE = """
from pipelines.tools.runner import run_in_console

def main():
    run_in_console(pipeline, "retrain", {}, root, out=None, tty=None, verbose=False)
"""
PLANTED_OWN = """
from pipelines.tools.console import QuietConsole

def main():
    console = QuietConsole(out, logs, {})
"""


def test_a_runner_that_runs_kfp_local_or_the_console_itself_is_caught(tmp_path):
    for name in ("runner.py", "console.py", "run_sweep.py"):  # as they are: no finding
        (tmp_path / name).write_text((TOOLS / name).read_text())
    assert skeleton_violations(tmp_path) == []
    (tmp_path / "run_retrain.py").write_text(PLANTED_KFP)
    (tmp_path / "run_schedule.py").write_text(PLANTED_CONSOLE)
    (tmp_path / "run_select.py").write_text(PLANTED_OWN)
    assert skeleton_violations(tmp_path) == [
        "run_retrain.py: local.init(...): a local run goes through runner.py",
        "run_retrain.py: a runner module that does not use runner.py",
        "run_schedule.py: run_in_console: a local run goes through runner.py",
        "run_select.py: QuietConsole: a local run goes through runner.py",
        "run_select.py: a runner module that does not use runner.py",
    ]


class _Console:
    log_dir = Path("/runs/x/logs")


def _finished(folder, failure=None, **kwargs):
    return Finished(_Console(), None, folder, failure, time.monotonic(), kwargs)


def _join(folder, task, output=None):
    (folder / task).mkdir(parents=True)
    (folder / task / "report").write_text("| trial | rung reached |\n|---|---|\n")
    (folder / task / "chart").write_text("<!doctype html><title>page</title>")
    values = {"parameterValues": {"Output": output}} if output is not None else {}
    (folder / task / "executor_output.json").write_text(json.dumps(values))


def test_make_search_ends_with_its_table_the_pick_and_where_its_results_page_is(tmp_path):
    folder = tmp_path / "search-2026"
    _join(folder, "join-search", {"folder": "/rows/search-1", "choice": {"key": "t3", "model_uri": "/m/t3"}})
    summary = run_search.last_lines(_finished(folder))
    assert summary.ok and summary.lines == [
        "| trial | rung reached |\n|---|---|",
        "the pick's settings: make run CONFIG=/rows/search-1/best.yaml",
        "the pick's model: /m/t3",
        f"results page: {folder / 'search.html'}",
    ]
    assert (folder / "search.html").read_text().startswith("<!doctype html>")  # a page a browser opens as one


def test_make_sweep_ends_with_its_table_and_its_page(tmp_path):
    folder = tmp_path / "sweep-2026"
    _join(folder, "join-training-grid")
    summary = run_sweep.last_lines(_finished(folder))
    assert summary.lines[-1] == f"results page: {folder / 'grid.html'}" and (folder / "grid.html").is_file()


def test_a_failed_run_s_last_lines_add_no_error_of_their_own(tmp_path):
    from components.report.run import Failure

    failure = Failure("Plan the shards", "PredictError: ...", "")
    for tool, kwargs in ((run_search, {}), (run_predict, {"output_uri": str(tmp_path / "out")})):
        assert tool.last_lines(_finished(tmp_path / "run", failure, **kwargs)) == Summary([], ok=False)
    lines = run_predict.last_lines(_finished(tmp_path / "run", None, output_uri=str(tmp_path / "out"))).lines
    assert lines == [f"error: no summary under {tmp_path / 'out'}: the run stopped before the join (see the logs)"]


def test_make_predict_refuses_a_local_data_that_is_not_there_before_anything_starts(tmp_path, capsys):
    root, out = tmp_path / "root", tmp_path / "out"
    argv = ["--stages", str(tmp_path / "stages"), "--output-uri", str(out), "--pipeline-root", str(root)]
    assert run_predict.main(["--data", "/nonexistent", "--stage", "staging", "--model", "nosuch", *argv]) == 2
    assert capsys.readouterr().err.splitlines() == ["error: DATA /nonexistent: no such file or folder on this machine"]
    assert run_predict.main(["--data", str(tmp_path), "--model-dir", str(tmp_path / "gone"), *argv]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"error: MODEL_DIR {tmp_path / 'gone'}: no such file or folder on this machine"]
    assert run_predict.main(["--data", str(tmp_path), "--set", "data=/nonexistent", *argv]) == 2
    assert capsys.readouterr().err.strip() == "error: data (SET) /nonexistent: no such file or folder on this machine"
    assert not root.exists() and not out.exists()


def test_make_select_refuses_what_is_not_there_and_ends_with_its_files(tmp_path, capsys):
    root, out = tmp_path / "root", tmp_path / "out"
    argv = ["--stages", str(tmp_path / "stages"), "--output-uri", str(out), "--pipeline-root", str(root)]
    assert (
        run_select.main(["--data", str(tmp_path), "--model-dir", str(tmp_path / "m"), "--dataset", "/gone", *argv]) == 2
    )
    assert capsys.readouterr().err.splitlines() == [
        f"error: MODEL_DIR {tmp_path / 'm'}: no such file or folder on this machine",
        "error: DATASET /gone: no such file or folder on this machine",
    ]
    assert run_select.main(["--data", "fashion-mnist", "--model-dir", str(tmp_path), "--count", "0", *argv]) == 2
    assert capsys.readouterr().err.strip() == "error: count: must be >= 1, got 0"
    assert not root.exists() and not out.exists()
    out.mkdir()
    picks = [{"rank": 1}, {"rank": 2}]
    files = {"label_studio": "label_studio.json", "cvat": "cvat_coco.zip"}
    (out / "selection.json").write_text(json.dumps({"picks": picks, "pool": 40, "strategy": "margin", "files": files}))
    summary = run_select.last_lines(_finished(tmp_path / "run", None, output_uri=str(out)))
    assert summary.ok and summary.lines == [
        f"picked: 2 of 40 images by margin: {out / 'selection.json'}",
        f"label studio: {out / 'label_studio.json'}",
        f"cvat: {out / 'cvat_coco.zip'}",
    ]


@pytest.mark.parametrize("tool", [run_sweep, run_search, run_predict, run_select])
def test_each_runner_keeps_its_own_flags_beside_the_common_ones(tool):
    help_text = io.StringIO()
    tool.TOOL.parser().print_help(help_text)
    for flag in ("--config", "--set", "--pipeline-root", "--verbose"):
        assert flag in help_text.getvalue()
    own = {run_sweep: "--grid", run_search: "--dry-run", run_predict: "--model-dir", run_select: "--dataset"}[tool]
    assert own in help_text.getvalue()
