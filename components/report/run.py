"""The run report: one self-contained HTML page of everything a run produced.

Built in two parts: :mod:`components.report.records` reads the steps' own records (plain files
and dicts: no TensorFlow, no import of another step) into one typed object, and
:mod:`components.report.sections` renders it, each section a Jinja2 template; this module puts
the sections in the project's page shell (:mod:`components.pages`) with the report's style sheet
and writes the page. Every chart is drawn by :mod:`components.charts` (matplotlib, inline SVG)
and every image is a ``data:`` URI: the page loads nothing, runs no script, and opens the same
from a laptop's disk or in the Kubeflow UI's sandboxed frame.

The page knows no task. What a task shows of its dataset, its training and its evaluation (a
classifier's images per class and worst classes, a detector's boxes per class and sizes, losses,
drawn test images) comes with the evaluation: the evaluate step's renderers for the task make
those parts (``samples.json``'s ``sections``, ``components/evaluate/samples.py``), and the page
places them in its sections. A headline figure is the headline of the task the run (or a stage's
model) was made for, which the records name (``task``).

Step status and times exist only where the page is built by the local runner (``make run``): a
step on a cluster cannot see the others' status, so there the section says so.
"""

from __future__ import annotations

import os
from typing import Optional

from components import pages
from components.report import sections
from components.report.records import (
    Failure,
    ReportError,
    ReportInputs,
    RunRecords,
    StepRecord,
    confusion_matrix,
    read_json,
    read_records,
    read_training,
)

__all__ = [
    "Failure",
    "ReportError",
    "ReportInputs",
    "StepRecord",
    "confusion_matrix",
    "read_json",
    "render",
    "training_section",
    "write_report",
]

# The page's style sheet; the task's parts (``components/evaluate/renderers/parts.py``) use its
# classes too: ``cards`` of ``card``, ``charts``, ``muted``.
_CSS = """
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--ok:#1a7f37;--bad:#cf222e;--warn:#9a6700;--bg2:#f6f8fa}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--fg);
margin:0 auto;max-width:1080px;padding:20px 24px 60px}
h1{font-size:24px;margin:0 0 4px}
h2{font-size:18px;margin:28px 0 8px;padding-bottom:4px;border-bottom:1px solid var(--line)}
h3{font-size:15px;margin:16px 0 6px}p{margin:6px 0}.muted{color:var(--muted)}
nav{margin:8px 0 0;font-size:13px}nav a{margin-right:12px;color:#0969da;text-decoration:none}
table{border-collapse:collapse;margin:6px 0 10px;font-variant-numeric:tabular-nums}
th,td{border:1px solid var(--line);padding:3px 8px;text-align:right;vertical-align:top}
th{background:var(--bg2);font-weight:600}td.l,th.l{text-align:left}
.ok{color:var(--ok);font-weight:600}.bad{color:var(--bad);font-weight:600}.warn{color:var(--warn);font-weight:600}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:10px 0}
.card{border:1px solid var(--line);border-radius:8px;padding:8px 12px;min-width:150px;background:#fff}
.card b{display:block;font-size:20px}.card span{color:var(--muted);font-size:12px}
.charts{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}.charts svg{max-width:100%;height:auto}
svg.chart{max-width:100%;height:auto}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(96px,1fr));gap:8px;margin:8px 0}
.tile{border:2px solid var(--ok);border-radius:6px;padding:4px;text-align:center;font-size:11px;line-height:1.25}
.tile.wrong{border-color:var(--bad)}
.tile img{width:56px;height:auto;image-rendering:pixelated;display:block;margin:0 auto 3px}
pre{background:var(--bg2);border:1px solid var(--line);padding:8px;overflow:auto;font-size:12px;max-height:420px}
.banner{border-radius:8px;padding:10px 14px;margin:12px 0;font-weight:600}
.banner.ok{background:#dafbe1;color:var(--ok)}.banner.bad{background:#ffebe9;color:var(--bad)}
ul.reasons{margin:4px 0 8px 18px;padding:0}
"""


def render(inputs: ReportInputs) -> str:
    """The whole page.

    Args:
        inputs: the run's records; missing parts give a section that says what is missing.

    Returns:
        The HTML text (UTF-8, self-contained).

    Raises:
        ReportError: a record is there but is not what its step writes.
    """
    run = read_records(inputs)
    return pages.page(inputs.title, sections.blocks(run), _CSS, heading=False, lang="en", viewport=True)


def training_section(model_dir: Optional[str], task_part: str = "") -> str:
    """The training section alone, from a model folder (``training.json``).

    Args:
        model_dir: the Model folder.
        task_part: the task's part of the section (HTML its renderers made); empty: none.
    """
    run = RunRecords(training=read_training(model_dir), task_parts={"training": task_part})
    return sections.section("training", run)


def write_report(inputs: ReportInputs, path: str) -> int:
    """Renders the page and writes it to ``path`` (local or gs://); returns its size in bytes."""
    from trainer import storage

    data = render(inputs).encode("utf-8")
    if path.startswith("gs://"):
        storage.write_bytes(path, data)
    else:  # a page for people to open: readable by all, as any file the user writes
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return len(data)
