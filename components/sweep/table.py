"""The sweep's tables: one row per grid cell (repeats folded into mean and spread), priced.

From the cells' results (``CellResult``) and the price table: per cell the accelerator, image
size, epochs, global batch and batch per replica, fit and billed time, epoch time, examples/s, the
task's quality (mAP@0.5 and AP for detection, accuracy for classification), the cost on the billed
time (accelerator hours x price, plus the host's where the price table names one) and quality per
dollar; the best quality, the fastest and the cheapest marked; failed cells as rows with their
reason. The per-accelerator cost view is the same rows grouped by setting. Markdown and one
self-contained HTML page (with the quality-against-time chart). Plain Python, no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

from components import markdown, pages
from components.pages import Markup
from components.sweep.cell import CellResult, quality_label, quality_metrics
from components.sweep.grid import GridError
from trainer import records
from trainer.budget.pricing import AcceleratorPrice, PriceTableError, hourly_cost


@dataclasses.dataclass(frozen=True)
class Quality(records.Record):
    """One quality metric over a cell's repeats.

    Attributes:
        mean: the mean over the repeats that finished.
        spread: the sample standard deviation; None with one repeat.
    """

    _error = GridError

    mean: float
    spread: Optional[float] = None


def _mean(values: Sequence[Optional[float]]) -> Optional[float]:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


@dataclasses.dataclass(frozen=True)
class GridRow(records.Record):
    """One grid cell in the tables: repeats folded, priced.

    Its JSON is every field, quality as ``{metric: {mean, spread}}``.

    Attributes:
        name: the cell's name.
        accelerator: the price table key it ran under.
        image_size: the detector's input side; None for the model's.
        epochs: epochs trained.
        global_batch_size: examples per step (the cell's request when it never ran).
        batch_size_per_replica: examples per replica per step.
        replicas: replicas in sync; None when no repeat finished.
        runs: repeats asked for.
        finished: repeats that finished (``ok``).
        status: ``ok`` (all finished), ``partial`` (some) or ``failed`` (none).
        reason: the failure reasons, one per failed repeat; None when all finished.
        task: the task; None when no repeat got that far.
        fit_s: mean fit time of the finished repeats.
        billed_s: mean billed time over the repeats with a billed time (failed ones too).
        epoch_s: mean steady epoch time.
        examples_per_sec: mean training throughput.
        quality: metric -> mean and spread over the finished repeats (the task's metrics only).
        price_per_hour: the accelerator's $/hour; None when the price table has no entry.
        host_price_per_hour: the host's $/hour added (0 when none is needed).
        price_note: the price's source, or why there is none.
        cost: dollars for one run (mean billed time x the hourly prices); None without a price.
        quality_per_dollar: the first quality metric's mean per dollar.
        best_quality: the highest first quality metric of the table.
        fastest: the shortest billed time of the finished cells.
        cheapest: the lowest cost of the finished cells.
    """

    _error = GridError
    _what = "grid row"

    name: str
    accelerator: str
    image_size: Optional[int]
    epochs: int
    global_batch_size: Optional[int]
    batch_size_per_replica: int
    replicas: Optional[int]
    runs: int
    finished: int
    status: str
    reason: Optional[str]
    task: Optional[str]
    fit_s: Optional[float]
    billed_s: Optional[float]
    epoch_s: Optional[float]
    examples_per_sec: Optional[float]
    quality: dict[str, Quality]
    price_per_hour: Optional[float]
    host_price_per_hour: float
    price_note: str
    cost: Optional[float]
    quality_per_dollar: Optional[float]
    best_quality: bool = False
    fastest: bool = False
    cheapest: bool = False

    @property
    def notes(self) -> str:
        """``best quality``, ``fastest``, ``cheapest`` (those that apply) for the last column."""
        marks = (("best quality", self.best_quality), ("fastest", self.fastest), ("cheapest", self.cheapest))
        return ", ".join(n for n, on in marks if on)


Results = Sequence[Union[CellResult, Mapping[str, Any]]]


def _price(table: Mapping[str, AcceleratorPrice], accelerator: str) -> tuple[Optional[float], float, str]:
    try:
        price, host = hourly_cost(table, accelerator)
    except PriceTableError:
        # A cell priced under a name the table lacks still gets its row; the note says why no cost.
        return None, 0.0, f"no price for {accelerator!r}"
    entry = table[accelerator]
    source = entry.source + (f", host {entry.host} added" if entry.host else "")
    return price, host, source


def _group(name: str, results: list[CellResult], table: Mapping[str, AcceleratorPrice]) -> GridRow:
    cell = results[0].cell
    done = [r for r in results if r.status == "ok"]
    failed = [r for r in results if r.status != "ok"]
    task = next((r.task for r in done), None)
    quality: dict[str, Quality] = {}
    for metric in quality_metrics(task):
        values = [r.metrics[metric] for r in done if metric in r.metrics]
        if values:
            quality[metric] = Quality(statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None)
    billed = _mean([r.billed_s for r in results])
    price, host, note = _price(table, cell.accelerator)
    cost = None if price is None or billed is None else billed / 3600.0 * (price + host)
    first = next(iter(quality.values()), None)
    per_dollar = None if first is None or not cost else first.mean / cost
    reasons = [
        r.reason
        if r.status == "failed"
        else "did not finish: the task ended before the cell wrote its result "
        "(killed: out of memory, or a preempted TPU out of retries)"
        for r in failed
    ]
    return GridRow(
        name=name,
        accelerator=cell.accelerator,
        image_size=cell.image_size,
        epochs=cell.epochs,
        global_batch_size=next((r.global_batch_size for r in done), cell.global_batch_size),
        batch_size_per_replica=cell.batch_size_per_replica,
        replicas=next((r.replicas for r in done), None),
        runs=len(results),
        finished=len(done),
        status="ok" if not failed else ("partial" if done else "failed"),
        reason="; ".join(str(r) for r in reasons) if reasons else None,
        task=task,
        fit_s=_mean([r.fit_s for r in done]),
        billed_s=billed,
        epoch_s=_mean([r.epoch_s for r in done]),
        examples_per_sec=_mean([r.examples_per_sec for r in done]),
        quality=quality,
        price_per_hour=price,
        host_price_per_hour=host,
        price_note=note,
        cost=cost,
        quality_per_dollar=per_dollar,
    )


def build_rows(results: Results, price_table: Mapping[str, AcceleratorPrice]) -> list[GridRow]:
    """Folds the cells' results into one row per cell name, priced, the best ones marked.

    Best quality: the highest mean of the task's first metric (ap50, accuracy). Fastest: the
    shortest billed time. Cheapest: the lowest cost. Only cells with at least one finished repeat
    are ranked; ties mark every tied row.

    Args:
        results: the cells' results, typed or as JSON (the rows the join read).
        price_table: ``trainer.budget.pricing.load_price_table()``.

    Returns:
        One row per cell name, in the order the cells first appear.
    """
    groups: dict[str, list[CellResult]] = {}
    for r in (x if isinstance(x, CellResult) else CellResult.from_dict(x) for x in results):
        groups.setdefault(r.cell.name, []).append(r)
    rows = [_group(name, rs, price_table) for name, rs in groups.items()]
    ranked = [r for r in rows if r.finished]

    def best(key, pick):
        values = [key(r) for r in ranked if key(r) is not None]
        return pick(values) if values else None

    top = best(lambda r: next(iter(r.quality.values())).mean if r.quality else None, max)
    quick = best(lambda r: r.billed_s, min)
    cheap = best(lambda r: r.cost, min)
    return [
        dataclasses.replace(
            r,
            best_quality=bool(r.finished and r.quality and next(iter(r.quality.values())).mean == top),
            fastest=bool(r.finished and r.billed_s is not None and r.billed_s == quick),
            cheapest=bool(r.finished and r.cost is not None and r.cost == cheap),
        )
        for r in rows
    ]


def duration(seconds: Optional[float]) -> str:
    """``5h 44min``, ``1min 39s``, ``12.3 s``: the case study's way of writing times."""
    if seconds is None:
        return "n/a"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes = int(round(seconds)) // 60
    if minutes < 60:
        return f"{minutes}min {int(round(seconds)) % 60:02d}s"
    return f"{minutes // 60}h {minutes % 60:02d}min"


def _num(value: Optional[float], fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def _quality_names(rows: Sequence[GridRow]) -> list[str]:
    task = next((r.task for r in rows if r.task), None)
    return list(quality_metrics(task))


def _quality_cell(q: Optional[Quality]) -> str:
    if q is None:
        return "n/a"
    return f"{q.mean:.3f}" + ("" if q.spread is None else f" ± {q.spread:.3f}")


_HEAD = (
    "cell",
    "accelerator",
    "image size",
    "epochs",
    "global batch (per replica)",
    "fit time",
    "billed time",
    "epoch time",
    "examples/s",
)


def _cells(r: GridRow, metrics: Sequence[str]) -> list[str]:
    per_replica = f"{r.global_batch_size if r.global_batch_size is not None else 'n/a'} ({r.batch_size_per_replica})"
    out = [
        r.name,
        r.accelerator,
        "model's" if r.image_size is None else str(r.image_size),
        str(r.epochs),
        per_replica,
        duration(r.fit_s),
        duration(r.billed_s),
        duration(r.epoch_s),
        _num(r.examples_per_sec, ",.1f"),
        *(_quality_cell(r.quality.get(m)) for m in metrics),
        _num(r.cost, ",.4f"),
        _num(r.quality_per_dollar, ",.2f"),
    ]
    if r.status == "failed":
        note = f"failed: {r.reason}"
    elif r.status == "partial":
        note = f"{r.finished} of {r.runs} finished ({r.reason}); " + r.notes
    else:
        note = r.notes + (f" ({r.runs} repeats)" if r.runs > 1 else "")
    return [*out, note.strip("; ")]


def _headers(metrics: Sequence[str]) -> list[str]:
    labels = [quality_label(m) for m in metrics]
    per_dollar = f"{labels[0]} per $" if labels else "quality per $"
    return [*_HEAD, *labels, "cost ($)", per_dollar, ""]


# The cost view's columns (Markdown and HTML).
_COST_HEAD = ("accelerator", "cell", "billed time", "cost ($)")
NO_COST_VIEW = "No setting (image size, epochs) ran on more than one accelerator."


def cost_views(rows: Sequence[GridRow]) -> list[tuple[str, list[GridRow]]]:
    """The case study's per-accelerator cost table: rows grouped by setting (image size, epochs).

    Each group is the same model and epochs on each accelerator it ran on, cheapest first; only
    settings run on two or more accelerators make a group.
    """
    by_setting: dict[tuple[Optional[int], int], list[GridRow]] = {}
    for r in rows:
        if r.finished:
            by_setting.setdefault((r.image_size, r.epochs), []).append(r)
    views = []
    for (size, epochs), group in by_setting.items():
        if len({r.accelerator for r in group}) < 2:
            continue  # a setting run on one accelerator compares nothing
        title = f"{epochs} epoch{'s' if epochs != 1 else ''}" + ("" if size is None else f", image size {size}")
        views.append((title, sorted(group, key=lambda r: (r.cost is None, r.cost or 0.0))))
    return views


def render_grid_markdown(rows: Sequence[GridRow], title: str = "Training grid") -> str:
    """The grid's table, then the per-accelerator cost view, as Markdown."""
    if not rows:
        return f"# {title}\n\nNo cells.\n"
    metrics = _quality_names(rows)
    heads = _headers(metrics)
    lines = [
        f"# {title}",
        "",
        "Billed time: the cell's whole process (start-up, the compiling first epoch, the fit, export "
        "and evaluation on the test split); cost = billed hours x the price table's $/hour (plus the "
        "host's where the table names one). Every cell is scored on the same test split. Epoch time "
        "and examples/s leave the first (compiling) epoch out when a cell trains two or more epochs.",
        "",
        *markdown.table(heads, [_cells(r, metrics) for r in rows], "ll" + "r" * (len(heads) - 3) + "l"),
    ]
    estimates = sorted({f"{r.accelerator} ({r.price_note})" for r in rows if not r.price_note.startswith("case")})
    if estimates:
        lines += ["", "Prices: " + "; ".join(estimates) + "."]
    lines += ["", "## Cost per accelerator", ""]
    views = cost_views(rows)
    if not views:
        lines += [NO_COST_VIEW, ""]
    for heading, group in views:
        body = [[r.accelerator, r.name, duration(r.billed_s), _num(r.cost, ",.4f")] for r in group]
        lines += [f"### {heading}", "", *markdown.table(_COST_HEAD, body, "llrr"), ""]
    return "\n".join(lines).rstrip() + "\n"


def _quality_chart(rows: Sequence[GridRow], metric: str) -> Optional[str]:
    """The finished cells' quality against billed time, marker area the cost; None: nothing to plot."""
    from components import charts

    plotted = [r for r in rows if r.quality and r.billed_s is not None]
    if not plotted:
        return None
    return charts.bubble_chart(
        [r.name for r in plotted],
        [r.billed_s / 60.0 for r in plotted],
        [r.quality[metric].mean for r in plotted],
        [r.cost for r in plotted],
        title="Quality against training time (marker area: cost)",
        x_label="billed time (min)",
        y_label=quality_label(metric),
    )


def render_grid_html(rows: Sequence[GridRow], title: str = "Training grid") -> str:
    """The grid's table, the quality-against-time chart and the cost view as one page."""
    metrics = _quality_names(rows)
    classes = ["failed" if r.status == "failed" else ("best" if r.notes else "") for r in rows]
    blocks: list[Markup] = [pages.table(_headers(metrics), [_cells(r, metrics) for r in rows], classes=classes)]
    chart = _quality_chart(rows, metrics[0]) if metrics else None
    if chart is not None:
        blocks.append(Markup(chart))
    blocks.append(Markup("<h2>Cost per accelerator</h2>"))
    views = cost_views(rows)
    if not views:
        blocks.append(pages.fragment("<p>{{ text }}</p>", text=NO_COST_VIEW))
    for heading, group in views:
        blocks.append(pages.fragment("<h3>{{ heading }}</h3>", heading=heading))
        body = [(r.accelerator, r.name, duration(r.billed_s), _num(r.cost, ",.4f")) for r in group]
        blocks.append(pages.table(_COST_HEAD, body))
    return pages.page(title, blocks, pages.GRID_CSS)


def best_cells(rows: Sequence[GridRow]) -> dict[str, Any]:
    """The join's return value: the best-quality, fastest and cheapest cell names and counts."""
    return {
        "best_quality": next((r.name for r in rows if r.best_quality), None),
        "fastest": next((r.name for r in rows if r.fastest), None),
        "cheapest": next((r.name for r in rows if r.cheapest), None),
        "cells": len(rows),
        "failed": sum(1 for r in rows if r.status == "failed"),
    }


def collect_results(cells: Sequence[Any], rows_root: str) -> list[CellResult]:
    """Each planned cell's row from ``rows_root``; a cell with no row becomes a failed one.

    Args:
        cells: the planned cells (``plan_grid``).
        rows_root: where the cells wrote their rows.

    Returns:
        One result per cell: its row, or ``failed`` with ``no record`` when it never wrote one
        (the task never started, or its pod was lost before Python ran).
    """
    from components.sweep.cell import read_row

    out = []
    for cell in cells:
        row = read_row(rows_root, cell)
        if row is None:
            row = CellResult(
                cell=cell,
                status="failed",
                reason="no record: the cell's task never ran (an earlier step failed, or its pod never started)",
            )
        out.append(row)
    return out
