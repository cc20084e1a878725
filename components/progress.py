"""The progress-line protocol between a step and whoever reads its output.

A step's long loop (the conversion's images, the benchmark's batches) reports through a plain
callback, ``on_progress(done, total)``; the library knows nothing of consoles. A component body
wires the callback to :func:`reporter`, which prints one machine-readable line now and then::

    @@progress {"step": "convert", "done": 12000, "total": 40000, "unit": "images"}

Under kfp.local a step's output is a pipe read by the parent (``make run``), which turns these
lines into a live bar on a terminal or a plain line in a log; on a cluster they are ordinary log
lines. :func:`parse` reads one back.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any, Optional, TextIO

PREFIX = "@@progress "


def format_line(step: str, done: int, total: int, unit: str = "") -> str:
    """One progress line (no newline)."""
    return PREFIX + json.dumps({"step": step, "done": int(done), "total": int(total), "unit": unit})


def parse(line: str) -> Optional[dict[str, Any]]:
    """The fields of a progress line (``step``, ``done``, ``total``, ``unit``), or None if it is not one.

    Leading whitespace is allowed (kfp.local indents a step's output). A line that starts with
    the prefix but carries no valid JSON object with integer ``done`` and ``total`` is not one.
    """
    text = line.strip()
    if not text.startswith(PREFIX):
        return None
    try:
        data = json.loads(text[len(PREFIX) :])
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not all(isinstance(data.get(k), int) for k in ("done", "total")):
        return None
    data.setdefault("step", "")
    data.setdefault("unit", "")
    return data


def reporter(
    step: str, unit: str = "", every_s: float = 1.0, stream: Optional[TextIO] = None
) -> Callable[[int, int], None]:
    """A progress callback that prints a progress line at most every ``every_s`` seconds, and the last.

    Args:
        step: the step's name in the lines.
        unit: what is counted (``images``, ``batches``).
        every_s: the least time between two lines (the reader redraws a bar, a log stays short).
        stream: where lines go; None means ``sys.stdout`` at call time.

    Returns:
        ``on_progress(done, total)``; a call with ``done >= total`` always prints.
    """
    last = [float("-inf")]

    def on_progress(done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - last[0] < every_s:
            return
        last[0] = now
        out = stream or sys.stdout
        out.write(format_line(step, done, total, unit) + "\n")
        out.flush()  # the reader draws from lines as they come, not when a buffer fills

    return on_progress
