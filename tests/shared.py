"""Test assets built once per test run and shared by every process of it (pytest-xdist's workers too).

``make test`` runs the suite in two worker processes; an asset that takes seconds of TensorFlow
(a trained detector, say) is built by the first worker that asks for it, under a lock, into a
folder of this run (named after xdist's run id, or this process when run alone), and read by the
others. Each asset's folder holds ``asset.json`` (what its builder returned), written last.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def run_folder() -> Path:
    """This test run's folder for shared assets (the same in every worker of one run)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"
    folder = Path(tempfile.gettempdir()) / f"ltp-tests-{run}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def once_per_run(name: str, build: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """``build(folder)``'s result, built once per test run into ``<run folder>/<name>``.

    Args:
        name: the asset's name (its folder).
        build: makes the asset under the folder it is given and returns JSON data (its paths).
    """
    folder = run_folder() / name
    done = folder / "asset.json"
    with open(run_folder() / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other workers wait here while the first builds
        if not done.exists():
            folder.mkdir(exist_ok=True)
            result = build(folder)
            done.write_text(json.dumps(result))
    return json.loads(done.read_text())
