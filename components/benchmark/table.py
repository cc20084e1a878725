"""Joined benchmark tables (Markdown) and charts (self-contained HTML with inline SVG).

Two reports, both plain Python (no TensorFlow, no JavaScript, nothing fetched from a CDN, so the
Kubeflow UI shows them offline):

- the case study's inference table: accelerator, cores, time, images/s, $/hour, images/$, with
  the fastest and the cheapest (most images per dollar) marked;
- the GPU-vs-TPU notebook's two training tables: epoch time (s) and step time per example (us)
  per batch size and accelerator.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any, Optional

_COLOURS = ("#1a73e8", "#e8710a", "#188038", "#d93025", "#9334e6", "#12b5cb", "#f9ab00", "#5f6368")


def _num(value: Optional[float], fmt: str = ",.2f") -> str:
    return "n/a" if value is None else format(value, fmt)


_INT_KEYS = ("cores", "num_images", "batch_size", "http_num_images", "http_batch_size")


def _restore_ints(row: Mapping[str, Any]) -> dict[str, Any]:
    # Rows collected over a ParallelFor come back with ints as floats (kfp's dsl.Collected).
    out = dict(row)
    for key in _INT_KEYS:
        if isinstance(out.get(key), float) and out[key].is_integer():
            out[key] = int(out[key])
    return out


def mark_best(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Copies the rows and sets ``fastest`` and ``cheapest`` on the best ones.

    Fastest: the most images/s. Cheapest: the most images per dollar (free hardware, with no
    images/$ figure, is not ranked). Ties mark every tied row.

    Args:
        rows: benchmark result rows with ``images_per_sec`` and ``images_per_dollar``.

    Returns:
        New dicts with boolean ``fastest`` and ``cheapest`` keys.
    """
    out = [_restore_ints(r) for r in rows]
    if not out:
        return out
    best_speed = max(r["images_per_sec"] for r in out)
    priced = [r["images_per_dollar"] for r in out if r.get("images_per_dollar") is not None]
    best_value = max(priced) if priced else None
    for r in out:
        r["fastest"] = r["images_per_sec"] == best_speed
        r["cheapest"] = best_value is not None and r.get("images_per_dollar") == best_value
    return out


def best_of(rows: Sequence[Mapping[str, Any]]) -> dict[str, Optional[str]]:
    """Names the fastest and the cheapest accelerator (the first of ties; None when unknown)."""
    marked = mark_best(rows)
    fastest = next((r["accelerator"] for r in marked if r["fastest"]), None)
    cheapest = next((r["accelerator"] for r in marked if r["cheapest"]), None)
    return {"fastest": fastest, "cheapest": cheapest}


def _notes(row: Mapping[str, Any]) -> str:
    return ", ".join(n for n, on in (("fastest", row.get("fastest")), ("cheapest", row.get("cheapest"))) if on)


def render_markdown(rows: Sequence[Mapping[str, Any]], title: str = "Inference benchmark") -> str:
    """The case study's table as Markdown, best rows marked.

    Args:
        rows: benchmark result rows (``components.benchmark.run.run_benchmark``).
        title: the heading.

    Returns:
        Markdown text.
    """
    rows = mark_best(rows)
    if not rows:
        return f"# {title}\n\nNo results.\n"
    first = rows[0]
    lines = [
        f"# {title}",
        "",
        f"{first['num_images']:,} images in batches of {first['batch_size']} per accelerator, "
        "through the exported SavedModel, warm-up excluded.",
        "",
        "| accelerator | cores | time (s) | images/s | $/hour | images/$ | |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        name = f"**{r['label']}**" if r["fastest"] or r["cheapest"] else r["label"]
        lines.append(
            f"| {name} | {r['cores']} | {_num(r['time_s'])} | {_num(r['images_per_sec'])} | "
            f"{_num(r['price_per_hour'])} | {_num(r.get('images_per_dollar'), ',.0f')} | {_notes(r)} |"
        )
    estimates = sorted({r["label"] for r in rows if str(r.get("price_source", "")).startswith("estimate")})
    if estimates:
        lines += ["", f"Prices marked as estimates (not from the case study): {', '.join(estimates)}."]
    if any("http_images_per_sec" in r for r in rows):
        lines += [
            "",
            "Served path (REST):",
            "",
            "| accelerator | images/s | p50 (ms) | p95 (ms) | p99 (ms) | HTTP / in-process time |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            if "http_images_per_sec" in r:
                lines.append(
                    f"| {r['label']} | {_num(r['http_images_per_sec'])} | {_num(r['http_latency_p50_ms'])} | "
                    f"{_num(r['http_latency_p95_ms'])} | {_num(r['http_latency_p99_ms'])} | "
                    f"{_num(r['http_overhead'])}x |"
                )
    return "\n".join(lines) + "\n"


def svg_bar_chart(
    title: str, labels: Sequence[str], values: Sequence[Optional[float]], unit: str, width: int = 640
) -> str:
    """A horizontal bar chart as an inline ``<svg>`` element.

    Args:
        title: shown above the bars.
        labels: one per bar.
        values: one per bar; None draws no bar and writes n/a.
        unit: appended to the value labels.
        width: the chart's width in pixels.

    Returns:
        The SVG markup.
    """
    bar_h, gap, left, top = 22, 8, 170, 30
    height = top + len(labels) * (bar_h + gap) + 10
    peak = max([v for v in values if v is not None] or [1.0]) or 1.0
    span = width - left - 120
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{html.escape(title)}" font-family="sans-serif" font-size="12">',
        f'<text x="0" y="18" font-size="14" font-weight="bold">{html.escape(title)}</text>',
    ]
    for i, (label, value) in enumerate(zip(labels, values, strict=True)):
        y = top + i * (bar_h + gap)
        parts.append(f'<text x="{left - 6}" y="{y + 15}" text-anchor="end">{html.escape(label)}</text>')
        if value is None:
            parts.append(f'<text x="{left + 4}" y="{y + 15}">n/a</text>')
            continue
        w = max(1.0, value / peak * span)
        colour = _COLOURS[i % len(_COLOURS)]
        parts.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{colour}"/>')
        parts.append(f'<text x="{left + w + 4:.1f}" y="{y + 15}">{value:,.2f} {html.escape(unit)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def svg_grouped_bars(
    title: str,
    groups: Sequence[str],
    series: Mapping[str, Sequence[Optional[float]]],
    unit: str,
    width: int = 640,
) -> str:
    """Vertical bars grouped by ``groups`` (e.g. batch sizes), one colour per series (accelerator).

    Args:
        title: shown above the chart.
        groups: group labels along the x axis.
        series: series name -> one value per group (None for missing).
        unit: the y axis unit.
        width: the chart's width in pixels.

    Returns:
        The SVG markup.
    """
    height, top, bottom, left = 300, 40, 40, 50
    plot_h = height - top - bottom
    names = list(series)
    peak = max([v for vals in series.values() for v in vals if v is not None] or [1.0]) or 1.0
    group_w = (width - left - 10) / max(1, len(groups))
    bar_w = max(4.0, (group_w - 20) / max(1, len(names)))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 20 * len(names)}" '
        f'role="img" aria-label="{html.escape(title)}" font-family="sans-serif" font-size="12">',
        f'<text x="0" y="18" font-size="14" font-weight="bold">{html.escape(title)}</text>',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{width - 10}" y2="{top + plot_h}" stroke="#888"/>',
        f'<text x="4" y="{top + 10}">{html.escape(unit)}</text>',
    ]
    for g, group in enumerate(groups):
        gx = left + g * group_w + 10
        parts.append(
            f'<text x="{gx + group_w / 2 - 10:.1f}" y="{top + plot_h + 18}" text-anchor="middle">'
            f"{html.escape(str(group))}</text>"
        )
        for s, name in enumerate(names):
            value = series[name][g]
            if value is None:
                continue
            h = value / peak * (plot_h - 20)
            x, y = gx + s * bar_w, top + plot_h - h
            colour = _COLOURS[s % len(_COLOURS)]
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w - 2:.1f}" height="{h:.1f}" fill="{colour}">'
                f"<title>{html.escape(name)}, {html.escape(str(group))}: "
                f"{value:,.2f} {html.escape(unit)}</title></rect>"
            )
            parts.append(
                f'<text x="{x + (bar_w - 2) / 2:.1f}" y="{y - 3:.1f}" text-anchor="middle" font-size="10">'
                f"{value:,.1f}</text>"
            )
    for s, name in enumerate(names):
        y = height + 20 * s
        parts.append(f'<rect x="{left}" y="{y - 10}" width="12" height="12" fill="{_COLOURS[s % len(_COLOURS)]}"/>')
        parts.append(f'<text x="{left + 18}" y="{y}">{html.escape(name)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:16px}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child,th:first-child"
        "{text-align:left}tr.best{font-weight:bold}</style></head><body>\n"
        f"<h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n"
    )


def render_html(rows: Sequence[Mapping[str, Any]], title: str = "Inference benchmark") -> str:
    """The inference table and two bar charts (images/s, images/$) as one self-contained page."""
    rows = mark_best(rows)
    head = (
        "<tr>"
        + "".join(
            f"<th>{html.escape(h)}</th>"
            for h in ("accelerator", "cores", "time (s)", "images/s", "$/hour", "images/$", "")
        )
        + "</tr>"
    )
    body_rows = []
    for r in rows:
        cls = ' class="best"' if r["fastest"] or r["cheapest"] else ""
        body_rows.append(
            f"<tr{cls}><td>{html.escape(r['label'])}</td><td>{r['cores']}</td><td>{_num(r['time_s'])}</td>"
            f"<td>{_num(r['images_per_sec'])}</td><td>{_num(r['price_per_hour'])}</td>"
            f"<td>{_num(r.get('images_per_dollar'), ',.0f')}</td><td>{html.escape(_notes(r))}</td></tr>"
        )
    labels = [r["label"] for r in rows]
    body = (
        f"<table>{head}{''.join(body_rows)}</table>\n"
        + svg_bar_chart("Throughput (higher is faster)", labels, [r["images_per_sec"] for r in rows], "images/s")
        + "\n<br/>\n"
        + svg_bar_chart(
            "Images per dollar (higher is cheaper)", labels, [r.get("images_per_dollar") for r in rows], "images/$"
        )
    )
    return _page(title, body)


# --------------------------------------------------------------------------- training sweep


def sweep_tables(sweeps: Sequence[Mapping[str, Any]]) -> tuple[list[int], list[str], dict[str, dict[int, dict]]]:
    """Indexes sweep results by accelerator and batch size.

    Args:
        sweeps: one dict per accelerator: ``accelerator`` (a name) and ``results`` (the list
            ``trainer.benchmark.training_sweep`` returns).

    Returns:
        (sorted batch sizes, accelerator names in order, name -> batch size -> result).
    """
    by_acc: dict[str, dict[int, dict]] = {}
    for sweep in sweeps:
        results = {}
        for r in sweep["results"]:
            r = dict(r)
            for key in ("batch_size", "steps_per_epoch", "examples_per_epoch"):
                r[key] = int(r[key])  # dsl.Collected turns ints into floats
            results[r["batch_size"]] = r
        by_acc[str(sweep["accelerator"])] = results
    sizes = sorted({b for results in by_acc.values() for b in results})
    return sizes, list(by_acc), by_acc


def render_sweep_markdown(sweeps: Sequence[Mapping[str, Any]], title: str = "GPU vs TPU training sweep") -> str:
    """The notebook's two tables: epoch time (s) and step time per example (us), first epoch excluded."""
    sizes, names, by_acc = sweep_tables(sweeps)
    lines = [f"# {title}", "", "The first (compiling) epoch is excluded from every figure.", ""]
    for heading, key, fmt in (
        ("Epoch time (s)", "epoch_time_s", ".2f"),
        ("Step time per example (us)", "step_time_per_example_us", ".1f"),
    ):
        lines += [f"## {heading}", "", "| batch size | " + " | ".join(names) + " |", "|---:|" + "---:|" * len(names)]
        for size in sizes:
            cells = [_num(by_acc[n].get(size, {}).get(key), fmt) for n in names]
            lines.append(f"| {size} | " + " | ".join(cells) + " |")
        lines.append("")
    details = []
    for n in names:
        for size in sizes:
            r = by_acc[n].get(size)
            if r:
                details.append(
                    f"- {n}, batch {size}: ran on {r.get('accelerator', '?')}, {r['steps_per_epoch']} steps "
                    f"({r['examples_per_epoch']:,} examples) per epoch, epoch times "
                    + ", ".join(f"{t:.2f}" for t in r["epoch_times_s"])
                    + " s"
                )
    lines += ["## Runs", "", *details]
    return "\n".join(lines) + "\n"


def render_sweep_html(sweeps: Sequence[Mapping[str, Any]], title: str = "GPU vs TPU training sweep") -> str:
    """Both sweep charts (grouped by batch size, one colour per accelerator) as one page."""
    sizes, names, by_acc = sweep_tables(sweeps)
    groups = [f"batch {s}" for s in sizes]
    charts = []
    for heading, key, unit in (
        ("Epoch time (lower is faster)", "epoch_time_s", "s"),
        ("Step time per example (lower is faster)", "step_time_per_example_us", "us"),
    ):
        series = {n: [by_acc[n].get(s, {}).get(key) for s in sizes] for n in names}
        charts.append(svg_grouped_bars(heading, groups, series, unit))
    return _page(title, "<p>The first (compiling) epoch is excluded.</p>\n" + "\n<br/>\n".join(charts))
