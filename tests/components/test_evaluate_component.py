"""evaluate_model on a real exported SavedModel and a real TFRecord dataset (python_func)."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from components.evaluate.component import evaluate_model
from tests.eval_bench_fixtures import stages_with_prod, tiny_assets
from trainer.evaluate import EvaluationError
from trainer.tfrecords import DatasetError

pytestmark = pytest.mark.slow


class _Metrics(SimpleNamespace):
    def log_metric(self, name, value):
        self.values[name] = value

    def log_confusion_matrix(self, categories, matrix):
        self.values["categories"], self.values["matrix"] = categories, matrix


def _run(tmp_path, **kwargs):
    assets = tiny_assets()
    outs = {
        "metrics": _Metrics(values={}),
        "confusion": _Metrics(values={}),
        "report": SimpleNamespace(path=str(tmp_path / "report.md")),
        "blessing": SimpleNamespace(path=str(tmp_path / "blessing.json"), metadata={}),
        "samples": SimpleNamespace(path=str(tmp_path / "samples.json")),
        "page": SimpleNamespace(path=str(tmp_path / "page.html")),
    }
    kwargs.setdefault("pipeline_root", str(tmp_path / "root"))
    blessed = evaluate_model.python_func(
        model=SimpleNamespace(path=kwargs.pop("model_path", assets["model"])),
        dataset=SimpleNamespace(path=assets["dataset"]),
        **outs,
        **kwargs,
    )
    return blessed, outs


def test_scores_the_saved_model_and_blesses_on_value_thresholds(tmp_path):
    blessed, outs = _run(tmp_path, value_thresholds={"accuracy": 0.5}, change_thresholds={"accuracy": 0.0})
    m = outs["metrics"].values
    assert m["num_examples"] == 60
    # The fixture's bars are easy: over seeds 0-4 and three floating-point paths (oneDNN, oneDNN
    # capped at SSE4.1, oneDNN off) on an AVX2 EPYC its 8 epochs scored 1.0 every time.
    assert m["accuracy"] > 0.5, m
    assert blessed is True
    record = json.loads(Path(outs["blessing"].path).read_text())
    assert record["blessed"] is True and any("no baseline" in r for r in record["reasons"])
    conf = outs["confusion"].values
    assert len(conf["matrix"]) == 10 and sum(map(sum, conf["matrix"])) == 60
    report = Path(outs["report"].path).read_text()
    assert "BLESSED" in report and "| class_0 |" in report
    # the run report's image grid: the split's own images, scored, mistakes first
    sample = json.loads(Path(outs["samples"].path).read_text())
    assert sample["split"] == "test" and sample["scanned"] == 60 and 0 < len(sample["images"]) <= 32
    assert all(i["true"].startswith("class_") and i["predicted"].startswith("class_") for i in sample["images"])
    assert {i["mime"] for i in sample["images"]} <= {"image/png", "image/jpeg"}
    page = Path(outs["page"].path).read_text()
    assert page.startswith("<!DOCTYPE html>") and "Confusion matrix" in page and "<svg" in page
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org", "")
    wrong = [i["true"] != i["predicted"] for i in sample["images"]]
    assert wrong == sorted(wrong, reverse=True) and [not i["ok"] for i in sample["images"]] == wrong
    # the run report's part: the record names its task, and the classification renderers' sections
    assert sample["task"] == "classification" and outs["blessing"].metadata["task"] == "classification"
    assert set(sample["sections"]) == {"dataset", "evaluation"}  # the fixture exported no training.json
    assert "<td class=l>class_0</td>" in sample["sections"]["dataset"]
    assert "Worst classes (lowest F1)" in sample["sections"]["evaluation"]


def test_fails_closed_without_thresholds(tmp_path):
    blessed, outs = _run(tmp_path)
    assert blessed is False
    assert "no thresholds configured" in json.loads(Path(outs["blessing"].path).read_text())["reasons"][0]


def test_compares_with_prod(tmp_path):
    root = stages_with_prod(tmp_path / "stages", {"accuracy": 0.999})
    # prod is near perfect; the candidate must beat it by a point, which it cannot
    blessed, outs = _run(
        tmp_path, value_thresholds={"accuracy": 0.1}, change_thresholds={"accuracy": 0.01}, stages_root=root
    )
    assert blessed is False
    record = json.loads(Path(outs["blessing"].path).read_text())
    assert record["baseline"] == {"accuracy": 0.999}
    assert [c["passed"] for c in record["checks"]] == [True, False]


def test_bad_input_fails_before_any_work(tmp_path):
    with pytest.raises(ValueError, match="unknown metric .acc."):
        _run(tmp_path, value_thresholds={"acc": 0.5})
    with pytest.raises(DatasetError, match="split 'validation' .* is empty"):
        _run(tmp_path, value_thresholds={"accuracy": 0.5}, split="validation")
    with pytest.raises(DatasetError, match="split 'holdout' is not in"):
        _run(tmp_path, value_thresholds={"accuracy": 0.5}, split="holdout")
    with pytest.raises(EvaluationError, match="predicts 3 classes but the dataset has 10"):
        _run(tmp_path, value_thresholds={"accuracy": 0.5}, model_path=tiny_assets()["wrong_model"])
    assert not (tmp_path / "report.md").exists()
