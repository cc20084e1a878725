"""Kill a training like a preempted TPU: SIGKILL as soon as its first checkpoint exists."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path


def kill_at_first_checkpoint(command: Sequence[str], checkpoint: Path, timeout_s: float = 120) -> None:
    """Runs ``command`` and SIGKILLs it once ``checkpoint`` (the CheckpointManager's index) appears.

    Raises:
        AssertionError: the command ended before a checkpoint, or none appeared in ``timeout_s``.
    """
    child = subprocess.Popen(list(command), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout_s
    try:
        while not checkpoint.exists():
            assert child.poll() is None, "the training ended before a checkpoint could be interrupted"
            assert time.monotonic() < deadline, f"no checkpoint appeared within {timeout_s:.0f} s"
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
