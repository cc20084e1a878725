"""The validate step's drift checks against a baseline stats.json, and the baseline's round trip."""

from __future__ import annotations

import json

import pytest

from components.validate.checks import share_distances
from components.validate.config import ValidateConfig
from components.validate.run import publish, validate
from components.validate.stats import DatasetStats, StatsError, read_stats
from tests.validate_fixtures import Rec, balanced, write_dataset


def _splits(classes: int = 4, train: int = 40, test: int = 8, **fields):
    return {"train": balanced("train", train, classes, **fields), "test": balanced("test", test, classes, **fields)}


def _baseline(tmp_path, splits, classes=("a", "b", "c", "d")) -> str:
    """Validates a dataset and publishes it: its stats.json is the baseline."""
    folder = write_dataset(tmp_path / "v1", splits, classes)
    publish(validate(str(folder)), str(tmp_path / "v1-out"))
    return str(tmp_path / "v1-out" / "stats.json")


def _against(tmp_path, baseline, splits, classes=("a", "b", "c", "d"), **config):
    folder = write_dataset(tmp_path / "v2", splits, classes)
    return validate(str(folder), ValidateConfig(baseline=baseline, **config))


def _kinds(result):
    return sorted(f.kind for f in result.findings)


def test_stats_json_reads_back_equal_and_the_same_data_shows_no_drift(tmp_path):
    baseline = _baseline(tmp_path, _splits())
    stats = read_stats(baseline)
    assert isinstance(stats, DatasetStats) and stats.splits["train"].count == 40
    assert DatasetStats.from_dict(json.loads(json.dumps(stats.to_dict()))) == stats
    result = _against(tmp_path, baseline, _splits())
    assert result.findings == () and result.notes == () and result.baseline == baseline
    # a folder holding stats.json works as the baseline too
    assert _against(tmp_path, str(tmp_path / "v1-out"), _splits()).findings == ()


def test_a_class_that_appears_is_new_and_one_that_goes_is_missing(tmp_path):
    baseline = _baseline(tmp_path, _splits(classes=3), ("a", "b", "c", "d"))  # d has no images
    result = _against(tmp_path, baseline, {"train": balanced("train", 40, 4)[1:], "test": []})
    new = [f for f in result.findings if f.kind == "new_class"]
    assert len(new) == 1 and "class d" in new[0].message and new[0].count == 10 and new[0].severity == "warn"
    assert all(key.startswith("train/") for key in new[0].records)
    later = _against(tmp_path, baseline, {"train": balanced("train", 40, 2), "test": balanced("test", 8, 2)})
    missing = sorted(f.message.split(" had")[0] for f in later.findings if f.kind == "missing_class")
    assert missing == ["class c"]


def test_shifted_class_shares(tmp_path):
    baseline = _baseline(tmp_path, _splits())
    skewed = [Rec(f"train/{i}", 0 if i < 25 else 1 + i % 3) for i in range(40)]  # a: 25 % -> 62.5 %
    result = _against(tmp_path, baseline, {"train": skewed, "test": balanced("test", 8, 4)})
    shift = [f for f in result.findings if f.kind == "class_share_shift"]
    assert len(shift) == 1 and shift[0].split == "train" and "most: a 25.0% -> 62.5%" in shift[0].message
    assert (
        _against(
            tmp_path, baseline, {"train": skewed, "test": balanced("test", 8, 4)}, max_share_shift=0.5, max_share_js=0.5
        ).findings
        == ()
    )


def test_share_distances():
    assert share_distances({"a": 0.5, "b": 0.5}, {"a": 0.5, "b": 0.5}) == (0.0, 0.0)
    linf, js = share_distances({"a": 1.0}, {"b": 1.0})
    assert linf == 1.0 and js == pytest.approx(1.0)
    linf, js = share_distances({"a": 0.6, "b": 0.4}, {"a": 0.5, "b": 0.5})
    assert linf == pytest.approx(0.1) and 0 < js < 0.1


def test_a_changed_test_split(tmp_path):
    baseline = _baseline(tmp_path, _splits())
    test = balanced("test", 8, 4)
    test[2] = Rec("test/2", 2, image=b"a new picture")
    result = _against(tmp_path, baseline, {"train": balanced("train", 40, 4), "test": test})
    assert _kinds(result) == ["test_split_changed"] and result.passed
    assert result.findings[0].split == "test" and "8 distinct images there, 8 here" in result.findings[0].message
    gone = _against(tmp_path, baseline, {"train": balanced("train", 40, 4)})
    assert _kinds(gone) == ["test_split_changed"] and "this dataset none" in gone.findings[0].message
    strict = _against(
        tmp_path,
        baseline,
        {"train": balanced("train", 40, 4), "test": test},
        validation_policy={"test_split_changed": "error"},
    )
    assert not strict.passed


def test_image_sizes_that_moved(tmp_path):
    baseline = _baseline(tmp_path, _splits())
    result = _against(tmp_path, baseline, _splits(height=64, width=48))
    found = [f for f in result.findings if f.kind == "image_size_shift"]
    assert {f.split for f in found} == {"train", "test"}
    assert "32x32 in the baseline" in found[0].message and "64x48 here (height +100%, width +50%" in found[0].message


def test_box_sizes_that_moved(tmp_path):
    def boxes(side):
        return [Rec(f"{i}", -1, boxes=[(0.1, 0.1, 0.1 + side, 0.1 + side)], box_labels=[i % 2]) for i in range(6)]

    classes = ("x", "y")
    baseline = _baseline(tmp_path, {"train": boxes(0.2)}, classes)
    assert _against(tmp_path, baseline, {"train": boxes(0.21)}, classes).findings == ()
    result = _against(tmp_path, baseline, {"train": boxes(0.4)}, classes)
    assert _kinds(result) == ["box_size_shift"] and "0.200 in the baseline" in result.findings[0].message


@pytest.mark.parametrize(
    "content, why",
    [(None, "no such file"), ("{not json", "cannot read it as JSON"), ('{"schema_version": 1, "x": 1}', "unknown key")],
)
def test_an_unreadable_baseline_is_a_warning_naming_it(tmp_path, content, why):
    path = tmp_path / "old" / "stats.json"
    if content is not None:
        path.parent.mkdir()
        path.write_text(content)
    result = _against(tmp_path, str(path), _splits())
    assert _kinds(result) == ["baseline_unreadable"] and result.passed
    finding = result.findings[0]
    assert finding.severity == "warn" and str(path) in finding.message and why in finding.message
    assert result.notes == (f"baseline {path} unreadable: drift checks skipped",)
    with pytest.raises(StatsError, match=why):
        read_stats(str(path))
