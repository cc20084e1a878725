"""A search as it runs, without training: the plan on record, the trials' configs per rung, the
selection between rungs over ok, stopped, failed and lost trials, and the exit task's join."""

from __future__ import annotations

import json

import pytest
import yaml

from components.sweep.search import folder as search_folder
from components.sweep.search import run as search_run
from components.sweep.search.page import render_html, render_markdown
from components.sweep.search.space import SearchError
from trainer import storage

SPEC = {
    "space": {"learning_rate": [0.001, 0.003, 0.03, 0.3]},
    "sampling": "grid",
    "rungs": 2,
    "eta": 2,
    "max_budget": "120s",
    "objective": "frontier",
    "metric": "accuracy",
    "fixed": {"accelerator": "cpu"},
}


def _plan(tmp_path, spec=SPEC, rungs=2):
    defaults, context = search_folder.search_settings("mnist_cnn", {}, 32, 0.001, "digits", 0)
    return search_folder.plan_and_record(spec, defaults, context, str(tmp_path), None, rungs)


def _row(folder, plan, index, rung, status="ok", quality=None, seconds=60.0, **fields):
    key = plan.trials[index].key
    result = search_folder.TrialResult(
        key=key, rung=rung, status=status, quality=quality, seconds=seconds, cost=seconds * 0.07 / 3600,
        metrics={} if quality is None else {"accuracy": quality}, **fields,
    )  # fmt: skip
    storage.write_json(search_folder.row_uri(folder, key, rung), result.to_dict())
    return key


def test_the_plan_is_written_once_in_a_folder_of_its_own(tmp_path):
    plan, folder = _plan(tmp_path)
    again, same = _plan(tmp_path)
    assert same == folder and again == plan and search_folder.read_plan(folder) == plan
    other = _plan(tmp_path, {**SPEC, "max_budget": "240s"})[1]
    assert other != folder  # another search, another folder
    with pytest.raises(SearchError, match="compiled with 3; set rungs: 3, or compile with SEARCH_RUNGS=2"):
        _plan(tmp_path, rungs=3)


def test_a_trial_keeps_its_schedule_and_stops_at_each_rung_s_budget(tmp_path):
    plan, _ = _plan(tmp_path)
    key = plan.trials[0].key
    first, last = search_folder.trial_config(plan, key, 0), search_folder.trial_config(plan, key, 1)
    assert first["time_budget"] == last["time_budget"] == "120s"
    assert (first["stop_at"], last["stop_at"]) == ("60s", "auto")
    assert first["epochs"] is None and first["steps_per_epoch"] is None  # the budget lays the schedule out
    assert {k: v for k, v in first.items() if k != "stop_at"} == {k: v for k, v in last.items() if k != "stop_at"}


def test_the_selection_promotes_the_best_ok_trials_never_a_failed_stopped_or_lost_one(tmp_path):
    plan, folder = _plan(tmp_path, {**SPEC, "space": {"learning_rate": [0.001, 0.003, 0.01, 0.03, 0.3]}}, rungs=2)
    _row(folder, plan, 0, 0, quality=0.80)
    _row(folder, plan, 1, 0, quality=0.90)
    _row(folder, plan, 2, 0, status="stopped", quality=0.95, reason="early stopping")
    _row(folder, plan, 3, 0, status="failed", reason="TrainingDivergedError: the loss became NaN")
    # trial 4 left no row: its pod was killed
    chosen = search_run.select(folder, 0)
    assert [c["key"] for c in chosen] == [plan.trials[1].key, plan.trials[0].key]
    assert chosen[0]["folder"] == folder and chosen[0]["accelerator_type"] == ""
    assert storage.read_json(f"{folder}/rung-1.json") == [c["key"] for c in chosen]


def test_the_join_gives_the_frontier_the_pick_and_what_was_saved(tmp_path):
    plan, folder = _plan(tmp_path)
    for i, quality in enumerate((0.80, 0.90, 0.30, 0.10)):
        _row(folder, plan, i, 0, quality=quality, seconds=60.0, model_uri=f"file:///m/{i}/0")
    search_run.select(folder, 0)
    _row(folder, plan, 1, 1, quality=0.95, seconds=120.0, model_uri="file:///m/1/1")
    _row(folder, plan, 0, 1, quality=0.85, seconds=120.0)
    outcome = search_run.join(folder)
    assert outcome.complete and outcome.reached == 1 and outcome.notes == []
    assert outcome.choice["key"] == plan.trials[1].key
    assert plan.trials[1].key in outcome.frontier_cost and plan.trials[3].key not in outcome.frontier_cost
    assert outcome.saved["spent_s"] == pytest.approx(60 * 2 + 120 * 2)
    assert outcome.saved["full_s"] == pytest.approx(120 * 4)
    record = storage.read_json(f"{folder}/search.json")
    assert record["choice"]["model_uri"] == "file:///m/1/1" and len(record["trials"]) == 4
    best = yaml.safe_load((tmp_path / folder.rsplit("/", 1)[1] / "best.yaml").read_text())
    assert best["learning_rate"] == pytest.approx(plan.trials[1].cell.learning_rate) and best["time_budget"] == "120s"
    md, html = render_markdown(outcome), render_html(outcome)
    assert "Pick: " in md and "spent " in md and md.count("\n| t0") == 4
    assert html.count("<svg") == 2 and "frontier" in html


def test_a_killed_trial_ends_the_search_at_its_rung_with_the_frontier_of_what_finished(tmp_path):
    plan, folder = _plan(tmp_path)
    for i, quality in enumerate((0.80, 0.90, 0.30, 0.10)):
        _row(folder, plan, i, 0, quality=quality)
    promoted = [c["key"] for c in search_run.select(folder, 0)]
    _row(folder, plan, plan.trials.index(plan.trial(promoted[0])), 1, quality=0.93, seconds=120.0)
    outcome = search_run.join(folder)  # the other promoted trial's pod was killed: no row
    assert not outcome.complete
    assert outcome.notes == [f"the search ended at rung 1: 1 trial(s) left no result ({promoted[1]})"]
    lost = next(r for r in outcome.results if r.key == promoted[1])
    assert lost.status == "failed" and outcome.choice["key"] == promoted[0]
    assert json.loads(json.dumps(search_run.record(outcome)))["complete"] is False


@pytest.mark.parametrize(
    ("space", "named"),
    [
        ({"learning_rate": [0.001, 1000.0]}, "train.learning_rate: must be in (0, 10), got 1000.0"),
        ({"batch_size_per_replica": [16, 100000]}, "train.batch_size_per_replica: must be in 1..65536"),
    ],
)
def test_a_trial_the_trainer_would_refuse_fails_the_planning_naming_it(tmp_path, space, named):
    with pytest.raises(SearchError) as err:
        _plan(tmp_path, {**SPEC, "space": space})
    assert str(err.value).startswith("search trial t01 ") and named in str(err.value)
    assert not list(tmp_path.rglob("plan.json"))  # nothing recorded
