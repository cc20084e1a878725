"""Classification's renderers: its evaluation report, page, image sample and run-report parts.

- report: decision, metrics, the per-class table, the most confused pairs (Markdown);
- page: the confusion matrix as a heatmap and the per-class table;
- sample: the split's first images scored, mistakes first, with true and predicted labels;
- run report: images per class and split (dataset), the last epoch's accuracies (training) and
  the worst classes by F1 with what each is most often taken for (evaluation), all from the
  evaluation's own per-class table.
"""

from __future__ import annotations

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
from trainer import model_folder
from trainer.tasks.classification.evaluation import ClassificationEvaluation, most_confused_pairs

NAME = "classification"
# How many images the sample reads and scores, and how many it keeps.
SCANNED = 256
KEPT = 32
# At most this many of the kept images are mistakes: the grid shows what goes right as well.
MISTAKES = 16
# Classes listed as the worst (lowest F1) in the run report.
WORST_CLASSES = 3


def render_report(
    result: ClassificationEvaluation,
    decision: Decision,
    split: str,
    model_uri: str = "",
    baseline_entry: Optional[Mapping[str, Any]] = None,
    confused_pairs: int = 5,
) -> str:
    """Renders the evaluation as Markdown: decision, metrics, per-class table, confused pairs.

    Args:
        result: the evaluation result.
        decision: the gate's decision.
        split: the split that was scored.
        model_uri: where the model is (shown for reference).
        baseline_entry: prod's current promotion record (version, model_uri), or None.
        confused_pairs: how many of the most confused class pairs to list.

    Returns:
        The report text.
    """
    m = result.metrics
    lines = decision_lines(f"Evaluation on the {split} split", decision, model_uri, baseline_entry)
    base = decision.baseline or {}
    names = ("accuracy", "top_k_accuracy", "loss", "macro_precision", "macro_recall", "macro_f1")
    metric_rows = [
        [f"top-{result.top_k} accuracy" if n == "top_k_accuracy" else n, fmt(m.get(n)), fmt(base.get(n))] for n in names
    ]
    metric_rows.append(["examples", int(m.get("num_examples", 0)), ""])
    lines += ["", "## Metrics", "", *markdown.table(["metric", "value", "prod"], metric_rows, "lrr")]
    lines += ["", "## Per class", "", *markdown.table(_PER_CLASS_HEAD, _per_class_rows(result), "lrrrr")]
    pairs = most_confused_pairs(result.confusion, result.class_names, confused_pairs)
    lines += ["", "## Most confused pairs", ""]
    if pairs:
        lines += markdown.table(["true class", "predicted as", "count"], pairs, "llr")
    else:
        lines.append("None: every example was classified correctly.")
    lines += slice_lines(result.slice_rows())
    return "\n".join(lines) + "\n"


_PER_CLASS_HEAD = ["class", "precision", "recall", "F1", "support"]


def _per_class_rows(result: ClassificationEvaluation) -> list[list[Any]]:
    return [[c["name"], f"{c['precision']:.4f}", f"{c['recall']:.4f}", f"{c['f1']:.4f}", c["support"]]
            for c in result.per_class]  # fmt: skip


def page(result: ClassificationEvaluation, decision: Decision, split: str) -> str:
    """The confusion matrix as a heatmap and the per-class table."""
    body = [
        Markup(charts.heatmap("Confusion matrix", result.confusion, result.class_names, "predicted", "true")),
        pages.table(_PER_CLASS_HEAD, _per_class_rows(result)),
    ]
    return evaluation_page(f"Evaluation on the {split} split", decision, body, result.slice_rows())


# ------------------------------------------------------------------------------------ the sample


def pick(labels: Sequence[int], predictions: Sequence[int], kept: int = KEPT, mistakes: int = MISTAKES) -> list[int]:
    """Indices of the examples to keep: up to ``mistakes`` wrong ones, then right ones, in order.

    Args:
        labels: true class per scanned example.
        predictions: predicted class per scanned example.
        kept: how many to keep in all.
        mistakes: the most wrong ones among them.

    Returns:
        Indices into the scanned examples, mistakes first.
    """
    wrong = [i for i, (t, p) in enumerate(zip(labels, predictions, strict=True)) if t != p][:mistakes]
    right = [i for i, (t, p) in enumerate(zip(labels, predictions, strict=True)) if t == p]
    return (wrong + right)[:kept]


def sample_record(
    images: Sequence[bytes], labels: Sequence[int], probabilities: np.ndarray, class_names: Sequence[str], split: str
) -> dict[str, Any]:
    """The sample's fields: the kept images as tiles (with ``true``, ``predicted`` and ``score``), mistakes first.

    Args:
        images: the scanned examples' encoded images.
        labels: their true classes.
        probabilities: [n, classes] predicted probabilities.
        class_names: the class names, index = label.
        split: the split they come from.
    """
    probabilities = np.asarray(probabilities)
    predictions = probabilities.argmax(axis=1).tolist()
    items = []
    for i in pick(list(labels), predictions):
        true, predicted = class_names[int(labels[i])], class_names[predictions[i]]
        score = round(float(probabilities[i, predictions[i]]), 4)
        caption = [f"true: {true}", f"pred: {predicted} ({score:.0%})"]
        items.append(samples.tile(images[i], caption, true == predicted, true=true, predicted=predicted, score=score))
    wrong = sum(1 for item in items if not item["ok"])
    return {
        "split": split,
        "class_names": list(class_names),
        "scanned": len(images),
        "summary": f"{len(items)} of the first {len(images)} {split} images, mistakes first ({wrong} wrong, red).",
        "tile_px": samples.TILE_PX,
        "images": items,
    }


def sample(evaluated: Evaluated) -> dict[str, Any]:
    """The split's first ``SCANNED`` examples scored through ``serving_default``: their probabilities per class.

    The evaluation keeps no per-example predictions, so these few are scored again.
    """
    from trainer.evaluate import read_encoded_split
    from trainer.tasks.classification.evaluation import predict_bytes

    images, labels, info = read_encoded_split(evaluated.dataset_dir, evaluated.split, SCANNED)
    _loaded, fn = evaluated.task.serving_function(model_folder.saved_model_dir(evaluated.model_dir), info)
    probabilities = predict_bytes(fn, images, 128)
    return sample_record(images, labels.tolist(), probabilities, list(info.classes), evaluated.split)


# ------------------------------------------------------------------------------------ the run report


def dataset_part(info: Any) -> str:
    """Images per class and split: a table and a chart (``dataset.json``'s class counts)."""
    classes, names = [str(c) for c in info.classes], list(info.splits)
    counts = {n: info.splits[n].class_counts for n in names}
    rows = [[c, *(counts[n].get(c, 0) for n in names)] for c in classes]
    rows.append(["all", *(info.splits[n].count for n in names)])
    side = [str(pages.table(["class", *names], rows, left=1))]
    if classes and names:
        series = {n: [float(counts[n].get(c, 0)) for c in classes] for n in names}
        side.append(charts.grouped_bars("Images per class and split", classes, series, "images", width_in=7.0))
    return str(parts.charts(side))


def training_part(task: Any, record: Optional[Mapping[str, Any]]) -> str:
    """The last epoch's accuracies as cards (the summary's ``metrics``)."""
    if record is None:
        return ""
    metrics = record.get("metrics") or {}
    return str(parts.cards([(parts.num(metrics.get(m.name), ".4f"), m.title) for m in task.training_metrics]))


def worst_classes(result: ClassificationEvaluation, count: int = WORST_CLASSES) -> list[list[Any]]:
    """The ``count`` classes of lowest F1 (the evaluation's per-class table) and what each is most often taken for."""
    names = list(result.class_names)
    rows = []
    for c in sorted(result.per_class, key=lambda r: (r["f1"], r["name"]))[:count]:
        i = names.index(c["name"])
        off = [(n, names[j]) for j, n in enumerate(result.confusion[i]) if j != i and n]
        taken = "none" if not off else "{1} ({0})".format(*max(off))
        rows.append([c["name"], parts.num(c["precision"]), parts.num(c["recall"]), parts.num(c["f1"]),
                     c["support"], taken])  # fmt: skip
    return rows


def evaluation_part(result: ClassificationEvaluation) -> str:
    """The worst classes by F1, with what each is most often taken for."""
    head = ["class", "precision", "recall", "F1", "support", "most often taken for"]
    return parts.join([parts.heading("Worst classes (lowest F1)"), pages.table(head, worst_classes(result), left=1)])


def sections(evaluated: Evaluated) -> dict[str, str]:
    """Classification's parts of the run report's dataset, training and evaluation sections."""
    from trainer import tfrecords

    info = tfrecords.load_dataset_info(evaluated.dataset_dir)
    return {
        "dataset": dataset_part(info),
        "training": training_part(evaluated.task, parts.training_record(evaluated.model_dir)),
        "evaluation": evaluation_part(evaluated.result),
    }


RENDERERS = register(NAME, Renderers(report=render_report, page=page, sample=sample, sections=sections))
