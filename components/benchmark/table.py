"""The joined inference benchmark table (Markdown) and chart (self-contained HTML, inline SVG).

The case study's inference table: accelerator, cores, time, images/s, $/hour, images/$, with the
fastest and the cheapest (most images per dollar) marked. Plain Python (no TensorFlow, no
JavaScript, nothing fetched from a CDN, so the Kubeflow UI shows it offline).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

from components import charts, markdown, pages
from components.benchmark.rows import BenchmarkRow, as_row
from components.pages import Markup


def _num(value: Optional[float], fmt: str = ",.2f") -> str:
    return "n/a" if value is None else format(value, fmt)


@dataclasses.dataclass(frozen=True)
class RankedRow:
    """A result row with its place in a table.

    Attributes:
        row: the result.
        fastest: it has the most images/s (ties mark every tied row).
        cheapest: it has the most images per dollar (free hardware is not ranked).
    """

    row: BenchmarkRow
    fastest: bool
    cheapest: bool

    @property
    def notes(self) -> str:
        """``fastest``, ``cheapest``, both or neither, for the table's last column."""
        return ", ".join(n for n, on in (("fastest", self.fastest), ("cheapest", self.cheapest)) if on)


Rows = Sequence[Union[BenchmarkRow, Mapping[str, Any]]]


def mark_best(rows: Rows) -> list[RankedRow]:
    """Ranks the rows: which are the fastest and which the cheapest.

    Fastest: the most images/s. Cheapest: the most images per dollar (free hardware, with no
    images/$ figure, is not ranked). Ties mark every tied row.

    Args:
        rows: benchmark result rows, typed or as their JSON (``dsl.Collected`` output included).

    Returns:
        One ranked row per row, in the same order.
    """
    typed = [as_row(r) for r in rows]
    if not typed:
        return []
    best_speed = max(r.timing.images_per_sec for r in typed)
    priced = [r.images_per_dollar for r in typed if r.images_per_dollar is not None]
    best_value = max(priced) if priced else None
    return [
        RankedRow(
            row=r,
            fastest=r.timing.images_per_sec == best_speed,
            cheapest=best_value is not None and r.images_per_dollar == best_value,
        )
        for r in typed
    ]


def best_of(rows: Rows) -> dict[str, Optional[str]]:
    """Names the fastest and the cheapest accelerator (the first of ties; None when unknown)."""
    marked = mark_best(rows)
    fastest = next((r.row.accelerator for r in marked if r.fastest), None)
    cheapest = next((r.row.accelerator for r in marked if r.cheapest), None)
    return {"fastest": fastest, "cheapest": cheapest}


# The inference table's columns (Markdown and HTML); the last one says fastest / cheapest.
_HEAD = ("accelerator", "cores", "time (s)", "images/s", "$/hour", "images/$", "")


def _markdown_cells(x: RankedRow) -> list[Any]:
    r = x.row
    name = f"**{r.label}**" if x.fastest or x.cheapest else r.label
    return [name, r.cores, _num(r.timing.time_s), _num(r.timing.images_per_sec), _num(r.price_per_hour),
            _num(r.images_per_dollar, ",.0f"), x.notes]  # fmt: skip


def _served_table(served: Sequence[BenchmarkRow]) -> list[str]:
    """The served path's (REST) throughput and latency percentiles, one row per accelerator."""
    heads = ["accelerator", "images/s", "p50 (ms)", "p95 (ms)", "p99 (ms)", "HTTP / in-process time"]
    body = [
        [r.label, _num(r.http.images_per_sec), _num(r.http.latency_p50_ms), _num(r.http.latency_p95_ms),
         _num(r.http.latency_p99_ms), f"{_num(r.http_overhead)}x"]
        for r in served
    ]  # fmt: skip
    return markdown.table(heads, body, "lrrrrr")


def render_markdown(rows: Rows, title: str = "Inference benchmark") -> str:
    """The case study's table as Markdown, best rows marked.

    Args:
        rows: benchmark result rows (``components.benchmark.run.run_benchmark``), typed or JSON.
        title: the heading.

    Returns:
        Markdown text.
    """
    ranked = mark_best(rows)
    if not ranked:
        return f"# {title}\n\nNo results.\n"
    first = ranked[0].row.timing
    lines = [
        f"# {title}",
        "",
        f"{first.num_images:,} images in batches of {first.batch_size} per accelerator, "
        "through the exported SavedModel, warm-up excluded.",
        "",
    ]
    lines += markdown.table(_HEAD, [_markdown_cells(x) for x in ranked], "lrrrrrl")
    estimates = sorted({x.row.label for x in ranked if x.row.price_source.startswith("estimate")})
    if estimates:
        lines += ["", f"Prices marked as estimates (not from the case study): {', '.join(estimates)}."]
    served = [x.row for x in ranked if x.row.http is not None]
    if served:
        servers = ", ".join(sorted({r.http_server for r in served if r.http_server}))
        lines += ["", f"Served path (REST, timed on the {servers}):", "", *_served_table(served)]
    return "\n".join(lines) + "\n"


def render_html(rows: Rows, title: str = "Inference benchmark") -> str:
    """The inference table and two bar charts (images/s, images/$) as one self-contained page."""
    ranked = mark_best(rows)
    body = [
        [x.row.label, x.row.cores, _num(x.row.timing.time_s), _num(x.row.timing.images_per_sec),
         _num(x.row.price_per_hour), _num(x.row.images_per_dollar, ",.0f"), x.notes]
        for x in ranked
    ]  # fmt: skip
    classes = ["best" if x.fastest or x.cheapest else "" for x in ranked]
    labels = [x.row.label for x in ranked]
    speed = charts.bar_chart(
        "Throughput (higher is faster)", labels, [x.row.timing.images_per_sec for x in ranked], "images/s"
    )
    value = charts.bar_chart(
        "Images per dollar (higher is cheaper)", labels, [x.row.images_per_dollar for x in ranked], "images/$"
    )
    blocks = [pages.table(_HEAD, body, classes=classes), Markup(speed), Markup("<br/>"), Markup(value)]
    return pages.page(title, blocks, pages.GRID_CSS)
