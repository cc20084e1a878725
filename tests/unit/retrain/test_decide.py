"""The retrain step's decision, through the library: fingerprints, drift records, bad input."""

import json
from pathlib import Path

import pytest

from components.retrain.__main__ import main as cli
from components.retrain.config import RetrainConfig
from components.retrain.run import DRIFT, NOTHING, RETRAIN, RetrainError, decide, default_drift, describe
from components.serving.stages import StageEntry, StageRegistry
from tests.retrain_stage import served_stage
from trainer.config import ConfigError


def _config(served, **fields):
    return RetrainConfig(stages_root=str(served.stages), **fields)


def test_the_data_the_served_model_was_trained_on_is_nothing_to_do_at_no_cost(tmp_path):
    served = served_stage(tmp_path)
    decision = decide(_config(served))
    assert decision.action == NOTHING
    assert decision.reason.startswith("nothing to do:") and "prod's classifier version 1" in decision.reason
    assert decision.source == str(served.source) and decision.fingerprint == decision.trained_fingerprint
    assert describe(decision)[1] == "accelerator time: $0.00 (no step asked for one)"
    # What a retraining would take is the served model's: its builder, convert settings, the task's gate.
    assert (decision.model, decision.split_by, decision.limit_per_split) == ("mnist_cnn", "content", 0)
    assert (decision.value_thresholds, decision.change_thresholds) == ({"accuracy": 0.8}, {"accuracy": -0.01})
    assert (decision.time_budget, decision.cost_budget) == ("10m", "auto")


def test_one_new_image_is_new_data_and_a_given_source_is_compared_as_well(tmp_path):
    served = served_stage(tmp_path)
    served.add_image()
    decision = decide(_config(served, retrain_budget="2.50"))
    assert decision.action == RETRAIN and decision.reason.startswith(f"retrain: {served.source} changed since")
    assert (decision.time_budget, decision.cost_budget) == ("auto", "2.50")
    assert "within $2.50" in describe(decision)[1] and "promote to demo" in describe(decision)[1]
    # Demo's candidate of an earlier retraining on this very data waits for its promotion: not again.
    candidate = tmp_path / "candidate"
    candidate.mkdir()
    trained = {"task": "classification", "model": "mnist_cnn", "dataset_fingerprint": decision.fingerprint}
    (candidate / "training.json").write_text(json.dumps(trained))
    entry = StageEntry("promote", 2, str(candidate), "run-2", model_name="classifier", task="classification")
    StageRegistry(str(served.stages)).record("demo", entry)
    waiting = decide(_config(served))
    assert (
        waiting.action == NOTHING and "demo's classifier version 2 was trained on this data already" in waiting.reason
    )
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "a").symlink_to(served.source / "a")
    assert decide(_config(served, source=str(other))).action == RETRAIN


def test_a_drift_alarm_without_new_data_is_recorded_and_ends_the_run(tmp_path):
    served = served_stage(tmp_path)
    folder = default_drift(str(served.stages), "classifier")
    (tmp_path / "stages" / "prod" / "drift" / "classifier").mkdir(parents=True)
    quiet = {"alarm": False, "checks": [{"name": "brightness", "alarm": False}]}
    (tmp_path / "stages" / "prod" / "drift" / "classifier" / "2026-01-01.json").write_text(json.dumps(quiet))
    assert decide(_config(served)).action == NOTHING
    alarm = {"alarm": True, "checks": [{"name": "brightness", "alarm": True}, {"name": "size", "alarm": False}]}
    (tmp_path / "stages" / "prod" / "drift" / "classifier" / "2026-01-02.json").write_text(json.dumps(alarm))
    decision = decide(_config(served))
    assert decision.action == DRIFT and "(brightness;" in decision.reason and "make select" in decision.reason
    assert decision.drift["alarm"] is True and decision.drift["file"].startswith(folder)
    served.add_image()  # new data wins: retraining on it is what can fix drift
    assert decide(_config(served)).action == RETRAIN


def test_a_model_trained_before_fingerprints_were_recorded_treats_its_data_as_new(tmp_path):
    served = served_stage(tmp_path, stage="staging", fingerprinted=False)
    decision = decide(_config(served))
    assert decision.action == RETRAIN and decision.trained_fingerprint is None
    assert "staging's classifier version 1 records no fingerprint" in decision.reason
    assert "trained before fingerprints were recorded" in decision.reason


@pytest.mark.parametrize(
    "case, message",
    [
        ("no stage", "no model 'classifier' at prod or staging under .*: run the main pipeline first"),
        ("unreadable source", r"source .*missing cannot be read \(.*\); fix the path .*\(nothing was converted\)"),
        ("bad drift record", r"drift record .*drift.json is not JSON .*; fix or remove it"),
    ],
)
def test_bad_input_is_one_line_naming_the_fix(tmp_path, case, message):
    served = served_stage(tmp_path / "served")
    fields = {
        "no stage": {"stages_root": str(tmp_path / "empty")},
        "unreadable source": {"source": str(tmp_path / "missing")},
        "bad drift record": {"drift": str(tmp_path / "drift.json")},
    }[case]
    (tmp_path / "drift.json").write_text("{not json")
    with pytest.raises(RetrainError, match=message) as err:
        decide(RetrainConfig(**{"stages_root": str(served.stages), **fields}))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "budget, message",
    [
        ("10s", "'10s' is under 30s.*a retraining needs at least one evaluation interval"),
        ("<=5m", "give a plain budget"),
        ("", "is empty"),
        ("$x", "'x' is not an amount"),
    ],
)
def test_a_budget_that_cannot_buy_an_evaluation_interval_is_refused(budget, message):
    with pytest.raises(ConfigError, match=f"retrain.retrain_budget: .*{message}"):
        RetrainConfig(retrain_budget=budget)


def test_how_far_a_candidate_goes_on_its_own_is_demo_unless_asked(tmp_path):
    served = served_stage(tmp_path)
    served.add_image()
    assert "promote to demo" in describe(decide(_config(served)))[1]
    assert "promote to demo -> staging -> prod" in describe(decide(_config(served, promote_to="prod")))[1]
    with pytest.raises(ConfigError, match=r"retrain.promote_to: expected one of \['demo', 'staging', 'prod'\]"):
        RetrainConfig(promote_to="canary")


def test_the_command_line_prints_the_reason_and_writes_the_record(tmp_path, capsys):
    served = served_stage(tmp_path / "served")
    capsys.readouterr()  # the served stage's own conversion
    assert cli(["--stages-root", str(served.stages), "--output", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert out.lstrip(" \r").startswith("nothing to do:") and "decision.json" in out  # after the progress line's erase
    assert json.loads((tmp_path / "out" / "decision.json").read_text())["action"] == NOTHING
    assert cli(["--stages-root", str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.startswith("error: no model 'classifier' at prod or staging")


def test_a_retraining_starts_from_the_served_model_s_weights_wherever_they_are_kept(tmp_path):
    served = served_stage(tmp_path)
    served.add_image()
    cold = decide(_config(served))
    assert cold.train_config_yaml == "" and cold.warm.startswith("cold start: prod's classifier version 1 left no")
    (served.model_dir / "model.keras").write_bytes(b"keras")
    from_run = decide(_config(served))
    assert from_run.train_config_yaml == f"warm_start: {served.model_dir}\n"
    assert from_run.warm == f"warm start from prod's classifier version 1 ({served.model_dir})"
    # The copy published with the version wins: the run's outputs may have expired.
    registry = StageRegistry(str(served.stages))
    kept = registry.publish_warm_start([str(tmp_path / "gone"), str(served.model_dir)], "prod", "classifier", 1)
    assert kept == registry.warm_start_dir("prod", "classifier", 1)
    assert decide(_config(served)).train_config_yaml == f"warm_start: {kept}\n"
    # A detector starts from its preset/ (its own weights option), not from model.keras.
    (tmp_path / "stages" / "prod" / "warm_start" / "classifier" / "1" / "preset").mkdir()
    detector = decide(_config(served))
    assert detector.model_options == {"weights": f"{kept}/preset"} and detector.train_config_yaml == ""


def test_publishing_warm_start_files_copies_what_is_there_and_nothing_without_them(tmp_path):
    registry = StageRegistry(str(tmp_path / "stages"))
    empty = tmp_path / "run"
    empty.mkdir()
    assert registry.publish_warm_start([str(empty)], "demo", "detector", 3) is None
    (empty / "preset").mkdir()
    (empty / "preset" / "config.json").write_text("{}")
    (empty / "model.keras").write_bytes(b"k")
    kept = registry.publish_warm_start([str(empty)], "demo", "detector", 3)
    assert sorted(p.relative_to(kept).as_posix() for p in Path(kept).rglob("*") if p.is_file()) == [
        "model.keras",
        "preset/config.json",
    ]


def test_new_data_is_converted_as_a_delta_of_the_served_dataset_when_it_can_be_one(tmp_path):
    from components.convert import convert
    from components.convert.config import ConvertConfig

    served = served_stage(tmp_path)
    served.add_image()
    # the stage's records come without keys.jsonl, as from a version before deltas: the whole source
    decision = decide(_config(served))
    assert decision.parent == "" and decision.conversion.startswith("convert the whole source: ")
    assert "lists no keys (keys.jsonl" in decision.conversion
    real = tmp_path / "real"
    convert(ConvertConfig(source=str(served.source), split_by="content", workers=1), str(real), log=lambda _: None)
    training = json.loads((served.model_dir / "training.json").read_text())
    (served.model_dir / "training.json").write_text(json.dumps({**training, "dataset": str(real)}))
    served.add_image(name="newer.png", value=100)
    decision = decide(_config(served))
    assert decision.action == RETRAIN and decision.parent == str(real)
    assert decision.conversion == f"convert only what {real} lacks (a delta: its records are reused, not read)"
    assert decision.conversion in describe(decision)
    other = tmp_path / "other"
    other.mkdir()
    (other / "a").symlink_to(served.source / "a")
    assert decide(_config(served, source=str(other))).parent == ""  # another source: no parent
