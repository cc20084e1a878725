"""The batch prediction's summary for people: a Markdown report (the Kubeflow UI) and an HTML page.

The page is the project's one page shell (``components.pages``): figures, the shards, the
predicted classes as a chart, the metrics where labels were given, the images that failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from components import charts, markdown, pages
from components.batch_predict.join import BatchSummary, Joined
from components.batch_predict.run import REPORT_HTML, REPORT_MD
from components.batch_predict.score import ShardResult
from trainer import storage

# Images that failed, named one by one on the page and in the report (all are in summary.json's counts).
SHOWN_FAILURES = 20
SHOWN_CLASSES = 20


def _money(value: Any) -> str:
    return "n/a" if value is None else f"${value:,.4f}"


def figures(s: BatchSummary) -> list[tuple[str, str]]:
    """(label, value) of the headline figures, in the order both renderings show them."""
    ipd = "n/a (free)" if s.images_per_dollar is None else f"{s.images_per_dollar:,.0f}"
    unreadable = f", {s.failed_images:,} unreadable" if s.failed_images else ""
    rows = [
        ("model", s.model),
        ("images scored", f"{s.scored:,} of {s.images:,}{unreadable}"),
        ("shards", f"{s.shards_ok} of {s.shards} finished"),
        ("images/s per shard", f"{s.images_per_sec:,.1f}"),
        ("billed time", f"{s.billed_s:,.1f} s (start-up included)"),
        ("cost", _money(s.cost) + (f" (estimated {_money(s.estimate_cost)})" if s.estimate_cost is not None else "")),
        ("images per dollar", ipd),
    ]
    rows += [(name, f"{value:.4f}") for name, value in s.metrics.items()]
    return rows


def _shard_rows(shards: Sequence[ShardResult]) -> list[list[str]]:
    return [
        [f"{r.index:05d}", r.status, f"{r.images:,}", f"{r.scored:,}", f"{r.failed_images:,}",
         f"{r.images_per_sec:,.1f}", f"{r.billed_s:,.1f}", _money(r.cost)]
        for r in shards
    ]  # fmt: skip


SHARD_HEADS = ["shard", "status", "images", "scored", "unreadable", "images/s", "billed s", "cost"]


def render_markdown(s: BatchSummary, shards: Sequence[ShardResult], failures: Sequence[dict[str, Any]]) -> str:
    """The report as Markdown."""
    lines = ["# Batch prediction", ""]
    lines += markdown.table(["", ""], [[k, v] for k, v in figures(s)], "ll")
    if s.failed_shards:
        lines += ["", "**Incomplete**: these shards left no predictions; run the same prediction again.", ""]
        lines += markdown.table(["shard", "reason"], [[f["shard"], f["reason"]] for f in s.failed_shards], "ll")
    lines += ["", "## Shards", ""]
    lines += markdown.table(SHARD_HEADS, _shard_rows(shards), "llrrrrrr")
    if s.class_counts:
        lines += ["", "## Predicted classes", ""]
        top = list(s.class_counts.items())[:SHOWN_CLASSES]
        lines += markdown.table(["class", "predictions"], [[k, f"{v:,}"] for k, v in top], "lr")
    if failures:
        lines += ["", f"## Unreadable images ({s.failed_images:,})", ""]
        rows = [[f["path"], f["reason"]] for f in failures[:SHOWN_FAILURES]]
        lines += markdown.table(["image", "reason"], rows, "ll")
    return "\n".join(lines) + "\n"


def render_html(s: BatchSummary, shards: Sequence[ShardResult], failures: Sequence[dict[str, Any]]) -> str:
    """The report as a self-contained HTML page."""
    blocks: list[Any] = [pages.table(["", ""], [list(r) for r in figures(s)], left=2)]
    if s.failed_shards:
        blocks.append(pages.fragment("<h2>Incomplete</h2><p>These shards left no predictions; run again.</p>"))
        blocks.append(pages.table(["shard", "reason"], [[f["shard"], f["reason"]] for f in s.failed_shards], left=2))
    blocks.append(pages.fragment("<h2>Shards</h2>"))
    classes = ["" if r.status == "ok" else "failed" for r in shards]
    blocks.append(pages.table(SHARD_HEADS, _shard_rows(shards), left=2, classes=classes))
    if s.class_counts:
        top = list(s.class_counts.items())[:SHOWN_CLASSES]
        chart = charts.bar_chart("Predicted classes", [k for k, _ in top], [float(v) for _, v in top], "predictions")
        blocks.append(pages.Markup(chart))
    if failures:
        blocks.append(pages.fragment("<h2>Unreadable images ({{ n }})</h2>", n=f"{s.failed_images:,}"))
        rows = [[f["path"], f["reason"]] for f in failures[:SHOWN_FAILURES]]
        blocks.append(pages.table(["image", "reason"], rows, left=2))
    return pages.page("Batch prediction", blocks, pages.GRID_CSS)


def write_reports(output_uri: str, joined: Joined) -> tuple[str, str]:
    """Writes ``report.md`` and ``report.html`` under ``output_uri``; returns their texts."""
    md = render_markdown(joined.summary, joined.shards, joined.failures)
    html = render_html(joined.summary, joined.shards, joined.failures)
    storage.write_text(storage.join(output_uri, REPORT_MD), md)
    storage.write_text(storage.join(output_uri, REPORT_HTML), html)
    return md, html
