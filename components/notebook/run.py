"""Runs a notebook as a step: parameters in; the executed notebook, its HTML page and its files out.

papermill executes the notebook in a child process (``components.notebook.runner``) whose kernel
is this step's own Python (a kernelspec pointing at ``sys.executable``, written to a private
``JUPYTER_PATH``), with the trainer's oneDNN setting. The step watches the child: it copies each
save of the executed notebook to the output URI while the run goes on (a failed task publishes no
artifacts on a cluster: the launcher uploads them only after success, so this copy is what
survives a failure), and kills
the child and its kernel at the whole-run deadline. A failing cell or a timeout raises
:class:`NotebookRunError` naming the cell, with its traceback and where the notebook was kept.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from components.notebook.config import NotebookConfig
from components.notebook.params import prepare
from components.notebook.render import network_references, render_html
from trainer import storage
from trainer.records import Record

log = logging.getLogger(__name__)

KERNEL_NAME = "lean-tpu-python"
# The trainer turns oneDNN on before TensorFlow loads (about 2x faster CPU training here); the
# kernel is a fresh process, so it gets the same setting through its environment.
ONEDNN_ENV = "TF_ENABLE_ONEDNN_OPTS"
FILES_DIR_ENV = "NOTEBOOK_FILES_DIR"
# Cells papermill adds to the executed notebook; they are not the user's cells.
_PAPERMILL_TAGS = ("injected-parameters", "papermill-error-cell-tag")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# After the kill at the deadline: how long to wait for the processes to be gone.
_KILL_WAIT_S = 10.0


class NotebookInputError(ValueError):
    """The notebook cannot be read (missing, not a notebook); nothing was run."""


class NotebookRunError(RuntimeError):
    """The notebook ran and failed: a cell raised, or a time limit was hit.

    Attributes:
        reason: ``cell_error``, ``cell_timeout``, ``timeout`` (the whole run) or ``kernel`` (the
            kernel or papermill died).
        cell: the failing (or running) cell's number among the notebook's own cells, 1-based,
            or None when no cell was running.
        kept: where the executed notebook up to that point was written.
    """

    def __init__(self, message: str, reason: str, cell: Optional[int], kept: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.cell = cell
        self.kept = kept


@dataclasses.dataclass(frozen=True)
class NotebookOutputs:
    """Where the step writes.

    Attributes:
        notebook: local path of the executed ``.ipynb``.
        html: local path of its HTML page.
        files: local folder for the files the notebook wrote under ``files_dir``.
        notebook_uri: where the executed notebook is copied while it runs and kept on a failure
            (a component's output artifact URI, gs:// on a cluster); None keeps it at ``notebook``.
        html_uri: where the HTML page is kept on a failure; None: at ``html``.
        files_uri: where the files are kept on a failure; None: at ``files``.
    """

    notebook: str
    html: str
    files: str
    notebook_uri: Optional[str] = None
    html_uri: Optional[str] = None
    files_uri: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class NotebookResult(Record):
    """A notebook that ran through; ``to_dict`` is the step's output.

    Attributes:
        notebook: the executed notebook's path.
        html: the HTML page's path.
        files: the files the notebook wrote under ``files_dir``, relative paths.
        cells: code cells executed (papermill's injected-parameters cell included).
        duration_s: wall time of the run, kernel start included.
        parameters: the parameters injected, after type restoration.
    """

    notebook: str
    html: str
    files: tuple[str, ...]
    cells: int
    duration_s: float
    parameters: dict[str, Any]


def write_kernelspec(jupyter_dir: Path, python: str = sys.executable, env: Mapping[str, str] | None = None) -> str:
    """Writes a kernelspec that runs ``python -m ipykernel_launcher`` under ``jupyter_dir/kernels``.

    Jupyter looks for kernels in ``$JUPYTER_PATH/kernels`` first; pointing ``JUPYTER_PATH`` at
    ``jupyter_dir`` makes this the kernel whatever else is installed.

    Returns:
        The kernel's name.
    """
    spec_dir = jupyter_dir / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python (lean-tpu-pipelines step)",
        "language": "python",
        "env": dict(env or {}),
        "metadata": {"debugger": False},
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec, indent=1))
    return KERNEL_NAME


def fetch_notebook(uri: str, folder: Path) -> Path:
    """The notebook as a local file: read from gs:// into ``folder``, or a local path as it is.

    Raises:
        NotebookInputError: there is no such file.
    """
    if storage.is_gcs(uri):
        try:
            data = storage.read_bytes(uri)
        except FileNotFoundError:
            raise NotebookInputError(f"notebook {uri} does not exist; upload it first (or use submit)") from None
        path = folder / Path(uri).name
        path.write_bytes(data)
        return path
    if "://" in uri:
        raise NotebookInputError(f"notebook {uri}: expected a gs:// URI or a local path")
    path = Path(uri)
    if not path.is_file():
        raise NotebookInputError(f"notebook {uri} does not exist (working directory {os.getcwd()})")
    return path.resolve()  # the kernel runs in a working directory of its own


def read_notebook(path: Path, what: str) -> Any:
    """Reads a notebook file as nbformat version 4.

    Raises:
        NotebookInputError: the file is not a readable notebook.
    """
    import nbformat

    try:
        return nbformat.read(path, as_version=4)
    except (ValueError, OSError) as err:  # nbformat's NotJSONError and validation errors are ValueErrors
        raise NotebookInputError(f"{what} is not a readable Jupyter notebook: {err}") from None


def _target(uri: Optional[str], path: str) -> str:
    """Where to keep an output: its URI when the storage layer reaches it, else the local path."""
    if uri is None:
        return path
    if "://" in uri and not storage.is_gcs(uri):
        log.warning("notebook: cannot write %s (trainer.storage reaches gs:// and local paths); kept at %s", uri, path)
        return path
    return uri


def _keep(uri: str, data: bytes) -> None:
    """Writes ``data`` whole to a local path or gs:// URI."""
    storage.write_bytes(uri, data)


def _user_cells(nb: Any) -> list[tuple[int, Any]]:
    """``(number, cell)`` for the notebook's own cells (papermill's additions skipped), 1-based."""
    own = [c for c in nb.cells if not set(c.get("metadata", {}).get("tags", [])) & set(_PAPERMILL_TAGS)]
    return list(enumerate(own, start=1))


def _cell_with(nb: Any, test) -> tuple[Optional[int], Any]:
    for number, cell in _user_cells(nb):
        if test(cell):
            return number, cell
    return None, None


def _has_error(cell: Any) -> bool:
    return cell.cell_type == "code" and any(o.get("output_type") == "error" for o in cell.get("outputs", []))


def _is_running(cell: Any) -> bool:
    return cell.get("metadata", {}).get("papermill", {}).get("status") == "running"


def _describe_cell(nb: Any, number: Optional[int], cell: Any) -> str:
    if cell is None:
        return "the kernel start (no cell had run yet)"
    total = len(_user_cells(nb))
    count = cell.get("execution_count")
    source = "\n".join(f"    {line}" for line in cell.source.splitlines()[:12])
    return f"cell {number} of {total}" + (f" (In [{count}])" if count else "") + f":\n{source}"


def _traceback(cell: Any) -> str:
    lines = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            lines.extend(_ANSI.sub("", "\n".join(out.get("traceback", []))).splitlines())
    return "\n".join(lines)


def _kill_tree(proc: subprocess.Popen) -> None:
    """Kills the papermill process and everything under it (the kernel runs in a session of its own)."""
    import psutil

    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    proc.kill()
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass  # already gone: nothing left to kill
    proc.wait(timeout=_KILL_WAIT_S)
    psutil.wait_procs(children, timeout=_KILL_WAIT_S)


class _Snapshots:
    """The last complete save of the executed notebook (papermill's writes are not atomic)."""

    def __init__(self, path: Path, target: str) -> None:
        self.path = path
        self.target = target
        self.data: Optional[bytes] = None
        self._mtime: Optional[float] = None

    def poll(self, copy: bool) -> None:
        """Reads a new save if there is one and, if ``copy``, writes it to the target."""
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            return
        if mtime == self._mtime:
            return
        data = self.path.read_bytes()
        try:
            json.loads(data)
        except ValueError:
            return  # caught mid-write; the next poll sees the finished file
        self._mtime, self.data = mtime, data
        if copy:
            _keep(self.target, data)


def _environment(jupyter_dir: Path, files_dir: Path) -> dict[str, str]:
    import trainer

    env = dict(os.environ)
    env["JUPYTER_PATH"] = os.pathsep.join(p for p in (str(jupyter_dir), env.get("JUPYTER_PATH")) if p)
    env.setdefault(ONEDNN_ENV, "1")
    env[FILES_DIR_ENV] = str(files_dir)
    env["PYTHONUNBUFFERED"] = "1"
    # The kernel imports the same project as this step, whatever its working directory.
    root = str(Path(trainer.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _supervise(proc: subprocess.Popen, snapshots: _Snapshots, deadline: float, sync_every_s: float) -> bool:
    """Waits for papermill, copying its saves every ``sync_every_s``; kills it at ``deadline``.

    Returns:
        Whether the deadline was hit.
    """
    next_sync = time.monotonic() + sync_every_s
    try:
        while True:
            try:
                proc.wait(timeout=min(1.0, max(0.05, deadline - time.monotonic())))
                return False
            except subprocess.TimeoutExpired:
                now = time.monotonic()
                if now >= deadline:
                    _kill_tree(proc)
                    return True
                if now >= next_sync:
                    snapshots.poll(copy=True)
                    next_sync = now + sync_every_s
    except BaseException:
        # Interrupted (Ctrl-C, a failed copy): leave no papermill or kernel running behind.
        if proc.poll() is None:
            _kill_tree(proc)
        raise


def run_notebook(config: NotebookConfig, outputs: NotebookOutputs) -> NotebookResult:
    """Executes ``config.notebook`` with its parameters and writes the notebook, its page and files.

    Args:
        config: the notebook, parameters and time limits.
        outputs: where to write (and, on a failure, keep) the results.

    Returns:
        What ran.

    Raises:
        NotebookInputError: the notebook is missing or unreadable.
        components.notebook.params.NotebookParameterError: a parameter the notebook does not declare.
        NotebookRunError: a cell failed or a time limit was hit; the executed notebook up to that
            point, its HTML page and the files so far are kept at the output URIs.
    """
    keep_notebook = _target(outputs.notebook_uri, outputs.notebook)
    with tempfile.TemporaryDirectory(prefix="notebook-") as tmp_name:
        tmp = Path(tmp_name)
        source = fetch_notebook(config.notebook, tmp)
        nb = read_notebook(source, f"notebook {config.notebook}")
        parameters = prepare(nb, dict(config.parameters), config.notebook)
        work = tmp / "work"
        files_dir = work / config.files_dir
        files_dir.mkdir(parents=True)
        env = _environment(tmp / "jupyter", files_dir)
        kernel = write_kernelspec(tmp / "jupyter", sys.executable, {ONEDNN_ENV: env[ONEDNN_ENV]})
        executed = tmp / "executed.ipynb"
        request = tmp / "run" / "request.json"
        request.parent.mkdir()
        request.write_text(
            json.dumps(
                {
                    "input": str(source),
                    "output": str(executed),
                    "parameters": parameters,
                    "kernel_name": kernel,
                    "cwd": str(work),
                    "cell_timeout_s": config.cell_timeout_s,
                    "autosave_s": max(1, int(config.sync_every_s)),
                }
            )
        )
        print(
            f"notebook: running {config.notebook} (cell timeout {config.cell_timeout_s} s, whole run "
            f"{config.timeout_s} s); the executed notebook is kept at {keep_notebook} while it runs",
            flush=True,
        )
        start = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "components.notebook.runner", str(request)], env=env, cwd=work)
        snapshots = _Snapshots(executed, keep_notebook)
        timed_out = _supervise(proc, snapshots, start + config.timeout_s, config.sync_every_s)
        duration = time.monotonic() - start
        snapshots.poll(copy=False)
        status_file = request.parent / "status.json"
        status = json.loads(status_file.read_text()) if status_file.is_file() else None
        ok = not timed_out and proc.returncode == 0 and status is not None and status["ok"]
        final = nb if snapshots.data is None else _nb_from_bytes(snapshots.data)
        data = snapshots.data if snapshots.data is not None else _nb_bytes(nb)
        html = render_html(final)
        remote = network_references(html)
        if remote:
            log.warning("notebook: its outputs load from the network (blocked in the Kubeflow UI): %s", remote)
        _write_local(outputs.notebook, data)
        _write_local(outputs.html, html.encode())
        Path(outputs.files).mkdir(parents=True, exist_ok=True)
        shutil.copytree(files_dir, outputs.files, dirs_exist_ok=True)
        files = tuple(sorted(p.relative_to(files_dir).as_posix() for p in files_dir.rglob("*") if p.is_file()))
        if ok:
            code_cells = sum(1 for c in final.cells if c.cell_type == "code")
            return NotebookResult(outputs.notebook, outputs.html, files, code_cells, duration, parameters)
        kept = _keep_failure(outputs, data, html.encode(), files_dir, files)
        raise _failure(config, final, status, timed_out, proc.returncode, duration, kept)


def _nb_from_bytes(data: bytes) -> Any:
    import nbformat

    return nbformat.reads(data.decode("utf-8"), as_version=4)


def _nb_bytes(nb: Any) -> bytes:
    import nbformat

    return nbformat.writes(nb).encode("utf-8")


def _write_local(path: str, data: bytes) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(data)


def _keep_failure(outputs: NotebookOutputs, notebook: bytes, html: bytes, files_dir: Path, files: tuple) -> str:
    """Writes what a failed run produced to the output URIs (a failed task's paths are not published)."""
    kept = []
    for uri, path, data, what in (
        (outputs.notebook_uri, outputs.notebook, notebook, "notebook"),
        (outputs.html_uri, outputs.html, html, "HTML page"),
    ):
        target = _target(uri, path)
        if target != path:
            _keep(target, data)
        kept.append(f"{what} {target}")
    if files:
        target = _target(outputs.files_uri, outputs.files)
        if target != outputs.files:
            storage.copy_tree(str(files_dir), target)
        kept.append(f"files {target}")
    return ", ".join(kept)


def _failure(
    config: NotebookConfig,
    nb: Any,
    status: Optional[dict],
    timed_out: bool,
    returncode: Optional[int],
    duration: float,
    kept: str,
) -> NotebookRunError:
    name = config.notebook
    if timed_out:
        number, cell = _cell_with(nb, _is_running)
        message = (
            f"notebook {name} ran past its whole-run timeout of {config.timeout_s} s (timeout_s) and was "
            f"stopped in {_describe_cell(nb, number, cell)}\nRaise timeout_s or make the notebook shorter "
            "(fewer epochs or steps through its parameters)."
        )
        reason = "timeout"
    elif status is not None and status["kind"] == "cell_timeout":
        number, cell = _cell_with(nb, _has_error)
        message = (
            f"notebook {name}: {_describe_cell(nb, number, cell)}\nran longer than the per-cell timeout of "
            f"{config.cell_timeout_s} s (cell_timeout_s) and was interrupted. Raise cell_timeout_s or split the cell."
        )
        reason = "cell_timeout"
    elif status is not None:
        number, cell = _cell_with(nb, _has_error)
        trace = _traceback(cell) if cell is not None else "\n".join(_ANSI.sub("", t) for t in status["traceback"])
        message = (
            f"notebook {name} failed in {_describe_cell(nb, number, cell)}\n"
            f"{status['ename']}: {status['evalue']}\nTraceback:\n{trace}"
        )
        reason = "cell_error"
    else:
        number, cell = _cell_with(nb, _is_running)
        message = (
            f"notebook {name}: papermill or its kernel died (exit status {returncode}) after {duration:.0f} s "
            f"in {_describe_cell(nb, number, cell)}\nSee the log above for its traceback (out of memory kills "
            "the kernel without one: give the step more memory)."
        )
        reason = "kernel"
    return NotebookRunError(f"{message}\nThe executed notebook up to there is kept: {kept}", reason, number, kept)
