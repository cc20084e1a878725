"""What the seams cost a user who never trains anything (make bench).

The registries (tasks, serving targets, source kinds) and the generated command lines are looked
up at run time; the promise is that asking them stays cheap and TensorFlow-free. Each figure is
measured in fresh processes, alternating with its baseline over ``ROUNDS`` rounds (the machine is
shared and noisy), and the medians are compared:

- a step's ``--help`` (its flags, the registries behind its choices) against ``python -c pass``;
- looking every registry up (the tasks with an extra task module, the serving targets, the source
  kinds) against importing the packages alone;
- compiling every pipeline against importing kfp alone.

The figures are printed, not asserted, beyond sanity.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.benchmark

ROUNDS = 5
ROOT = Path(__file__).resolve().parents[2]
STEPS = ("convert", "train", "evaluate", "benchmark", "sweep", "promote", "monitor", "report")
LOOKUP = (
    "from trainer.tasks import task_types; from components.serving.targets import target_names; "
    "from components.image_input.sources import registry; "
    "assert 'brightness' in task_types() and target_names() and 'brightness' in registry.kind_names(); "
    "import sys; assert 'tensorflow' not in sys.modules"
)
IMPORT_ONLY = "import trainer.tasks, components.serving.targets, components.image_input.sources.registry"


def _seconds(argv: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LTP_EXTENSIONS": "tests.toy_task"}
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, env=env, check=True, capture_output=True, timeout=300)
    return time.perf_counter() - start


def _compare(name: str, measured: list[str], baseline: list[str]) -> tuple[float, float]:
    ours, base = [], []
    for _ in range(ROUNDS):
        ours.append(_seconds(measured))
        base.append(_seconds(baseline))
    mine, theirs = statistics.median(ours), statistics.median(base)
    print(f"{name}: {mine:.2f} s against {theirs:.2f} s, {mine / theirs:.2f}x (+{mine - theirs:.2f} s)")
    return mine, theirs


def test_bench_seams():
    python = sys.executable
    for step in STEPS:
        mine, base = _compare(f"python -m components.{step} --help", [python, "-m", f"components.{step}", "--help"],
                              [python, "-c", "pass"])  # fmt: skip
        assert mine > 0 and base > 0
    _compare("every registry looked up", [python, "-c", LOOKUP], [python, "-c", IMPORT_ONLY])
    out = Path(os.environ.get("TMPDIR", "/tmp")) / "ltp-bench-compile"
    mine, base = _compare(
        "compile every pipeline",
        [python, "-m", "pipelines.tools.compile", "--output-dir", str(out)],
        [python, "-c", "import kfp.dsl"],
    )
    assert len(list(out.glob("*.yaml"))) >= 10
