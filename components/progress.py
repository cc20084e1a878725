"""The progress-line protocol between a step and whoever reads its output.

A step's long loop (the conversion's images, the training's steps, the evaluation's examples,
the benchmark's batches) reports through a plain callback, ``on_progress(done, total, **fields)``;
the library knows nothing of consoles. A component body wires the callback to :func:`reporter`,
which prints one machine-readable line now and then::

    @@progress {"step": "convert", "done": 12000, "total": 40000, "unit": "images", "eta_s": 41.5, "rate": 684.2}

Every line has ``step``, ``done`` and ``total`` (integers) and ``unit``. The optional fields
(:data:`FIELDS`) say more where the step knows it:

- ``eta_s``: seconds left for this step (a float); :func:`reporter` computes it from its own
  rate when the step gives none;
- ``rate``: units (``unit``) per second;
- ``images_per_sec``: images per second (a training's throughput, whatever its unit);
- ``loss``: the current training loss;
- ``metric`` and ``value``: the name of the validation figure last measured (``val_accuracy``)
  and its value;
- ``note``: a short word on the step's state (``calibrating``, ``stopped early``);
- ``plan``: what the step will do, in one line, said once before it does it (a budget's plan:
  the steps, the time and the price it bought); a console prints it as a line of its own.

A reader ignores the fields it does not know, so a newer step's lines read in an older console.

Under kfp.local a step's output is a pipe read by the parent (``make run``), which turns these
lines into a live bar on a terminal or a plain line in a log; on a cluster they are ordinary log
lines. :func:`parse` reads one back.
"""

from __future__ import annotations

import json
import math
import re
import sys
import time
from collections.abc import Callable
from typing import Any, Optional, Protocol, TextIO

PREFIX = "@@progress "
# A launcher that relays its workers' output tags each line (``[worker 0] ...``); the tag is skipped.
_LINE = re.compile(r"^(?:\[[^\]\n]*\]\s*)?" + re.escape(PREFIX))

# The optional fields a line may carry, with the type a reader can rely on (others are dropped by
# :func:`parse`); numbers are finite.
FIELDS: dict[str, type] = {
    "eta_s": float,
    "rate": float,
    "images_per_sec": float,
    "loss": float,
    "metric": str,
    "value": float,
    "note": str,
    "plan": str,
}


class OnProgress(Protocol):
    """The callback a long loop reports through: ``on_progress(done, total, **fields)``."""

    def __call__(self, done: int, total: int, **fields: Any) -> None: ...


def _number(value: Any) -> Optional[float]:
    """``value`` as a finite float, or None (bools, text and NaN/inf are no figures)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)  # NumPy and TensorFlow scalars
        except (TypeError, ValueError):
            return None
    value = float(value)
    return value if math.isfinite(value) else None


def _clean(fields: dict[str, Any], keep_unknown_none: bool = False) -> dict[str, Any]:
    """The optional fields, those of :data:`FIELDS` with their types (None and non-finite numbers left
    out); unknown keys as they are, a None among them only with ``keep_unknown_none``.
    """
    out: dict[str, Any] = {}
    for key, value in fields.items():
        kind = FIELDS.get(key)
        if value is None and (kind is not None or not keep_unknown_none):
            continue
        if kind is float:
            value = _number(value)
            if value is None:
                continue
        elif kind is str:
            if not isinstance(value, str):
                continue
        out[key] = value
    return out


def format_line(step: str, done: int, total: int, unit: str = "", **fields: Any) -> str:
    """One progress line (no newline).

    Args:
        step: the step's name (``convert``, ``train``).
        done: units done.
        total: units in all.
        unit: what is counted (``images``, ``steps``, ``batches``).
        **fields: optional fields (:data:`FIELDS`, or any other JSON value); a None, a NaN or a
            value of the wrong type for a known field is left out.

    Returns:
        The line, starting with :data:`PREFIX`.
    """
    data = {"step": step, "done": int(done), "total": int(total), "unit": unit, **_clean(fields)}
    return PREFIX + json.dumps(data)


def parse(line: str) -> Optional[dict[str, Any]]:
    """The fields of a progress line, or None if it is not one.

    Leading whitespace is allowed (kfp.local indents a step's output), and so is one bracketed tag
    before the prefix (a launcher's ``[worker 0]``). A line that starts with the prefix but carries
    no valid JSON object with integer ``done`` and ``total`` is not one.

    Returns:
        ``step``, ``done``, ``total``, ``unit``, the optional fields of :data:`FIELDS` that have
        their type (others are dropped), and any unknown keys as they came.
    """
    text = line.strip()
    match = _LINE.match(text)
    if match is None:
        return None
    try:
        data = json.loads(text[match.end() :])
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not all(
        isinstance(data.get(k), int) and not isinstance(data.get(k), bool) for k in ("done", "total")
    ):
        return None
    base = {k: data.pop(k) for k in ("done", "total")}
    step, unit = data.pop("step", ""), data.pop("unit", "")
    return {"step": step, **base, "unit": unit, **_clean(data, keep_unknown_none=True)}


def reporter(
    step: str,
    unit: str = "",
    every_s: float = 1.0,
    stream: Optional[TextIO] = None,
    clock: Callable[[], float] = time.monotonic,
) -> OnProgress:
    """A progress callback that prints a progress line at most every ``every_s`` seconds, and the last.

    Where the caller gives no ``eta_s`` (or ``rate``), the reporter adds its own: the units done
    since its first call over the time since then, and the units left at that rate. The first
    call gives no rate to measure from, so its line has none.

    Args:
        step: the step's name in the lines.
        unit: what is counted (``images``, ``batches``).
        every_s: the least time between two lines (the reader redraws a bar, a log stays short);
            0 prints every call (a caller that throttles itself, as the training's callback does).
        stream: where lines go; None means ``sys.stdout`` at call time.
        clock: seconds, monotonic (tests pass a fake one).

    Returns:
        ``on_progress(done, total, **fields)`` (fields as :func:`format_line` takes them); a call
        with ``done >= total`` always prints.
    """
    last = [float("-inf")]
    first: list[tuple[float, int]] = []

    def on_progress(done: int, total: int, **fields: Any) -> None:
        now = clock()
        if not first:
            first.append((now, done))
        if done < total and now - last[0] < every_s:
            return
        last[0] = now
        start, start_done = first[0]
        if done > start_done and now > start:
            rate = (done - start_done) / (now - start)
            fields.setdefault("rate", rate)
            fields.setdefault("eta_s", max(total - done, 0) / rate)
        out = stream or sys.stdout
        out.write(format_line(step, done, total, unit, **fields) + "\n")
        out.flush()  # the reader draws from lines as they come, not when a buffer fills

    return on_progress
