"""The evaluation as a self-contained HTML page (the ``page`` artifact the Kubeflow UI shows inline).

Per task: a classifier's confusion matrix as a heatmap with the per-class table; a detector's
precision-recall curves at IoU 0.5 per class and a handful of test images with the true (green)
and predicted (red, with scores) boxes drawn. No scripts, nothing fetched: charts are inline SVG
(``components.charts``), images are ``data:`` URIs.
"""

from __future__ import annotations

import base64
import io
from typing import Any

from components import charts, pages
from components.evaluate.gate import Decision
from components.pages import Markup

DRAWN_SCORE = 0.5
_CSS = (
    "body{font-family:sans-serif;margin:16px;color:#202124}table{border-collapse:collapse;margin:8px 0}"
    "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f1f3f4}"
    ".grid{display:flex;flex-wrap:wrap;gap:10px}.grid figure{margin:0;font-size:12px}"
)


_VERDICT = "<h2>{{ verdict }}</h2><ul>{% for r in reasons %}<li>{{ r }}</li>{% endfor %}</ul>"
_FIGURE = (
    '<figure><img src="{{ uri }}" alt="test image"><figcaption>{{ truth }} true (green), '
    "{{ shown }} predicted with score >= {{ score }} (red)</figcaption></figure>"
)


def _page(title: str, decision: Decision, body: list[Markup]) -> str:
    verdict = "BLESSED" if decision.blessed else "NOT BLESSED"
    head = pages.fragment(_VERDICT, verdict=verdict, reasons=decision.reasons)
    return pages.page(title, [head, *body], _CSS)


def classification_page(result: Any, decision: Decision, split: str) -> str:
    """The confusion matrix as a heatmap and the per-class table."""
    rows = [[c["name"], f"{c['precision']:.4f}", f"{c['recall']:.4f}", f"{c['f1']:.4f}", c["support"]]
            for c in result.per_class]  # fmt: skip
    body = [
        Markup(charts.heatmap("Confusion matrix", result.confusion, result.class_names, "predicted", "true")),
        pages.table(["class", "precision", "recall", "F1", "support"], rows),
    ]
    return _page(f"Evaluation on the {split} split", decision, body)


def draw_boxes(encoded: bytes, truth: list, predicted: list, class_names: list[str], scale: int = 3) -> str:
    """An image with its true boxes (green) and predicted ones (red, class and score) as a PNG data URI."""
    from PIL import Image, ImageDraw

    image = Image.open(io.BytesIO(encoded)).convert("RGB")
    image = image.resize((image.width * scale, image.height * scale), Image.NEAREST)
    draw = ImageDraw.Draw(image)
    w, h = image.size

    def rect(box):
        y1, x1, y2, x2 = box
        return [x1 * w, y1 * h, x2 * w, y2 * h]

    for box, _label in truth:
        draw.rectangle(rect(box), outline=(0, 170, 0), width=2)
    for box, label, score in predicted:
        r = rect(box)
        draw.rectangle(r, outline=(220, 0, 0), width=1)
        draw.text((r[0] + 2, r[1] + 1), f"{class_names[label]} {score:.2f}", fill=(220, 0, 0))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode("ascii")


def detection_page(result: Any, decision: Decision, split: str) -> str:
    """Precision-recall curves per class and test images with true and predicted boxes."""
    recall = [i / 100 for i in range(101)]
    curves = {
        name: ([r for r, p in zip(recall, values, strict=True) if p >= 0], [p for p in values if p >= 0])
        for name, values in result.pr_curves.items()
        if any(p >= 0 for p in values)
    }
    body = []
    if curves:
        chart = charts.line_chart(
            "Precision-recall at IoU 0.5", curves, "recall", "precision", markers=False, limits=(0, 1)
        )
        body.append(Markup(chart))
    m = result.metrics
    body.append(pages.table(["AP@[.50:.95]", "AP@0.50", "AP@0.75", "AR@100", "images"],
                       [[f"{m['ap']:.4f}", f"{m['ap50']:.4f}", f"{m['ap75']:.4f}", f"{m['ar100']:.4f}",
                         int(m["num_examples"])]]))  # fmt: skip
    per_class = [[c["name"], f"{c['ap']:.4f}", f"{c['ap50']:.4f}", c["instances"]] for c in result.per_class]
    body.append(pages.table(["class", "AP@[.50:.95]", "AP@0.50", "instances"], per_class))
    figures = []
    for ex in result.examples:
        # Only confident detections are drawn: per-class NMS keeps a weak second class on the
        # same object, which clutters a picture (the metrics use them all).
        shown = [d for d in ex["predicted"] if d[2] >= DRAWN_SCORE]
        uri = draw_boxes(base64.b64decode(ex["image"]), ex["truth"], shown, result.class_names)
        figures.append(pages.fragment(_FIGURE, uri=uri, truth=len(ex["truth"]), shown=len(shown), score=DRAWN_SCORE))
    if figures:
        body.append(pages.fragment('<h2>Test images</h2><div class="grid">{{ figures | join }}</div>', figures=figures))
    return _page(f"Detection evaluation on the {split} split", decision, body)
