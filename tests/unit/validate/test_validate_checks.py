"""The validate step's statistics and record checks: a clean dataset, each planted fault, the policy, the allowlist."""

from __future__ import annotations

import pytest

from components.validate import policy
from components.validate.config import ValidateConfig
from components.validate.run import NO_BASELINE, validate
from tests.datasets import write_test_dataset
from tests.validate_fixtures import Rec, balanced, write_dataset
from trainer.config import ConfigError
from trainer.tfrecords import NO_LABEL


def _kinds(result):
    return [f.kind for f in result.findings]


def _only(result, kind):
    found = [f for f in result.findings if f.kind == kind]
    assert len(found) == 1, result.findings
    return found[0]


def test_a_clean_dataset_has_no_finding_and_its_statistics(tmp_path):
    folder = write_test_dataset(tmp_path / "d", {"train": 48, "validation": 24, "test": 24}, num_classes=3)
    result = validate(str(folder))
    assert result.findings == () and result.passed and result.notes == (NO_BASELINE,)
    assert result.counts == {"error": 0, "warn": 0, "ignore": 0}
    train = result.stats.splits["train"]
    assert train.count == 48 and sum(train.class_counts.values()) == 48 and train.class_unit == "images"
    assert sum(train.class_shares.values()) == pytest.approx(1.0)
    assert train.formats == {"png": 48} and train.channels == {"1": 48}
    assert (train.height.min, train.height.median, train.height.max) == (28, 28, 28)
    assert train.height.buckets == {"16-31": 48} and train.boxes is None and train.columns == {}
    assert train.distinct_images == 48 and len(train.sha256_digest) == 64


def test_an_image_in_two_splits_is_leakage_naming_both_keys(tmp_path):
    train = balanced("train", 8, 4)
    test = balanced("test", 4, 4)
    test[1] = Rec("test/copy", train[5].label, image=b"image of train/5")
    result = validate(str(write_dataset(tmp_path / "d", {"train": train, "test": test})))
    assert _kinds(result) == ["leakage"] and not result.passed
    leak = _only(result, "leakage")
    assert leak.severity == "error" and set(leak.records) == {"train/5", "test/copy"} and leak.count == 2
    assert "test & train: 1" in leak.message and "train/5 (train)" in leak.message


def test_a_relabelled_duplicate_is_a_label_conflict(tmp_path):
    train = balanced("train", 8, 4)
    train.append(Rec("train/again", 3, image=b"image of train/0"))  # train/0 is class 0
    result = validate(str(write_dataset(tmp_path / "d", {"train": train})))
    conflict = _only(result, "label_conflict")
    assert conflict.severity == "error" and set(conflict.records) == {"train/0", "train/again"}
    assert "leakage" not in _kinds(result)  # one split: no leakage
    assert "train/0 (a)" in conflict.message and "train/again (d)" in conflict.message


def test_empty_and_rare_classes_and_size_outliers(tmp_path):
    train = [Rec(f"train/{i}", 0 if i < 150 else 1) for i in range(151)]  # b is 1 of 151, c and d none
    train[3] = Rec("train/huge", 0, height=32, width=400)
    result = validate(str(write_dataset(tmp_path / "d", {"train": train})))
    assert sorted(_kinds(result)) == ["empty_class", "rare_class", "size_outlier"] and result.passed
    assert "c, d" in _only(result, "empty_class").message
    rare = _only(result, "rare_class")
    assert rare.records == ("train/150",) and "b 0.66%" in rare.message
    outlier = _only(result, "size_outlier")
    assert outlier.records == ("train/huge",) and "32x400 (1)" in outlier.message
    # the thresholds are the config's
    quiet = validate(str(tmp_path / "d"), ValidateConfig(min_class_share=0.005, size_outlier_factor=20))
    assert sorted(_kinds(quiet)) == ["empty_class"]


def test_the_policy_sets_severities_and_refuses_unknown_kinds(tmp_path):
    train = balanced("train", 8, 4)
    folder = write_dataset(tmp_path / "d", {"train": train, "test": [Rec("t", 0, image=b"image of train/0")]})
    result = validate(str(folder), ValidateConfig(validation_policy={"leakage": "warn", "empty_class": "ignore"}))
    assert result.passed and {f.kind: f.severity for f in result.findings} == {
        "leakage": "warn",
        "empty_class": "ignore",
    }
    assert result.policy["label_conflict"] == "error" and set(result.policy) == set(policy.KINDS)
    with pytest.raises(ConfigError, match="validate.validation_policy: unknown kind 'leak'; valid kinds: leakage, "):
        ValidateConfig(validation_policy={"leak": "warn"})
    with pytest.raises(ConfigError, match="leakage: unknown level 'fatal'; expected one of error, warn, ignore"):
        ValidateConfig(validation_policy={"leakage": "fatal"})


def test_allowlisted_keys_leave_findings_and_an_emptied_finding_disappears(tmp_path):
    train = balanced("train", 8, 4)
    test = [Rec("test/x", 0, image=b"image of train/0"), Rec("test/y", 1, image=b"image of train/1")]
    test += [Rec("test/z", 2), Rec("test/w", 3)]
    folder = write_dataset(tmp_path / "d", {"train": train, "test": test})
    some = validate(str(folder), ValidateConfig(allow=("train/0", "test/x")))
    leak = _only(some, "leakage")
    assert set(leak.records) == {"train/1", "test/y"} and leak.count == 2 and leak.allowed == 2
    gone = validate(str(folder), ValidateConfig(allow=("train/0", "test/x", "train/1", "test/y")))
    assert gone.findings == () and gone.passed and gone.allowlisted == 4


def test_a_finding_lists_at_most_max_records_and_counts_them_all(tmp_path):
    train = balanced("train", 40, 4)
    test = [Rec(f"test/{i}", r.label, image=f"image of {r.key}".encode()) for i, r in enumerate(train[:30])]
    result = validate(str(write_dataset(tmp_path / "d", {"train": train, "test": test})), ValidateConfig(max_records=5))
    leak = _only(result, "leakage")
    assert len(leak.records) == 5 and leak.count == 60


def _detection(tmp_path):
    recs = [
        Rec("img/0", NO_LABEL, height=100, width=200, boxes=[(0.1, 0.1, 0.5, 0.3)], box_labels=[0]),
        Rec(
            "img/1",
            NO_LABEL,
            height=100,
            width=200,
            boxes=[(0.2, 0.2, 0.6, 0.6), (0.0, 0.0, 1.0, 1.0)],
            box_labels=[1, 0],
        ),
        Rec("img/2", NO_LABEL, height=100, width=200, boxes=[(0.5, 0.5, 0.505, 0.9)], box_labels=[1]),  # 0.5 px high
        Rec("img/3", NO_LABEL, height=100, width=200, boxes=[], box_labels=[]),  # a negative
    ]
    return write_dataset(tmp_path / "det", {"train": recs}, ("square", "circle"), task="detection")


def test_a_detection_dataset_s_box_statistics(tmp_path):
    result = validate(str(_detection(tmp_path)))
    train = result.stats.splits["train"]
    assert train.class_unit == "objects" and train.unlabelled == 4
    assert train.class_counts == {"square": 2, "circle": 2} and train.class_shares == {"square": 0.5, "circle": 0.5}
    boxes = train.boxes
    assert (boxes.images, boxes.boxes) == (4, 4)
    assert boxes.per_image.buckets == {"0": 1, "1": 2, "2-3": 1} and boxes.per_image.max == 2
    # img/0: 40 x 40 px (share 0.08); img/1: 80 x 40 px and the whole image 200 x 100; img/2: 80 x 0.5 px
    assert boxes.side_px.min == pytest.approx(6.32, abs=0.01) and boxes.side_px.max == pytest.approx(141.42, abs=0.01)
    assert boxes.image_share.max == pytest.approx(1.0) and boxes.image_share.buckets["0.05-0.1"] == 1
    assert boxes.aspect.buckets == {"0.8-1.25": 1, "2-4": 2, ">=4": 1}


def test_degenerate_boxes_are_found(tmp_path):
    result = validate(str(_detection(tmp_path)))
    found = _only(result, "degenerate_box")
    assert set(found.records) == {"img/1", "img/2"} and found.split == "train" and found.severity == "warn"
    assert "under 2 px: 1" in found.message and "the whole image: 1" in found.message
    assert "empty_class" not in _kinds(result)


def test_extra_columns_are_counted_and_bounded(tmp_path):
    recs = [Rec(f"r/{i}", i % 2, extra={"who": f"p{i % 3}", "score": 0.5, "id": i}) for i in range(30)]
    result = validate(
        str(write_dataset(tmp_path / "d", {"train": recs}, ("a", "b"))), ValidateConfig(max_column_values=2)
    )
    columns = result.stats.splits["train"].columns
    assert set(columns) == {"who", "score", "id"}
    assert columns["who"].values == {"p0": 10, "p1": 10} and columns["who"].other == 10 and columns["who"].distinct == 3
    assert columns["score"].values == {"0.5": 30} and columns["id"].distinct == 30 and not columns["id"].capped
