"""Detection's renderers: its evaluation report, page, image sample and run-report parts.

- report: decision, the COCO metrics (the task's metric table), AP per class, the weakest classes;
- page: precision-recall curves per class, the metrics, and test images with boxes drawn;
- sample: the worst and the best detected test images by per-image F1, true boxes (green) and
  detections (red) drawn with their class names; made from the evaluation's own predictions
  (``DetectionEvaluation.examples``): the model is not run again;
- run report: boxes and images per class and split and the boxes' sizes (dataset), the box and
  class losses and what was fitted to the data (training), AP per class (evaluation).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np

from components import charts, markdown, pages
from components.evaluate import samples
from components.evaluate.gate import Decision
from components.evaluate.page import evaluation_page
from components.evaluate.renderers import Evaluated, Renderers, parts, register
from components.evaluate.report import decision_lines, fmt, slice_lines
from components.pages import Markup
from trainer.tasks.detection.evaluation import EXAMPLE_SCORE, MATCH_IOU, METRICS, DetectionEvaluation
from trainer.tfrecords import DatasetInfo

NAME = "detection"
# Drawn images are this many pixels on their long side (small ones scaled up by whole factors).
DRAWN_PX = 256
# Records whose boxes the run report's dataset part reads per split (the whole split when smaller).
BOXES_READ = 5_000
# Box sizes (square root of the area, in the image's own pixels) the dataset part counts between.
SIZE_EDGES = (0, 8, 16, 32, 64, 128, 256)
_TRUE, _FOUND = (0, 150, 0), (210, 0, 0)
_PER_CLASS_HEAD = ["class", "AP@[.5:.95]", "AP@0.5", "instances"]


def _metric_rows(metrics: Mapping[str, float], baseline: Mapping[str, float]) -> list[list[Any]]:
    """One row per metric of the task's table: its label, value and prod's value."""
    return [[m.title, fmt(metrics.get(m.name)), fmt(baseline.get(m.name))] for m in METRICS]


def render_report(
    result: DetectionEvaluation,
    decision: Decision,
    split: str,
    model_uri: str = "",
    baseline_entry: Optional[Mapping[str, Any]] = None,
    worst: int = 3,
) -> str:
    """Renders a detection evaluation as Markdown: decision, COCO metrics, AP per class, weakest classes.

    Args:
        result: the evaluation result.
        decision: the gate's decision.
        split: the split that was scored.
        model_uri: where the model is (shown for reference).
        baseline_entry: prod's current record for the same model name, or None.
        worst: how many of the weakest classes to list.

    Returns:
        The report text.
    """
    m = result.metrics
    lines = decision_lines(f"Detection evaluation on the {split} split", decision, model_uri, baseline_entry)
    metric_rows = [*_metric_rows(m, decision.baseline or {}), ["images", int(m.get("num_examples", 0)), ""]]
    lines += ["", "## COCO metrics (pycocotools, through the exported model)", ""]
    lines += markdown.table(["metric", "value", "prod"], metric_rows, "lrr")
    lines += ["", "## Per class", "", *markdown.table(_PER_CLASS_HEAD, _per_class_rows(result.per_class), "lrrr")]
    weakest = sorted(result.per_class, key=lambda c: c["ap"])[:worst]
    lines += ["", "## Weakest classes", ""]
    lines += [f"- {c['name']}: AP {c['ap']:.4f} over {c['instances']} instances" for c in weakest]
    lines += slice_lines(result.slice_rows())
    return "\n".join(lines) + "\n"


def _per_class_rows(per_class: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    return [[c["name"], f"{c['ap']:.4f}", f"{c['ap50']:.4f}", c["instances"]] for c in per_class]


# ------------------------------------------------------------------------------------ drawing


def _scaled(image: Any) -> Any:
    """The image at ``DRAWN_PX`` on its long side: small ones by a whole factor (sharp pixels), large ones down."""
    from PIL import Image

    side = max(image.width, image.height)
    if side < DRAWN_PX:
        factor = max(1, DRAWN_PX // side)
        return image.resize((image.width * factor, image.height * factor), Image.NEAREST)
    ratio = DRAWN_PX / side
    return image.resize((max(1, round(image.width * ratio)), max(1, round(image.height * ratio))), Image.LANCZOS)


def _label(draw: Any, size: tuple[int, int], xy: tuple[float, float], text: str, colour: Any, font: Any) -> None:
    """White text on a patch of the colour at ``xy``, moved inside the image where it would leave it."""
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    w, h = right - left + 4, bottom - top + 2
    x = min(max(0.0, xy[0]), size[0] - w)
    y = min(max(0.0, xy[1]), size[1] - h)
    draw.rectangle([x, y, x + w, y + h], fill=colour)
    draw.text((x + 2 - left, y + 1 - top), text, fill=(255, 255, 255), font=font)


def draw_boxes(encoded: bytes, truth: Sequence, predicted: Sequence, class_names: Sequence[str]) -> bytes:
    """The image with its true boxes (green, class name above) and detections (red, class and score below).

    Args:
        encoded: the image's encoded bytes.
        truth: ``[box, label]`` pairs, boxes normalised ``[ymin, xmin, ymax, xmax]``.
        predicted: ``[box, label, score]`` triples.
        class_names: the class names, index = label.

    Returns:
        A PNG (a JPEG for a JPEG source: photos stay small), ``DRAWN_PX`` on its long side.
    """
    from PIL import Image, ImageDraw, ImageFont

    image = _scaled(Image.open(io.BytesIO(encoded)).convert("RGB"))
    draw, font = ImageDraw.Draw(image), ImageFont.load_default(size=11)
    w, h = image.size

    def rect(box: Sequence[float]) -> list[float]:
        y1, x1, y2, x2 = box
        return [x1 * w, y1 * h, x2 * w, y2 * h]

    for box, label in truth:
        r = rect(box)
        draw.rectangle(r, outline=_TRUE, width=2)
        _label(draw, image.size, (r[0], r[1] - 14), class_names[label], _TRUE, font)
    for box, label, score in predicted:
        r = rect(box)
        draw.rectangle(r, outline=_FOUND, width=2)
        _label(draw, image.size, (r[0], r[3] + 1), f"{class_names[label]} {score:.2f}", _FOUND, font)
    out = io.BytesIO()
    jpeg = samples.mime(encoded) == "image/jpeg"
    image.save(out, format="JPEG" if jpeg else "PNG", **({"quality": 85} if jpeg else {}))
    return out.getvalue()


def _caption(example: Mapping[str, Any]) -> list[str]:
    matched, missed, false = example["matched"], example["missed"], example["false"]
    return [
        f"F1 {example['f1']:.2f}: {matched} of {matched + missed} found",
        f"{false} false detection{'' if false == 1 else 's'}",
    ]


# ------------------------------------------------------------------------------------ the page


def page(result: DetectionEvaluation, decision: Decision, split: str) -> str:
    """Precision-recall curves per class, the metrics, AP per class and the drawn test images."""
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
    head = [*(metric.title for metric in METRICS), "images"]
    body.append(pages.table(head, [[*(fmt(m.get(metric.name)) for metric in METRICS), int(m["num_examples"])]]))
    body.append(pages.table(_PER_CLASS_HEAD, _per_class_rows(result.per_class)))
    figures = []
    for ex in result.examples:
        drawn = draw_boxes(base64.b64decode(ex["image"]), ex["truth"], ex["predicted"], result.class_names)
        uri = f"data:{samples.mime(drawn)};base64,{base64.b64encode(drawn).decode('ascii')}"
        figures.append(pages.fragment(_FIGURE, uri=uri, caption=" ".join(_caption(ex))))
    if figures:
        body.append(pages.fragment(_FIGURES, figures=figures, score=EXAMPLE_SCORE))
    return evaluation_page(f"Detection evaluation on the {split} split", decision, body, result.slice_rows())


_FIGURE = '<figure><img src="{{ uri }}" alt="test image"><figcaption>{{ caption }}</figcaption></figure>'
_FIGURES = (
    "<h2>Test images, worst and best</h2><p>True boxes green, detections with score &gt;= {{ score }} red.</p>"
    '<div class="grid">{{ figures | join }}</div>'
)


# ------------------------------------------------------------------------------------ the sample


def sample(evaluated: Evaluated) -> dict[str, Any]:
    """The evaluation's worst and best detected images, drawn (its own predictions: no second run)."""
    result = evaluated.result
    tiles = []
    for ex in result.examples:
        drawn = draw_boxes(base64.b64decode(ex["image"]), ex["truth"], ex["predicted"], result.class_names)
        ok = ex["missed"] == 0 and ex["false"] == 0
        fields = {k: ex[k] for k in ("f1", "matched", "missed", "false")}
        tiles.append(samples.tile(drawn, _caption(ex), ok, **fields))
    scanned = int(result.metrics.get("num_examples", 0))
    return {
        "split": evaluated.split,
        "class_names": list(result.class_names),
        "scanned": scanned,
        "summary": (
            f"The worst and the best detected of the {scanned} {evaluated.split} images by per-image F1 (a true "
            f"box is found by a detection of its class with IoU >= {MATCH_IOU} and score >= {EXAMPLE_SCORE}), "
            "worst first; true boxes green, detections red; red frame: a box missed or a false detection."
        ),
        "tile_px": DRAWN_PX,
        "images": tiles,
    }


# ------------------------------------------------------------------------------------ the run report


def _split_boxes(info: DatasetInfo, split: str) -> dict[str, Any]:
    """A split's boxes per class, images per class and box sizes, from its records (no image decoded)."""
    from trainer.tasks.detection.fit import read_box_sample

    boxes = read_box_sample(info, split, BOXES_READ)
    n = len(info.classes)
    owners = [set(boxes.box_image[boxes.labels == k].tolist()) for k in range(n)]
    return {
        "read": len(boxes.image_hw),
        "examples": boxes.examples,
        "boxes": np.bincount(boxes.labels, minlength=n).tolist(),
        "images": [len(o) for o in owners],
        "with_boxes": len(set(boxes.box_image.tolist())),
        "px": np.sqrt(boxes.box_hw[:, 0] * boxes.box_hw[:, 1]),
    }


def _size_bins(px: np.ndarray) -> list[float]:
    """The share (%) of boxes in each ``SIZE_EDGES`` bin."""
    counts = np.histogram(px, bins=[*SIZE_EDGES, np.inf])[0]
    return (100.0 * counts / max(1, len(px))).tolist()


def _size_rows(read: Mapping[str, Mapping[str, Any]]) -> list[list[Any]]:
    rows = []
    for split, r in read.items():
        q = np.quantile(r["px"], (0.0, 0.05, 0.5, 0.95, 1.0)) if len(r["px"]) else [None] * 5
        rows.append([split, len(r["px"]), *(parts.num(v, ",.1f") for v in q)])
    return rows


def _class_rows(info: DatasetInfo, read: Mapping[str, Mapping[str, Any]]) -> list[list[Any]]:
    names = list(read)
    rows = [[c, *(read[s]["boxes"][k] for s in names), *(read[s]["images"][k] for s in names)]
            for k, c in enumerate(info.classes)]  # fmt: skip
    rows.append(["all", *(sum(read[s]["boxes"]) for s in names), *(read[s]["with_boxes"] for s in names)])
    rows.append(["no box", *("" for _ in names), *(read[s]["read"] - read[s]["with_boxes"] for s in names)])
    return rows


def _converted(info: DatasetInfo) -> list[Markup]:
    """What the converter did with the source's boxes (``dataset.json``'s box statistics), as cards."""
    stats = info.boxes
    if stats is None:
        return []
    figures = [(stats.kept, "boxes kept"), (stats.clipped, "clipped to the image"), (stats.dropped, "dropped"),
               (stats.crowd, "crowd boxes"), (stats.negatives, "images without a box")]  # fmt: skip
    return [parts.cards([(f"{v:,}", label) for v, label in figures])]


def _per_class_part(info: DatasetInfo, read: Mapping[str, Mapping[str, Any]]) -> list[Markup]:
    names = list(read)
    head = ["class", *(f"boxes: {s}" for s in names), *(f"images: {s}" for s in names)]
    table = pages.table(head, _class_rows(info, read), left=1)
    series = {s: [float(v) for v in read[s]["boxes"]] for s in names}
    bars = charts.grouped_bars("Boxes per class and split", list(info.classes), series, "boxes", width_in=5.2)
    return [parts.heading("Boxes and images per class and split (crowd boxes left out)"), parts.charts([table, bars])]


def _sizes_part(read: Mapping[str, Mapping[str, Any]]) -> list[Markup]:
    pairs = zip(SIZE_EDGES[1:], SIZE_EDGES[2:], strict=False)
    bins = [f"<{SIZE_EDGES[1]}", *(f"{a}-{b}" for a, b in pairs), f">={SIZE_EDGES[-1]}"]
    series = {s: _size_bins(r["px"]) for s, r in read.items()}
    chart = charts.grouped_bars("Box sizes (square root of the area, px)", bins, series, "% of the split's boxes",
                                width_in=5.2)  # fmt: skip
    table = pages.table(["split", "boxes", "min", "p5", "median", "p95", "max"], _size_rows(read), left=1)
    return [parts.heading("Box sizes in the images' own pixels"), parts.charts([table, chart])]


def dataset_part(info: DatasetInfo) -> str:
    """Boxes and images per class and split, the boxes' sizes, and what the converter did with the boxes."""
    read = {split: _split_boxes(info, split) for split in info.splits if info.splits[split].count}
    blocks = _converted(info)
    partial = [f"{s}: {r['read']:,} of {r['examples']:,} images" for s, r in read.items() if r["read"] < r["examples"]]
    if partial:
        blocks.append(parts.note("Counted from the first records of each shard: " + "; ".join(partial) + "."))
    return parts.join([*blocks, *_per_class_part(info, read), *_sizes_part(read)])


def training_part(task: Any, record: Optional[Mapping[str, Any]]) -> str:
    """The last epoch's box and class losses, and what was fitted to the data (input size, anchor coverage)."""
    if record is None:
        return ""
    metrics = record.get("metrics") or {}
    figures = [(parts.num(metrics.get(m.name), ".4f"), m.title) for m in task.training_metrics]
    fit = record.get("fit") or {}
    shape = record.get("image_shape") or []
    size = fit.get("image_size", shape[0] if shape else None)
    figures.append((f"{size} px" if size else "n/a", "input size, fitted" if "image_size" in fit else "input size"))
    if "coverage_after" in fit:
        figures.append((f"{100 * fit['coverage_after']:.1f}%", f"boxes an anchor covers (IoU >= {MATCH_IOU})"))
    if "most_boxes_per_image" in fit:
        figures.append((str(fit["most_boxes_per_image"]), "most boxes in an image"))
    return str(parts.cards(figures))


def evaluation_part(result: DetectionEvaluation) -> str:
    """AP per class, weakest first."""
    rows = _per_class_rows(sorted(result.per_class, key=lambda c: (c["ap"], c["name"])))
    return parts.join([parts.heading("AP per class, weakest first"), pages.table(_PER_CLASS_HEAD, rows, left=1)])


def sections(evaluated: Evaluated) -> dict[str, str]:
    """Detection's parts of the run report's dataset, training and evaluation sections."""
    from trainer import tfrecords

    return {
        "dataset": dataset_part(tfrecords.load_dataset_info(evaluated.dataset_dir)),
        "training": training_part(evaluated.task, parts.training_record(evaluated.model_dir)),
        "evaluation": evaluation_part(evaluated.result),
    }


RENDERERS = register(NAME, Renderers(report=render_report, page=page, sample=sample, sections=sections))
