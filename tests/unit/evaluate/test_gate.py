"""The blessing gate: fail closed, value and change thresholds, loss is lower-is-better."""

import pytest

from components.evaluate.gate import ThresholdError, decide, validate_thresholds
from trainer.tasks import get_task

GOOD = {"accuracy": 0.9, "loss": 0.3, "macro_f1": 0.88, "top_k_accuracy": 0.99}
# The gate assumes no metric: the classification task says which direction each one is better in.
KNOWN = get_task("classification").directions()


def decide_(metrics, values, changes, baseline):
    return decide(metrics, values, changes, baseline, KNOWN)


def validate_(values, changes):
    return validate_thresholds(values, changes, KNOWN)


def test_directions_come_from_the_task():
    # With a task where accuracy is lower-is-better, the same bound judges the other way round.
    assert decide(GOOD, {"accuracy": 0.95}, {}, None, {"accuracy": False}).blessed
    assert not decide(GOOD, {"accuracy": 0.95}, {}, None, KNOWN).blessed


def test_no_thresholds_is_not_blessed():
    d = decide_(GOOD, {}, {}, baseline={"accuracy": 0.1})
    assert not d.blessed
    assert "no thresholds configured" in d.reasons[0]
    assert decide_(GOOD, None, None, None).blessed is False


def test_value_thresholds_pass_and_fail():
    assert decide_(GOOD, {"accuracy": 0.85}, {}, None).blessed
    failed = decide_(GOOD, {"accuracy": 0.95, "macro_f1": 0.5}, {}, None)
    assert not failed.blessed
    assert [c.passed for c in failed.checks] == [False, True]
    assert any(r.startswith("FAIL: accuracy") for r in failed.reasons)


def test_loss_is_an_upper_bound():
    assert decide_(GOOD, {"loss": 0.5}, {}, None).blessed
    assert not decide_(GOOD, {"loss": 0.2}, {}, None).blessed


def test_change_thresholds_against_prod():
    prod = {"accuracy": 0.905, "loss": 0.25}
    # a drop of half a point is tolerated by -0.01, not by 0.0
    assert decide_(GOOD, {}, {"accuracy": -0.01}, prod).blessed
    assert not decide_(GOOD, {}, {"accuracy": 0.0}, prod).blessed
    # loss 0.3 vs prod 0.25 is a worsening of 0.05
    d = decide_(GOOD, {}, {"loss": -0.01}, prod)
    assert not d.blessed
    assert d.checks[0].baseline == 0.25


def test_no_baseline_judges_by_value_thresholds_and_says_so():
    d = decide_(GOOD, {"accuracy": 0.8}, {"accuracy": 0.0}, None)
    assert d.blessed
    assert any("no baseline" in r for r in d.reasons)
    assert [c.kind for c in d.checks] == ["value"]


def test_only_change_thresholds_and_no_baseline_fails_closed():
    d = decide_(GOOD, {}, {"accuracy": 0.0}, None)
    assert not d.blessed
    assert any("nothing judged" in r for r in d.reasons)


def test_baseline_without_the_metric_fails_closed():
    d = decide_(GOOD, {"accuracy": 0.5}, {"accuracy": -0.01}, {})
    assert not d.blessed
    assert any("baseline (prod) has no accuracy" in r for r in d.reasons)


def test_unknown_metric_is_a_clear_error():
    with pytest.raises(ThresholdError, match="unknown metric 'acuracy'.*known metrics: accuracy"):
        validate_({"acuracy": 0.8}, None)
    with pytest.raises(ThresholdError, match="change_thresholds"):
        decide_(GOOD, {}, {"f2": 0.1}, None)
    with pytest.raises(ThresholdError, match="finite number"):
        validate_({"accuracy": "high"}, None)


def test_evaluate_config_rejects_unknown_metrics_at_load():
    from trainer.config import ConfigError, EvaluateConfig

    with pytest.raises(ConfigError, match="evaluate.value_thresholds: unknown metric 'acuracy'"):
        EvaluateConfig.from_yaml("value_thresholds: {acuracy: 0.8}\n")
    cfg = EvaluateConfig.from_yaml("value_thresholds: {accuracy: 0.8}\nchange_thresholds: {loss: 0.0}\n")
    assert dict(cfg.value_thresholds) == {"accuracy": 0.8}


def test_each_check_is_a_record_written_as_the_blessing_file_has_it():
    from components.evaluate.gate import GateCheck

    d = decide({"accuracy": 0.9}, {"accuracy": 0.8}, {"accuracy": -0.01}, {"accuracy": 0.95}, KNOWN)
    assert all(isinstance(c, GateCheck) for c in d.checks)
    written = d.to_dict()["checks"]
    assert written == [
        {"kind": "value", "metric": "accuracy", "threshold": 0.8, "value": 0.9, "baseline": None, "passed": True},
        {"kind": "change", "metric": "accuracy", "threshold": -0.01, "value": 0.9, "baseline": 0.95, "passed": False},
    ]
    assert type(d).from_dict(d.to_dict()) == d  # the blessing file reads back to the same decision
