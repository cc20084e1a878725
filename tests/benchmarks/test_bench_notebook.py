"""What the notebook step adds to a notebook's own run time (make bench).

A trivial notebook (a parameters cell, a little pure-Python work, a printed result, a file written)
run two ways, each in a fresh process as it runs for real:

- through the step: ``components.notebook.run.run_notebook`` (papermill in a child process, a
  kernel started on this Python, the notebook saved after every cell, the HTML page rendered, the
  files collected);
- directly: the same cells' code joined and run with ``python -c``.

The sides alternate over ``ROUNDS`` rounds (the machine is shared and noisy) and the medians are
compared: the ratio, and the absolute overhead in seconds, which is what a user pays per run (the
overhead does not grow with the notebook's own work, so on a TPU job of minutes it vanishes).
The figures are printed, not asserted, beyond sanity.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

pytestmark = pytest.mark.benchmark

ROUNDS = 5
ROOT = Path(__file__).resolve().parents[2]

PARAMETERS = "n = 200_000"
CELLS = [
    "import json\nimport os",
    "total = sum(i * i for i in range(n))\nprint('sum of squares', total)",
    "os.makedirs('outputs', exist_ok=True)\n"
    "with open('outputs/result.json', 'w') as f:\n"
    "    json.dump({'total': total}, f)",
]


def _notebook(path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell(PARAMETERS)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params] + [nbformat.v4.new_code_cell(c) for c in CELLS]
    nbformat.write(nb, path)
    return path


STEP = """
import json, sys, time
start = time.perf_counter()
from components.notebook.config import NotebookConfig
from components.notebook.run import NotebookOutputs, run_notebook
out = sys.argv[2]
result = run_notebook(
    NotebookConfig(notebook=sys.argv[1]),
    NotebookOutputs(out + "/nb.ipynb", out + "/nb.html", out + "/files"),
)
print(json.dumps({"in_process_s": time.perf_counter() - start, "papermill_s": result.duration_s}))
"""


def _timed(command: list[str], cwd: Path) -> tuple[float, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-3000:]
    return elapsed, done.stdout


def test_bench_notebook_step_overhead(tmp_path):
    nb = _notebook(tmp_path / "trivial.ipynb")
    direct_code = "\n".join([PARAMETERS, *CELLS])
    step_s, direct_s, inner = [], [], []
    for i in range(ROUNDS):
        work = tmp_path / f"round{i}"
        (work / "direct").mkdir(parents=True)
        # alternate which side goes first, so a slow spell of the machine hits both
        sides = ["step", "direct"] if i % 2 == 0 else ["direct", "step"]
        for side in sides:
            if side == "step":
                elapsed, out = _timed([sys.executable, "-c", STEP, str(nb), str(work / "step")], ROOT)
                step_s.append(elapsed)
                inner.append(json.loads(out.strip().splitlines()[-1]))
                assert json.loads((work / "step" / "files" / "result.json").read_text())["total"] > 0
            else:
                elapsed, out = _timed([sys.executable, "-c", direct_code], work / "direct")
                direct_s.append(elapsed)
                assert "sum of squares" in out
    step, direct = statistics.median(step_s), statistics.median(direct_s)
    papermill = statistics.median(r["papermill_s"] for r in inner)
    in_process = statistics.median(r["in_process_s"] for r in inner)
    print(
        f"\nnotebook step overhead ({ROUNDS} alternating rounds, medians, fresh processes):\n"
        f"  direct (python -c, the cells' code):     {direct:.2f} s\n"
        f"  through the step (run_notebook):         {step:.2f} s  ({step / direct:.1f}x)\n"
        f"  absolute overhead per run:               {step - direct:.2f} s\n"
        f"    of which papermill + kernel (child):   {papermill:.2f} s\n"
        f"    the rest in the step (imports, HTML):  {in_process - papermill:.2f} s in process, "
        f"{step - in_process:.2f} s interpreter start and imports before\n"
        f"  all rounds: step {[round(s, 2) for s in step_s]}, direct {[round(s, 2) for s in direct_s]}"
    )
    assert step > direct
