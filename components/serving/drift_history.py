"""A stage's drift over its windows: every watched figure as a line against its threshold.

Each monitor run writes one ``<end>.json`` per stage and model under :func:`drift_folder`
(``components.monitor.drift``); this module reads the last of them back and draws each check's
figure over the windows, its threshold beside it, on one self-contained page (``drift.html``,
beside ``latest.json``). The run report shows the same charts in the stage's section. A file
that cannot be read is left out and named under the charts; a check that had too little traffic
in a window has no point there.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from typing import Any

from components import charts, pages
from trainer import storage

WINDOWS_SHOWN = 48
"""The newest windows a page draws (two days of hourly monitor runs)."""

PAGE = "drift.html"
GAUGES = "drift.prom"
"""Beside each model's windows: the newest window's figures as Prometheus gauges (the alerts read them)."""
_STAMP = re.compile(r"[0-9]{8}T[0-9]{6}Z\.json")


def drift_folder(stages_root: str, stage: str, model: str) -> str:
    """Where a stage's ``drift.json`` files go: ``<stages_root>/<stage>/drift/<model>``."""
    return storage.join(stages_root, stage, "drift", model)


@dataclasses.dataclass(frozen=True)
class DriftHistory:
    """The last windows of one stage's drift files, oldest first.

    Attributes:
        stage: the stage.
        model: the served model name.
        windows: each window's ``drift.json`` object, oldest first.
        unreadable: ``name: why`` of each file that could not be read.
    """

    stage: str
    model: str
    windows: tuple[dict[str, Any], ...]
    unreadable: tuple[str, ...] = ()

    def series(self) -> dict[str, tuple[list[int], list[float], float]]:
        """``check -> (window indexes, figures, threshold)``: the windows where the check had a figure."""
        out: dict[str, tuple[list[int], list[float], float]] = {}
        for i, window in enumerate(self.windows):
            for check in window.get("checks", ()):
                if check.get("figure") is None:
                    continue
                xs, ys, _ = out.setdefault(check["name"], ([], [], float(check["threshold"])))
                xs.append(i + 1)
                ys.append(float(check["figure"]))
        return out


def read_history(folder: str, stage: str, model: str, limit: int = WINDOWS_SHOWN) -> DriftHistory:
    """The newest ``limit`` drift files of ``folder`` (``<stage>/drift/<model>``), oldest first."""
    names = sorted(n for n in storage.sizes(folder) if _STAMP.fullmatch(n))
    windows, unreadable = [], []
    for name in names[-limit:]:
        try:
            data = json.loads(storage.read_text(storage.join(folder, name)))
            if not isinstance(data, dict) or not isinstance(data.get("checks"), list):
                raise ValueError("not a drift.json object")
        except (ValueError, UnicodeDecodeError) as err:
            unreadable.append(f"{name}: {err}")
            continue
        windows.append(data)
    return DriftHistory(stage, model, tuple(windows), tuple(unreadable))


def history_blocks(history: DriftHistory) -> list[pages.Markup]:
    """The charts of every figure over the windows, and a line for what could not be drawn."""
    if not history.windows:
        return [pages.fragment("<p>No drift window yet: <code>make monitor</code> writes one.</p>")]
    first, last = history.windows[0]["window"]["end"], history.windows[-1]["window"]["end"]
    blocks = [
        pages.fragment(
            "<p>{{ n }} windows, ending {{ first }} to {{ last }} (x: the window's number, oldest first).</p>",
            n=len(history.windows), first=first, last=last,
        )
    ]  # fmt: skip
    for name, (xs, ys, threshold) in sorted(history.series().items()):
        lines = {name: (xs, ys), "fires above": (xs, [threshold] * len(xs))}
        blocks.append(pages.Markup(charts.line_chart(f"{history.stage}: {name}", lines, xlabel="window")))
    if history.unreadable:
        blocks.append(pages.fragment("<p>Left out: {{ files }}</p>", files="; ".join(history.unreadable)))
    return blocks


def write_history_page(history: DriftHistory, folder: str) -> str:
    """Writes ``<folder>/drift.html`` whole; returns its path."""
    title = f"Drift of {history.model} in {history.stage}"
    path = storage.join(folder, PAGE)
    storage.write_text(path, pages.page(title, history_blocks(history), pages.GRID_CSS))
    return path


def latest_lines(histories: Sequence[DriftHistory]) -> list[str]:
    """One line per stage: the newest window's verdict (what the report's stage section says first)."""
    lines = []
    for h in histories:
        if not h.windows:
            continue
        newest = h.windows[-1]
        fired = [c["name"] for c in newest.get("checks", ()) if c.get("state") == "alarm"]
        verdict = f"DRIFT: {', '.join(fired)}" if fired else "ok"
        end = newest["window"]["end"]
        lines.append(f"{h.stage}: {newest.get('samples', 0)} samples in the window ending {end}; {verdict}")
    return lines


def stage_gauges(stages_root: str, stage: str) -> str:
    """The newest drift gauges of every model of ``stage``, as one Prometheus exposition (no duplicate ``# TYPE``).

    What the traffic collector serves at ``/metrics`` for the cluster's Prometheus to scrape.
    """
    root = storage.join(stages_root, stage, "drift")
    declared, lines = set(), []
    for model in storage.list_dirs(root):
        path = storage.join(root, model, GAUGES)
        if not storage.exists(path):
            continue
        for line in storage.read_text(path).splitlines():
            if line.startswith("# TYPE "):
                if line in declared:
                    continue
                declared.add(line)
            lines.append(line)
    return "".join(f"{line}\n" for line in lines)
