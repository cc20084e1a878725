"""The sweep's chart: quality against billed time, marker area proportional to the run's cost.

matplotlib with the Agg backend (no display), written as inline SVG so the HTML report stays one
self-contained file. Kept apart so it can join a shared chart module (components/charts.py).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Optional

_MIN_AREA, _MAX_AREA = 40.0, 900.0


def quality_vs_time_svg(
    labels: Sequence[str],
    minutes: Sequence[float],
    quality: Sequence[float],
    costs: Sequence[Optional[float]],
    quality_label: str,
    title: str = "Quality against training time (marker area: cost)",
) -> str:
    """A scatter chart as an ``<svg>`` element: one labelled point per cell.

    Args:
        labels: the cells' names.
        minutes: billed time per cell, minutes (x axis).
        quality: the quality metric per cell (y axis).
        costs: the cost per cell in dollars (marker area); None draws the smallest marker.
        quality_label: the y axis label (``mAP@0.5``, ``accuracy``).
        title: the chart's title.

    Returns:
        The SVG markup (no XML declaration, ready to inline in HTML).
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    known = [c for c in costs if c is not None]
    peak = max(known) if known else 0.0
    areas = [_MIN_AREA if c is None or peak <= 0 else _MIN_AREA + (_MAX_AREA - _MIN_AREA) * c / peak for c in costs]
    fig = Figure(figsize=(7.0, 4.2), dpi=100)
    ax = fig.add_subplot()
    ax.scatter(minutes, quality, s=areas, alpha=0.55, color="#1a73e8", edgecolors="#0b3d91")
    for label, x, y, c in zip(labels, minutes, quality, costs, strict=True):
        note = label if c is None else f"{label} (${c:,.2f})"
        ax.annotate(note, (x, y), textcoords="offset points", xytext=(6, 6), fontsize=8)
    ax.set_xlabel("billed time (min)")
    ax.set_ylabel(quality_label)
    ax.set_title(title, fontsize=11)
    ax.grid(True, alpha=0.3)
    ax.margins(0.15)
    fig.tight_layout()
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})  # no date: the same rows, the same page
    svg = buffer.getvalue()
    return svg[svg.index("<svg") :]
