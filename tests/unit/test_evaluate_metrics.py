"""Evaluation arithmetic (NumPy only), checked against scikit-learn, and the Markdown report."""

import numpy as np
import pytest
from sklearn.metrics import confusion_matrix as sk_confusion
from sklearn.metrics import log_loss, precision_recall_fscore_support, top_k_accuracy_score

from components.evaluate.gate import decide
from components.evaluate.report import blessing_record, render_report
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
    rec = blessing_record(d, r.metrics, "/m", "test")
    assert rec["blessed"] is False and rec["decision"] == "NOT_BLESSED" and rec["reasons"]
