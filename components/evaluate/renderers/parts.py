"""Pieces of the run report's sections that the task modules build (HTML, values escaped).

The run report's style sheet (``components/report/run.py``) gives these their look: ``cards`` of
``card`` (a figure and its label), ``charts`` (inline SVG side by side), ``muted`` notes; tables
are ``components.pages.table``. They read the records the evaluate step has at hand: the model
folder's ``training.json`` and the dataset's manifest.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Optional

from components import pages
from components.pages import Markup
from trainer import model_folder
from trainer.training.summary import TrainingSummary

_CARDS = (
    '<div class="cards">{% for v, l in items %}<div class="card"><b>{{ v }}</b><span>{{ l }}</span></div>'
    "{% endfor %}</div>"
)


def num(value: Any, spec: str = ",.4f") -> str:
    """A figure for a card or a table: formatted, ``n/a`` for None or a value that is not a finite number."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return "n/a" if value is None else str(value)
    return format(value, spec) if math.isfinite(value) else "n/a"


def cards(items: Sequence[tuple[str, str]]) -> Markup:
    """A row of cards, each ``(figure, label)``."""
    return pages.fragment(_CARDS, items=list(items))


def heading(text: str) -> Markup:
    """A sub-heading inside a section."""
    return pages.fragment("<h3>{{ text }}</h3>", text=text)


def note(text: str) -> Markup:
    """A muted line: what a figure means, or why one is missing."""
    return pages.fragment('<p class="muted">{{ text }}</p>', text=text)


def charts(svgs: Sequence[str]) -> Markup:
    """Charts side by side (``components.charts``' inline SVG)."""
    return Markup('<div class="charts">' + "".join(svgs) + "</div>")


def join(blocks: Sequence[Markup]) -> str:
    """A section's part from its blocks."""
    return "\n".join(str(b) for b in blocks)


def training_record(model_dir: str) -> Optional[dict[str, Any]]:
    """The model folder's ``training.json``, its task figures under ``metrics`` (an earlier version's too); or None."""
    from trainer import storage

    path = model_folder.summary_path(model_dir)
    if not storage.exists(path):
        return None
    data = json.loads(storage.read_bytes(path))
    return {**data, **TrainingSummary.upgrade(data)}
