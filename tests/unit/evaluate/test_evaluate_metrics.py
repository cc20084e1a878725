"""Evaluation arithmetic (NumPy only), checked against scikit-learn, and the Markdown report."""

import numpy as np
import pytest
from sklearn.metrics import confusion_matrix as sk_confusion
from sklearn.metrics import log_loss, precision_recall_fscore_support, top_k_accuracy_score

from components.evaluate.gate import decide
from components.evaluate.renderers.classification import render_report, worst_classes
from components.evaluate.report import blessing_record
from trainer.evaluate import EvaluationError
from trainer.tasks.classification.evaluation import SCALAR_METRICS, classification_metrics, most_confused_pairs

NAMES = ["cat", "dog", "bird", "fish"]


def _data(n=400, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, n)
    logits = rng.normal(size=(n, 4))
    logits[np.arange(n), labels] += 1.2
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return labels, probs


def test_matches_scikit_learn():
    labels, probs = _data()
    r = classification_metrics(labels, probs, NAMES, top_k=2)
    preds = probs.argmax(1)
    assert r.metrics["accuracy"] == pytest.approx((preds == labels).mean())
    assert r.metrics["top_k_accuracy"] == pytest.approx(top_k_accuracy_score(labels, probs, k=2))
    assert r.metrics["loss"] == pytest.approx(log_loss(labels, probs), rel=1e-6)
    p, rc, f1, support = precision_recall_fscore_support(labels, preds, zero_division=0)
    assert [c["precision"] for c in r.per_class] == pytest.approx(p)
    assert [c["recall"] for c in r.per_class] == pytest.approx(rc)
    assert [c["f1"] for c in r.per_class] == pytest.approx(f1)
    assert [c["support"] for c in r.per_class] == list(support)
    assert r.metrics["macro_f1"] == pytest.approx(f1.mean())
    assert r.confusion == sk_confusion(labels, preds).tolist()


def test_never_predicted_class_gets_zero_precision_not_nan():
    labels = np.array([0, 1, 2, 3])
    probs = np.eye(4)[[0, 1, 1, 1]]
    r = classification_metrics(labels, probs, NAMES)
    assert r.per_class[2]["precision"] == 0.0 and r.per_class[3]["f1"] == 0.0
    assert np.isfinite(r.metrics["loss"])


def test_bad_shapes_and_empty_input_are_clear_errors():
    with pytest.raises(EvaluationError, match="empty"):
        classification_metrics(np.array([], int), np.zeros((0, 4)), NAMES)
    with pytest.raises(EvaluationError, match=r"expected \(2, 4\)"):
        classification_metrics(np.array([0, 1]), np.zeros((2, 3)), NAMES)


def test_most_confused_pairs_and_report():
    matrix = [[5, 3, 0], [0, 4, 1], [7, 0, 2]]
    assert most_confused_pairs(matrix, ["a", "b", "c"], 2) == [("c", "a", 7), ("a", "b", 3)]
    labels, probs = _data(80)
    r = classification_metrics(labels, probs, NAMES)
    d = decide(r.metrics, {"accuracy": 0.99}, {}, None, SCALAR_METRICS)
    text = render_report(r, d, "test", "/m")
    assert "NOT BLESSED" in text and "| cat |" in text and "Most confused pairs" in text
    assert "Baseline: none" in text
    rec = blessing_record(d, r.metrics, "/m", "test", "classification")
    assert rec["blessed"] is False and rec["decision"] == "NOT_BLESSED" and rec["reasons"]
    assert rec["task"] == "classification"  # a reader asks this task for the headline


def test_the_worst_classes_come_from_the_evaluation_s_own_per_class_table():
    # c: 2 of 9 right (F1 lowest), taken for a 7 times; a: 5 of 8; b: 4 of 5
    labels = np.repeat([0, 1, 2], [8, 5, 9])
    predicted = np.array([0] * 5 + [1] * 3 + [1] * 4 + [2] + [0] * 7 + [2] * 2)
    r = classification_metrics(labels, np.eye(3)[predicted], ["a", "b", "c"])
    rows = worst_classes(r, 2)
    assert [row[0] for row in rows] == ["c", "a"]
    by_name = {c["name"]: c for c in r.per_class}
    assert rows[0][1:5] == [f"{by_name['c'][k]:,.4f}" for k in ("precision", "recall", "f1")] + [9]
    assert rows[0][5] == "a (7)" and rows[1][5] == "b (3)"


def test_a_detected_image_s_quality_matches_boxes_one_to_one_by_class_and_overlap():
    from trainer.tasks.detection.evaluation import image_quality

    a, b = [0.1, 0.1, 0.5, 0.5], [0.5, 0.5, 0.9, 0.9]
    truth = [(a, 0), (b, 1)]
    # one right, one on the right box with the wrong class, one duplicate of the first
    found = [([0.12, 0.1, 0.5, 0.52], 0, 0.9), (b, 0, 0.8), ([0.1, 0.1, 0.48, 0.5], 0, 0.7)]
    assert image_quality(truth, found) == {"matched": 1, "missed": 1, "false": 2, "f1": 2 / 5}
    assert image_quality(truth, [(a, 0, 0.9), (b, 1, 0.6)])["f1"] == 1.0
    assert image_quality([], [])["f1"] is None  # nothing to find, nothing found: says nothing
    assert image_quality([], [(a, 0, 0.9)])["f1"] == 0.0


def test_the_examples_are_the_worst_and_the_best_detected_images_worst_first():
    from trainer.tasks.detection.evaluation import EXAMPLE_SCORE, scored_examples

    box = [0.2, 0.2, 0.6, 0.6]

    def record(n):
        return {"encoded": bytes([n]), "boxes": [box] * (n % 3), "labels": [0] * (n % 3), "crowd": [0] * (n % 3)}

    def prediction(hits, misses):
        boxes = [box] * hits + [[0.0, 0.0, 0.05, 0.05]] * misses
        return {"num_detections": len(boxes), "detection_boxes": boxes, "detection_classes": [1] * len(boxes),
                "detection_scores": [0.9] * len(boxes)}  # fmt: skip

    records = [record(n) for n in range(12)]  # n % 3 true boxes each (the same box, so one can be found)
    predictions = [prediction(min(1, n % 3), n % 2) for n in range(12)]
    chosen = scored_examples(records, predictions, count=2)
    f1 = [c["f1"] for c in chosen]
    assert len(chosen) == 4 and f1 == sorted(f1) and f1[0] == 0.0 and f1[-1] == 1.0
    everything = [e["f1"] for e in scored_examples(records, predictions, count=100)]
    assert len(everything) == 12 - 2 and everything[:2] == f1[:2] and everything[-2:] == f1[-2:]  # 2 empty images
    assert all(d[2] >= EXAMPLE_SCORE for c in chosen for d in c["predicted"])
