"""The selection for people: a Markdown report (the Kubeflow UI) and an HTML page (the project's one
page shell, ``components.pages``) with the picks drawn: each image with the boxes or the class the
model proposes, its score and why it was picked.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import Any

from components import markdown, pages
from components.select.result import Pick, SelectionResult
from components.select.run import REPORT_HTML, REPORT_MD
from trainer import storage

# Picks drawn on the page (all of them are in its table and in selection.json).
SHOWN = 48
# The drawn images' longer side, in pixels.
DRAWN_PX = 192
_BOX = (220, 40, 40)
_CSS = (
    pages.GRID_CSS
    + ".grid{display:flex;flex-wrap:wrap;gap:12px}figure{margin:0;width:200px}figure img{max-width:200px;"
    "image-rendering:pixelated}figcaption{font-size:12px}"
)
_FIGURE = (
    '<figure><img src="{{ uri }}" alt="{{ path }}"><figcaption><b>#{{ rank }}</b> score {{ score }}'
    "{% if label %}, proposed {{ label }}{% endif %}<br>{{ reason }}</figcaption></figure>"
)


def figures(s: SelectionResult) -> list[tuple[str, str]]:
    """(label, value) of the headline figures, in the order both renderings show them."""
    rows = [
        ("model", f"{s.model.label} ({s.model.task})"),
        ("pool", f"{s.pool:,} images in {s.data}, {s.scored:,} scored, {s.unreadable:,} unreadable"),
        ("strategy", f"{s.strategy} (scores: {s.scored_by}), seed {s.seed}"),
        ("diversity", f"{s.diversity}: near-copies within {s.near_bits} bits, {s.near_copies:,} passed over"),
        ("picked", f"{len(s.picks):,} of {s.count:,} asked"),
        ("wall time", f"{s.seconds:,.1f} s"),
    ]
    if s.dataset:
        rows.insert(2, ("left out", f"{s.labelled:,} images already in {s.dataset}"))
    return rows


def _proposed(pick: Pick) -> str:
    if pick.label is not None:
        return f"{pick.label} {pick.label_score or 0.0:.2f}"
    return f"{len(pick.boxes)} box{'' if len(pick.boxes) == 1 else 'es'}"


def _rows(s: SelectionResult) -> list[list[Any]]:
    return [[p.rank, p.path, f"{p.score:.3f}", _proposed(p), p.reason] for p in s.picks]


HEADS = ["#", "image", "score", "proposed", "why"]


def render_markdown(s: SelectionResult) -> str:
    """The report as Markdown."""
    lines = ["# Images to label", ""]
    lines += markdown.table(["", ""], [[k, v] for k, v in figures(s)], "ll")
    lines += ["", "## The picks", ""]
    lines += markdown.table(HEADS, [[str(c) for c in row] for row in _rows(s)], "rlrll")
    return "\n".join(lines) + "\n"


def draw(encoded: bytes, pick: Pick) -> bytes:
    """The image at ``DRAWN_PX`` on its longer side with the proposed boxes (red, class and score), as PNG."""
    from PIL import Image, ImageDraw, ImageFont

    with Image.open(io.BytesIO(encoded)) as opened:
        image = opened.convert("RGB")
    scale = DRAWN_PX / max(image.width, image.height)
    size = (max(1, round(image.width * scale)), max(1, round(image.height * scale)))
    image = image.resize(size, Image.NEAREST if scale >= 1 else Image.LANCZOS)
    canvas, font = ImageDraw.Draw(image), ImageFont.load_default(size=11)
    for box in pick.boxes:
        x0, y0, x1, y1 = (v * scale for v in box["box"])
        canvas.rectangle([x0, y0, x1, y1], outline=_BOX, width=2)
        text = f"{box['class']} {box['score']:.2f}"
        left, top, right, bottom = canvas.textbbox((0, 0), text, font=font)
        tx, ty = min(max(0.0, x0), size[0] - (right - left) - 4), min(max(0.0, y1 + 1), size[1] - (bottom - top) - 2)
        canvas.rectangle([tx, ty, tx + right - left + 4, ty + bottom - top + 2], fill=_BOX)
        canvas.text((tx + 2 - left, ty + 1 - top), text, fill=(255, 255, 255), font=font)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def render_html(s: SelectionResult, images: Sequence[bytes]) -> str:
    """The report as a self-contained HTML page, the first :data:`SHOWN` picks drawn."""
    blocks: list[Any] = [pages.table(["", ""], [list(r) for r in figures(s)], left=2)]
    drawn = []
    for pick, data in list(zip(s.picks, images, strict=True))[:SHOWN]:
        uri = "data:image/png;base64," + base64.b64encode(draw(data, pick)).decode("ascii")
        label = "" if pick.label is None else f"{pick.label} {pick.label_score or 0.0:.2f}"
        drawn.append(
            pages.fragment(
                _FIGURE, uri=uri, path=pick.path, rank=pick.rank, score=f"{pick.score:.3f}", label=label,
                reason=pick.reason,
            )
        )  # fmt: skip
    if drawn:
        more = f" (the first {SHOWN} of {len(s.picks):,})" if len(s.picks) > SHOWN else ""
        blocks.append(pages.fragment("<h2>The picks{{ more }}</h2>", more=more))
        blocks.append(pages.fragment('<div class="grid">{{ figures | join }}</div>', figures=drawn))
    blocks.append(pages.fragment("<h2>Every pick</h2>"))
    blocks.append(pages.table(HEADS, _rows(s), left=2))
    return pages.page("Images to label", blocks, _CSS)


def write_reports(output_uri: str, s: SelectionResult, images: Sequence[bytes]) -> tuple[str, str]:
    """Writes ``report.md`` and ``report.html`` under ``output_uri``; returns their texts."""
    md, html = render_markdown(s), render_html(s, images)
    storage.write_text(storage.join(output_uri, REPORT_MD), md)
    storage.write_text(storage.join(output_uri, REPORT_HTML), html)
    return md, html


def read_reports(output_uri: str) -> tuple[str, str]:
    """``report.md`` and ``report.html`` as a selection wrote them under ``output_uri``."""
    return storage.read_text(storage.join(output_uri, REPORT_MD)), storage.read_text(
        storage.join(output_uri, REPORT_HTML)
    )
