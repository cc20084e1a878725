"""Every chart the project draws, with one plotting library (matplotlib), as inline SVG.

Shared by the steps (the benchmark's and the sweep's HTML, the run report): a chart is rendered
when the page is built, so the page needs no JavaScript and loads nothing from the network. The
figures are built with matplotlib's object API (``Figure``, no ``pyplot``): no global state, no
GUI backend, safe in a subprocess without a display. Text stays text (``svg.fonttype: none``): the
page's own fonts draw it, nothing is embedded, and the numbers in a chart can be searched.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, Sequence
from typing import Optional

# One palette for every chart (matplotlib's default cycle, colour-blind friendlier than ad hoc).
PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2", "#ff9da6")
WIDTH_IN = 6.4
_RC = {
    "svg.fonttype": "none",  # <text> elements, not glyph paths: smaller, searchable, no font files
    "svg.hashsalt": "lean-tpu-pipelines",  # stable element ids: the same chart renders the same bytes
    "font.size": 9,
    "font.family": "sans-serif",
    "axes.spines.top": False,
    "axes.spines.right": False,
}


class ChartError(ValueError):
    """A chart was asked for with data it cannot draw; the message says what was wrong."""


def _figure(height_in: float, width_in: float = WIDTH_IN):
    import matplotlib

    matplotlib.rcParams.update(_RC)
    from matplotlib.figure import Figure

    return Figure(figsize=(width_in, height_in), layout="constrained")


def to_svg(fig, title: str) -> str:
    """The figure as an inline ``<svg>`` element (no XML prolog), with ``title`` as its accessible name.

    Args:
        fig: a matplotlib ``Figure``.
        title: the chart's title, set as ``aria-label`` (screen readers, tests).

    Returns:
        The ``<svg ...>...</svg>`` text.
    """
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]
    # The RDF metadata block names licences by URL; a page has no use for it.
    svg = re.sub(r"\s*<metadata>.*?</metadata>", "", svg, count=1, flags=re.S)
    label = title.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
    return re.sub(r"^<svg ", f'<svg role="img" aria-label="{label}" class="chart" ', svg, count=1)


def _finite(values: Sequence[Optional[float]]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def bar_chart(
    title: str, labels: Sequence[str], values: Sequence[Optional[float]], unit: str = "", width_in: float = WIDTH_IN
) -> str:
    """A horizontal bar chart, one bar per label, each bar labelled with its value.

    Args:
        title: the chart's title.
        labels: one name per bar, top to bottom.
        values: one value per bar; None draws no bar and says ``n/a``.
        unit: the value axis' label.
        width_in: the figure's width in inches (96 pixels each on a screen at 100%).

    Returns:
        An inline ``<svg>`` element.
    """
    if len(labels) != len(values):
        raise ChartError(f"bar_chart {title!r}: {len(labels)} labels but {len(values)} values")
    fig = _figure(0.9 + 0.32 * max(len(labels), 1), width_in)
    ax = fig.add_subplot()
    ys = list(range(len(labels)))
    heights = [v if v is not None and math.isfinite(v) else 0.0 for v in values]
    bars = ax.barh(ys, heights, color=PALETTE[0], height=0.6)
    ax.set_yticks(ys, labels=list(labels))
    ax.invert_yaxis()
    ax.bar_label(bars, labels=["n/a" if v is None else f"{v:,.4g}" for v in values], padding=3)
    top = max(_finite(values) or [1.0])
    ax.set_xlim(0, top * 1.18 if top > 0 else 1.0)
    ax.set_xlabel(unit)
    ax.set_title(title, loc="left", fontweight="bold")
    return to_svg(fig, title)


def grouped_bars(
    title: str,
    groups: Sequence[str],
    series: Mapping[str, Sequence[Optional[float]]],
    unit: str = "",
    width_in: float = WIDTH_IN,
) -> str:
    """Vertical bars grouped by ``groups`` (x axis), one colour per series (the legend).

    Args:
        title: the chart's title.
        groups: the x-axis categories (e.g. batch sizes).
        series: series name -> one value per group; None leaves a gap.
        unit: the y axis' label.
        width_in: the figure's width in inches.

    Returns:
        An inline ``<svg>`` element.
    """
    for name, values in series.items():
        if len(values) != len(groups):
            raise ChartError(
                f"grouped_bars {title!r}: series {name!r} has {len(values)} values for {len(groups)} groups"
            )
    fig = _figure(2.8, width_in)
    ax = fig.add_subplot()
    n = max(len(series), 1)
    width = 0.8 / n
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        heights = [v if v is not None and math.isfinite(v) else 0.0 for v in values]
        bars = ax.bar(xs, heights, width=width * 0.92, color=PALETTE[i % len(PALETTE)], label=name)
        ax.bar_label(bars, labels=["" if v is None else f"{v:.3g}" for v in values], padding=2, fontsize=7)
    rotate = sum(len(str(g)) for g in groups) * 0.075 > width_in  # long names would overlap
    ax.set_xticks(
        range(len(groups)), labels=list(groups), rotation=30 if rotate else 0, ha="right" if rotate else "center"
    )
    ax.set_ylabel(unit)
    ax.margins(y=0.12)
    if series:
        # Outside the axes: a legend inside would cover the bars of the first groups.
        fig.legend(loc="outside upper right", frameon=False, ncols=min(len(series), 4))
    ax.set_title(title, loc="left", fontweight="bold")
    return to_svg(fig, title)


def line_chart(
    title: str,
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    xlabel: str = "",
    ylabel: str = "",
    markers: bool = True,
    limits: Optional[tuple[float, float]] = None,
    width_in: float = WIDTH_IN,
    integer_x: bool = False,
) -> str:
    """Lines, one per series of (x values, y values): training curves, precision-recall curves.

    Args:
        title: the chart's title.
        series: name -> (xs, ys) of equal length.
        xlabel: the x axis' label.
        ylabel: the y axis' label.
        markers: mark each point (a few epochs read better with markers).
        limits: fixed y limits (e.g. (0, 1) for a metric in [0, 1]); None fits the data.
        width_in: the figure's width in inches.
        integer_x: ticks on whole numbers only (epochs).

    Returns:
        An inline ``<svg>`` element.
    """
    fig = _figure(2.6, width_in)
    ax = fig.add_subplot()
    if integer_x:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for i, (name, (xs, ys)) in enumerate(series.items()):
        if len(xs) != len(ys):
            raise ChartError(f"line_chart {title!r}: series {name!r} has {len(xs)} x values and {len(ys)} y values")
        ax.plot(list(xs), list(ys), marker="o" if markers else None, color=PALETTE[i % len(PALETTE)], label=name)
    if limits is not None:
        ax.set_ylim(*limits)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if series:
        ax.legend(frameon=False)
    ax.set_title(title, loc="left", fontweight="bold")
    return to_svg(fig, title)


def heatmap(
    title: str,
    matrix: Sequence[Sequence[float]],
    labels: Sequence[str],
    xlabel: str,
    ylabel: str,
    width_in: float = WIDTH_IN,
) -> str:
    """A square matrix as a heatmap with each cell's count written in it (a confusion matrix).

    Args:
        title: the chart's title.
        matrix: rows of numbers, ``len(labels)`` x ``len(labels)``.
        labels: the row and column names.
        xlabel: the columns' meaning (e.g. ``predicted``).
        ylabel: the rows' meaning (e.g. ``true``).
        width_in: the figure's width in inches.

    Returns:
        An inline ``<svg>`` element.
    """
    n = len(labels)
    if len(matrix) != n or any(len(row) != n for row in matrix):
        raise ChartError(f"heatmap {title!r}: expected a {n}x{n} matrix for {n} labels, got {len(matrix)} rows")
    fig = _figure(1.6 + 0.38 * n, width_in)
    ax = fig.add_subplot()
    peak = max((max(row) for row in matrix if row), default=0) or 1
    image = ax.imshow(matrix, cmap="Blues", vmin=0, vmax=peak)
    ax.set_xticks(range(n), labels=list(labels), rotation=45, ha="right")
    ax.set_yticks(range(n), labels=list(labels))
    for r, row in enumerate(matrix):
        for c, value in enumerate(row):
            if value:
                ax.text(c, r, f"{value:g}", ha="center", va="center", fontsize=7,
                        color="white" if value > peak / 2 else "#222")  # fmt: skip
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.spines[:].set_visible(False)
    fig.colorbar(image, ax=ax, shrink=0.8)
    ax.set_title(title, loc="left", fontweight="bold")
    return to_svg(fig, title)


def bubble_chart(
    labels: Sequence[str],
    x: Sequence[float],
    y: Sequence[float],
    sizes: Sequence[Optional[float]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    size_note: str = "${:,.2f}",
) -> str:
    """A labelled scatter chart whose marker area follows ``sizes`` (the sweep: quality against time, cost).

    Args:
        labels: one name per point.
        x: the x values.
        y: the y values.
        sizes: the marker area's measure per point (None: the smallest marker, no note).
        title: the chart's title.
        x_label: the x axis label.
        y_label: the y axis label.
        size_note: how a point's size is written next to its label.

    Returns:
        The inline ``<svg>`` element.

    Raises:
        ChartError: the sequences differ in length or there is no point.
    """
    if not labels or not len(labels) == len(x) == len(y) == len(sizes):
        raise ChartError(
            f"bubble_chart needs one x, y and size per label: {len(labels)}, {len(x)}, {len(y)}, {len(sizes)}"
        )
    known = [s for s in sizes if s is not None]
    peak = max(known) if known else 0.0
    smallest, largest = 40.0, 900.0
    areas = [smallest if s is None or peak <= 0 else smallest + (largest - smallest) * s / peak for s in sizes]
    fig = _figure(3.6)
    ax = fig.add_subplot()
    ax.scatter(x, y, s=areas, alpha=0.55, color=PALETTE[0], edgecolors="#1f3b5c")
    for label, px, py, size in zip(labels, x, y, sizes, strict=True):
        note = label if size is None else f"{label} ({size_note.format(size)})"
        ax.annotate(note, (px, py), textcoords="offset points", xytext=(6, 6), fontsize=8)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.margins(0.15)
    return to_svg(fig, title)


def frontier_chart(
    points: Mapping[str, tuple[float, float]],
    frontier: Sequence[str],
    *,
    title: str,
    x_label: str,
    y_label: str,
    chosen: Optional[str] = None,
) -> str:
    """Every point, the Pareto frontier among them as a line, and a chosen one ringed (a search's trials).

    Args:
        points: label -> (x, y): a trial's cost (or time) and its quality.
        frontier: the labels on the frontier, in x order.
        title: the chart's title.
        x_label: the x axis label.
        y_label: the y axis label.
        chosen: the label to ring (the objective's pick); None: none.

    Returns:
        The inline ``<svg>`` element.

    Raises:
        ChartError: no point, or a frontier label that is not a point.
    """
    if not points:
        raise ChartError(f"frontier_chart {title!r}: no point to draw")
    missing = [f for f in frontier if f not in points]
    if missing:
        raise ChartError(f"frontier_chart {title!r}: frontier labels {missing} are not points")
    fig = _figure(3.6)
    ax = fig.add_subplot()
    xs, ys = zip(*points.values(), strict=True)
    ax.scatter(xs, ys, s=36, color="#9aa5b1", label="trials", zorder=2)
    if frontier:
        fx, fy = zip(*(points[f] for f in frontier), strict=True)
        ax.plot(fx, fy, drawstyle="steps-post", marker="o", color=PALETTE[0], label="frontier", zorder=3)
    if chosen is not None and chosen in points:
        ax.scatter(
            *points[chosen], s=220, facecolors="none", edgecolors=PALETTE[1], linewidths=2, label="pick", zorder=4
        )
    for label, (px, py) in points.items():
        ax.annotate(label, (px, py), textcoords="offset points", xytext=(5, 4), fontsize=7)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_title(title, loc="left", fontweight="bold")
    ax.grid(True, alpha=0.3)
    ax.legend(frameon=False, loc="best")
    ax.margins(0.12)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(5))  # tiny dollar figures have long tick labels
    return to_svg(fig, title)
