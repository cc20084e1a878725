"""The evaluation page's shell (the ``page`` artifact the Kubeflow UI shows inline), the same for every task.

The page is the gate's verdict with its reasons, then the task's body (its renderers': a
classifier's confusion heatmap, a detector's precision-recall curves and test images). No
scripts, nothing fetched: charts are inline SVG (``components.charts``), images ``data:`` URIs.
"""

from __future__ import annotations

from collections.abc import Sequence

from components import pages
from components.evaluate.gate import Decision
from components.evaluate.report import slice_cells
from components.pages import Markup
from trainer.slices import SliceRow

CSS = (
    "body{font-family:sans-serif;margin:16px;color:#202124}table{border-collapse:collapse;margin:8px 0}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f1f3f4}"
    ".grid{display:flex;flex-wrap:wrap;gap:10px}.grid figure{margin:0;font-size:12px}"
)
_VERDICT = "<h2>{{ verdict }}</h2><ul>{% for r in reasons %}<li>{{ r }}</li>{% endfor %}</ul>"


def slice_block(rows: Sequence[SliceRow]) -> list[Markup]:
    """The slice table, worst first (nothing when the task scored no slices)."""
    if not rows:
        return []
    heads, cells = slice_cells(rows)
    return [pages.fragment("<h2>Slices, worst first</h2>"), pages.table(heads, cells, left=1)]


def evaluation_page(title: str, decision: Decision, body: Sequence[Markup], slices: Sequence[SliceRow] = ()) -> str:
    """The whole page: the title, the verdict and every reason, the slice table, then the task's blocks."""
    verdict = "BLESSED" if decision.blessed else "NOT BLESSED"
    head = pages.fragment(_VERDICT, verdict=verdict, reasons=decision.reasons)
    return pages.page(title, [head, *slice_block(slices), *body], CSS)
