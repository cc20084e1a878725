"""Slices without a model: keys, size buckets, the table's order, what a record keeps, the gate's rules."""

import pytest

from components.evaluate.gate import Decision, ThresholdError, decide
from components.evaluate.slice_gate import check_settings, check_values, slice_checks, with_slices
from trainer import slices
from trainer.slices import SliceRow

DIRECTIONS = {"accuracy": True, "loss": False}


def test_size_buckets_by_the_shorter_side():
    assert slices.size_labels((64, 256, 1024)) == ["<64", "64-255", "256-1023", ">=1024"]
    assert [slices.size_bucket(h, w) for h, w in [(28, 28), (64, 900), (300, 2000), (1024, 1024)]] == [
        "<64", "64-255", "256-1023", ">=1024",
    ]  # fmt: skip


def test_a_record_s_slices_are_its_extra_columns_and_its_size():
    features = {"image/height": [480], "image/width": [640], "extra/camera": [b"night"], "extra/class": [b"x"]}
    assert slices.example_slices(features) == ["camera:night", "extra/class:x", "size:256-1023"]
    assert slices.example_slices(features, columns=["camera"]) == ["camera:night", "size:256-1023"]


def test_small_slices_are_listed_not_scored_and_the_worst_comes_first():
    members = {"camera:a": list(range(40)), "camera:b": list(range(40, 80)), "camera:c": [80, 81]}
    score = {"camera:a": 0.9, "camera:b": 0.6, "camera:c": 0.0}
    rows = slices.score_slices(members, lambda idx: {"accuracy": 0.9 if idx[0] < 40 else 0.6}, min_size=30)
    ordered = slices.worst_first(rows, [("accuracy", True)])
    assert [r.key for r in ordered] == ["camera:b", "camera:a", "camera:c"] and not ordered[-1].scored
    assert {r.key: r.metrics.get("accuracy", 0.0) for r in rows} == score


def test_recorded_slice_metrics_read_back_whatever_the_value_holds():
    rows = [SliceRow("site:a/b", "site", "a/b", 50, {"accuracy": 0.5}), SliceRow("class:x", "class", "x", 3, {})]
    recorded = slices.recorded_metrics(rows)
    assert recorded == {"slice/site:a/b/accuracy": 0.5}
    assert slices.parse_recorded({**recorded, "accuracy": 0.9}) == {"site:a/b": {"accuracy": 0.5}}


ROWS = [
    SliceRow("camera:night", "camera", "night", 40, {"accuracy": 0.5, "loss": 1.0}),
    SliceRow("camera:day", "camera", "day", 80, {"accuracy": 0.95, "loss": 0.1}),
    SliceRow("camera:dusk", "camera", "dusk", 5, {}),
]


def _blessed() -> Decision:
    return decide({"accuracy": 0.8}, {"accuracy": 0.7}, {}, None, DIRECTIONS)


def test_a_column_rule_judges_every_scored_slice_and_one_failing_slice_takes_the_blessing():
    checks, reasons = slice_checks(ROWS, {"camera": {"accuracy": 0.8}}, {}, None, DIRECTIONS)
    decision = with_slices(_blessed(), checks, reasons)
    assert decision.blessed is False and decision.reasons[0].startswith("not blessed")
    assert [c.slice for c in checks if not c.passed] == ["camera:night"]
    assert any("too small to be scored: camera:dusk" in r for r in reasons)
    # a one-slice rule on a slice too small to score fails closed
    checks, _ = slice_checks(ROWS, {"camera:dusk": {"accuracy": 0.1}}, {}, None, DIRECTIONS)
    assert [c.passed for c in checks] == [False]
    # loss is a ceiling
    checks, _ = slice_checks(ROWS, {"camera:day": {"loss": 0.2}}, {}, None, DIRECTIONS)
    assert [c.passed for c in checks] == [True]


def test_slice_rules_do_not_bless_on_their_own():
    unconfigured = decide({"accuracy": 0.8}, {}, {}, None, DIRECTIONS)
    checks, reasons = slice_checks(ROWS, {"camera:day": {"accuracy": 0.5}}, {}, None, DIRECTIONS)
    assert with_slices(unconfigured, checks, reasons).blessed is False


def test_the_comparison_with_prod_per_slice():
    prod = {"accuracy": 0.7, "slice/camera:night/accuracy": 0.6, "slice/camera:day/accuracy": 0.9}
    checks, reasons = slice_checks(ROWS, {}, {"accuracy": -0.05}, prod, DIRECTIONS)
    assert [(c.slice, c.passed) for c in checks] == [("camera:night", False), ("camera:day", True)]
    assert reasons[-1].startswith("FAIL: 1 of 2 slice comparison(s)")
    _, reasons = slice_checks(ROWS, {}, {"accuracy": -0.05}, {"accuracy": 0.7}, DIRECTIONS)
    assert "no per-slice metrics" in reasons[0]
    _, reasons = slice_checks(ROWS, {}, {"accuracy": -0.05}, None, DIRECTIONS)
    assert "prod serves no model yet" in reasons[0]


@pytest.mark.parametrize(
    "thresholds, changes, message",
    [
        ({"camera": {"ap": 0.5}}, {}, "unknown slice metric 'ap'; slice metrics of classification: accuracy, loss"),
        ({"site": {"accuracy": 0.5}}, {}, "column 'site', which no slice has; columns: camera, class, size"),
        ({"camera": {"accuracy": "high"}}, {}, "must be a finite number"),
        ({}, {"top_k_accuracy": 0.0}, "slice_change_thresholds names unknown slice metric"),
    ],
)
def test_bad_rules_name_what_there_is(thresholds, changes, message):
    with pytest.raises(ThresholdError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_settings(thresholds, changes, "classification", ("accuracy", "loss"), {"camera", "class", "size"})


def test_a_task_without_slices_refuses_slice_rules_and_an_unknown_value_is_named():
    with pytest.raises(ThresholdError, match="scores no slices"):
        check_settings({"camera": {"accuracy": 0.5}}, {}, "toy", (), {"camera"})
    with pytest.raises(ThresholdError, match="camera: camera:day, camera:dusk, camera:night"):
        check_values({"camera:noon": {"accuracy": 0.5}}, ROWS)
