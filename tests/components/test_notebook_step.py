"""The notebook step's library function with real kernels: success, a failing cell, both timeouts.

Small notebooks without TensorFlow (a kernel starts in about 2 s); the demo notebook runs through
the whole pipeline under kfp.local in tests/pipelines/test_notebook_pipeline.py. The output URIs
are folders apart from the local paths, as a cluster's gs:// artifact URIs are apart from the
paths the launcher uploads after a success.
"""

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import psutil
import pytest

from components.notebook.config import NotebookConfig
from components.notebook.render import network_references
from components.notebook.run import NotebookOutputs, NotebookRunError, run_notebook

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def write_notebook(path: Path, parameters: str, *cells: str) -> Path:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(parameters)
    cell.metadata["tags"] = ["parameters"]
    nb.cells = [nbformat.v4.new_markdown_cell("# A test notebook"), cell] + [
        nbformat.v4.new_code_cell(c) for c in cells
    ]
    nbformat.write(nb, path)
    return path


def outputs_in(tmp_path: Path) -> NotebookOutputs:
    local, uri = tmp_path / "local", tmp_path / "uri"
    return NotebookOutputs(
        str(local / "executed"),
        str(local / "page.html"),
        str(local / "files"),
        str(uri / "executed"),
        str(uri / "page.html"),
        str(uri / "files"),
    )


def read(path) -> nbformat.NotebookNode:
    return nbformat.read(str(path), as_version=4)


def own_code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code" and "injected-parameters" not in c.metadata.get("tags", [])]


def test_a_notebook_runs_in_this_python_with_its_parameters_and_publishes_page_and_files(tmp_path, monkeypatch):
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)  # the step sets it for the kernel
    nb = write_notebook(
        tmp_path / "ok.ipynb",
        "epochs = 1\nsizes = [8]",
        "import os, sys\nprint('python', sys.executable)\nprint('onednn', os.environ.get('TF_ENABLE_ONEDNN_OPTS'))",
        "print('epochs', epochs, type(epochs).__name__, sizes)",
        "os.makedirs('outputs/sub', exist_ok=True)\n"
        "open('outputs/sub/result.json', 'w').write('{\"epochs\": %d}' % epochs)\n"
        "assert os.environ['NOTEBOOK_FILES_DIR'] == os.path.abspath('outputs')",
        "from IPython.display import HTML\nHTML('<b>bold output 42</b>')",
    )
    out = outputs_in(tmp_path)
    result = run_notebook(NotebookConfig(notebook=str(nb), parameters={"epochs": 3.0, "sizes": [4.0, 8.0]}), out)
    executed = read(out.notebook)
    text = "".join(o.get("text", "") for c in own_code_cells(executed) for o in c.outputs)
    assert f"python {sys.executable}\n" in text  # the kernel is the step's own Python
    assert "onednn 1\n" in text
    assert "epochs 3 int [4, 8]\n" in text  # kfp.local's floats turned back into ints
    assert result.parameters == {"epochs": 3, "sizes": [4, 8]}
    assert result.files == ("sub/result.json",)
    assert json.loads((Path(out.files) / "sub" / "result.json").read_text()) == {"epochs": 3}
    page = Path(out.html).read_text()
    assert "epochs 3 int [4, 8]" in page and "<b>bold output 42</b>" in page
    assert network_references(page) == []
    # a success is published through the paths (the launcher uploads them), not written to the URIs
    assert not Path(out.notebook_uri).exists()


def test_a_failing_cell_fails_the_step_and_keeps_the_notebook_up_to_there(tmp_path):
    nb = write_notebook(
        tmp_path / "fails.ipynb",
        "divisor = 1",
        "print('before the failure')",
        "def ratio(a, b):\n    return a / b\n\nratio(1, divisor)",
        "print('never reached')",
    )
    out = outputs_in(tmp_path)
    with pytest.raises(NotebookRunError) as caught:
        run_notebook(NotebookConfig(notebook=str(nb), parameters={"divisor": 0}), out)
    err = caught.value
    message = str(err)
    assert err.reason == "cell_error" and err.cell == 4  # markdown, parameters, print, ratio
    assert "failed in cell 4 of 5 (In [4])" in message
    assert "ratio(1, divisor)" in message  # the cell's source
    assert "ZeroDivisionError: division by zero" in message
    assert "return a / b" in message  # its traceback, ANSI colours stripped
    assert "\x1b[" not in message
    assert f"notebook {out.notebook_uri}" in message  # where it was kept
    kept = read(out.notebook_uri)  # written to the URI: a failed task publishes no artifacts
    cells = own_code_cells(kept)
    assert cells[1].outputs[0]["text"] == "before the failure\n"
    assert cells[2].outputs[-1]["ename"] == "ZeroDivisionError"
    assert cells[3].outputs == []
    assert "ZeroDivisionError" in Path(out.html_uri).read_text()


def test_the_command_line_fails_with_the_cell_and_its_traceback_on_stderr(tmp_path):
    nb = write_notebook(tmp_path / "fails.ipynb", "x = 1", "raise RuntimeError(f'broken with x={x}')")
    done = subprocess.run(
        [sys.executable, "-m", "components.notebook", "run", str(nb), str(tmp_path / "out"), "-p", "x=7"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert "error: notebook" in done.stderr and "failed in cell 3 of 3" in done.stderr
    assert "RuntimeError: broken with x=7" in done.stderr
    assert (tmp_path / "out" / "fails.ipynb").is_file() and (tmp_path / "out" / "fails.html").is_file()
    bad = subprocess.run(
        [sys.executable, "-m", "components.notebook", "run", str(nb), str(tmp_path / "o2"), "-p", "y=1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "error: parameter(s) y are not assigned" in bad.stderr


def test_the_whole_run_timeout_kills_notebook_and_kernel_and_keeps_what_ran(tmp_path):
    nb = write_notebook(
        tmp_path / "slow.ipynb",
        "seconds = 600",
        "import os\nprint('kernel pid', os.getpid())",
        "import time\nprint('sleeping')\ntime.sleep(seconds)",
        "print('never reached')",
    )
    out = outputs_in(tmp_path)
    seen_while_running = []

    def watch():
        # what survives a pod killed from outside (OOM, preemption): the copy made while it runs
        while not done.is_set():
            try:
                nb = read(out.notebook_uri)
            except (OSError, ValueError):
                nb = None
            if nb is not None and any(
                o.get("text", "").startswith("kernel pid") for c in nb.cells for o in c.get("outputs", [])
            ):
                seen_while_running.append(time.monotonic() - start)
                return
            time.sleep(0.2)

    done = threading.Event()
    watcher = threading.Thread(target=watch)
    start = time.monotonic()
    watcher.start()
    try:
        with pytest.raises(NotebookRunError) as caught:
            run_notebook(NotebookConfig(notebook=str(nb), timeout_s=12, sync_every_s=1), out)
    finally:
        done.set()
        watcher.join()
    elapsed = time.monotonic() - start
    assert seen_while_running and seen_while_running[0] < 12, "the notebook so far was not copied during the run"
    assert 12 <= elapsed < 40
    err = caught.value
    assert err.reason == "timeout" and err.cell == 4
    assert "ran past its whole-run timeout of 12 s" in str(err) and "time.sleep(seconds)" in str(err)
    kept = read(out.notebook_uri)
    cells = own_code_cells(kept)
    pid = int(cells[1].outputs[0]["text"].split()[-1])
    assert cells[2].metadata["papermill"]["status"] == "running"
    # the kernel runs in a session of its own: it must have been killed too, not left running
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, f"the kernel {pid} outlived the step's deadline"
        time.sleep(0.2)


def test_the_per_cell_timeout_interrupts_the_cell(tmp_path):
    nb = write_notebook(tmp_path / "cell.ipynb", "seconds = 600", "import time\ntime.sleep(seconds)", "print('no')")
    out = outputs_in(tmp_path)
    with pytest.raises(NotebookRunError) as caught:
        run_notebook(NotebookConfig(notebook=str(nb), cell_timeout_s=2), out)
    assert caught.value.reason == "cell_timeout" and caught.value.cell == 3
    assert "per-cell timeout of 2 s" in str(caught.value)
    assert read(out.notebook_uri).cells  # kept at the URI
