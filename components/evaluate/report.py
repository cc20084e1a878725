"""The evaluation report (Markdown, shown by the Kubeflow UI) and the blessing artifact's JSON."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from components import markdown
from components.evaluate.gate import Decision
from trainer.tasks.classification.evaluation import ClassificationEvaluation, most_confused_pairs


def _fmt(value: Optional[float], digits: int = 4) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _decision_lines(
    title: str, decision: Decision, model_uri: str, baseline_entry: Optional[Mapping[str, Any]]
) -> list[str]:
    """The report's head, the same for every task: title, model, decision with reasons, baseline."""
    lines = [f"# {title}", ""]
    if model_uri:
        lines += [f"Model: `{model_uri}`", ""]
    lines += [f"## Decision: {'BLESSED' if decision.blessed else 'NOT BLESSED'}", ""]
    lines += [f"- {reason}" for reason in decision.reasons]
    if baseline_entry is None:
        return [*lines, "", "Baseline: none (prod serves no model yet)."]
    version, uri = baseline_entry.get("version", "?"), baseline_entry.get("model_uri", "?")
    return [*lines, "", f"Baseline: prod version {version} (`{uri}`)."]


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
    lines = _decision_lines(f"Evaluation on the {split} split", decision, model_uri, baseline_entry)
    base = decision.baseline or {}
    names = ("accuracy", "top_k_accuracy", "loss", "macro_precision", "macro_recall", "macro_f1")
    metric_rows = [
        [f"top-{result.top_k} accuracy" if n == "top_k_accuracy" else n, _fmt(m.get(n)), _fmt(base.get(n))]
        for n in names
    ]
    metric_rows.append(["examples", int(m.get("num_examples", 0)), ""])
    lines += ["", "## Metrics", "", *markdown.table(["metric", "value", "prod"], metric_rows, "lrr")]
    per_class = [
        [c["name"], f"{c['precision']:.4f}", f"{c['recall']:.4f}", f"{c['f1']:.4f}", c["support"]]
        for c in result.per_class
    ]
    lines += [
        "",
        "## Per class",
        "",
        *markdown.table(["class", "precision", "recall", "F1", "support"], per_class, "lrrrr"),
    ]
    pairs = most_confused_pairs(result.confusion, result.class_names, confused_pairs)
    lines += ["", "## Most confused pairs", ""]
    if pairs:
        lines += markdown.table(["true class", "predicted as", "count"], pairs, "llr")
    else:
        lines.append("None: every example was classified correctly.")
    return "\n".join(lines) + "\n"


def blessing_record(decision: Decision, metrics: Mapping[str, float], model_uri: str, split: str) -> dict[str, Any]:
    """The blessing artifact's JSON: the decision, its reasons and checks, and the metrics."""
    return {
        "blessed": decision.blessed,
        "decision": "BLESSED" if decision.blessed else "NOT_BLESSED",
        "reasons": decision.reasons,
        "checks": decision.checks,
        "baseline": decision.baseline,
        "metrics": dict(metrics),
        "model_uri": model_uri,
        "split": split,
    }


def render_detection_report(
    result: Any,
    decision: Decision,
    split: str,
    model_uri: str = "",
    baseline_entry: Optional[Mapping[str, Any]] = None,
    worst: int = 3,
) -> str:
    """Renders a detection evaluation as Markdown: decision, COCO metrics, AP per class, worst classes.

    Args:
        result: a ``trainer.tasks.detection.DetectionEvaluation``.
        decision: the gate's decision.
        split: the split that was scored.
        model_uri: where the model is (shown for reference).
        baseline_entry: prod's current record for the same model name, or None.
        worst: how many of the weakest classes to list.

    Returns:
        The report text.
    """
    m = result.metrics
    lines = _decision_lines(f"Detection evaluation on the {split} split", decision, model_uri, baseline_entry)
    base = decision.baseline or {}
    labels = {"ap": "AP@[.50:.95]", "ap50": "AP@0.50", "ap75": "AP@0.75", "ar100": "AR@100"}
    metric_rows = [[label, _fmt(m.get(name)), _fmt(base.get(name))] for name, label in labels.items()]
    metric_rows.append(["images", int(m.get("num_examples", 0)), ""])
    lines += ["", "## COCO metrics (pycocotools, through the exported model)", ""]
    lines += markdown.table(["metric", "value", "prod"], metric_rows, "lrr")
    per_class = [[c["name"], f"{c['ap']:.4f}", f"{c['ap50']:.4f}", c["instances"]] for c in result.per_class]
    lines += [
        "",
        "## Per class",
        "",
        *markdown.table(["class", "AP@[.50:.95]", "AP@0.50", "instances"], per_class, "lrrr"),
    ]
    weakest = sorted(result.per_class, key=lambda c: c["ap"])[:worst]
    lines += ["", "## Weakest classes", ""]
    lines += [f"- {c['name']}: AP {c['ap']:.4f} over {c['instances']} instances" for c in weakest]
    return "\n".join(lines) + "\n"
