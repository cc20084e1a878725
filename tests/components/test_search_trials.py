"""A search's rungs trained for real, in this process (budgets in steps, so the rungs are short):
each trial continues its own schedule from its own checkpoints, a trial that fails is a failed row
and the search goes on, the selection reads the rows, the exit task's join picks and publishes."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from components.sweep import search_run
from tests.datasets import write_test_dataset
from trainer import storage

SPEC = {
    "space": {"learning_rate": [0.01, 0.003, 0.001]},
    "sampling": "grid",
    "rungs": 2,
    "eta": 3,
    "max_budget": "12 steps",
    "objective": "frontier",
    "metric": "accuracy",
    "fixed": {"accelerator": "cpu"},
}


@pytest.mark.slow
def test_a_search_runs_its_rungs_and_a_promoted_trial_continues_its_own_schedule(tmp_path):
    dataset = write_test_dataset(tmp_path / "ds", {"train": 64, "validation": 16, "test": 32})
    defaults, context = search_run.search_settings("mnist_cnn", {}, 16, 0.001, "test", 0)
    plan, folder = search_run.plan_and_record(SPEC, defaults, context, str(tmp_path / "rows"), None, 2)
    assert [r.stop for r in plan.rungs] == [4, 12] and plan.unit == "steps"
    keys = [t.key for t in plan.trials]
    # The third trial's checkpoint folder holds another training: its training fails, it is a row.
    broken = storage.join(search_run.trial_dir(folder, keys[2]), "checkpoints")
    storage.write_json(storage.join(broken, "state.json"), {"config_fingerprint": "another"})

    def run(key, rung):
        out = tmp_path / "tasks" / f"{key}-{rung}"
        return search_run.run_trial((str(dataset), str(dataset)), (str(out), str(out)), folder, key, rung, time.time())

    first = {key: run(key, 0) for key in keys}
    for key in keys[:2]:
        row = first[key]
        assert (row.status, row.steps, row.planned_steps) == ("ok", 4, None) and 0 <= row.quality <= 1
        assert row.seconds == row.rung_s > 0 and row.cost > 0  # billed at cpu-1's price
    failed = first[keys[2]]
    assert failed.status == "failed" and "holds checkpoints of another config" in failed.reason
    assert failed.quality is None
    # A re-run of the rung (an interrupted search) gets the finished rows back without training.
    assert run(keys[0], 0) == first[keys[0]]

    (promoted,) = search_run.select(folder, 0)  # 3 trials, eta 3: one goes on, never the failed one
    best = promoted["key"]
    assert best in keys[:2] and first[best].quality == max(first[k].quality for k in keys[:2])
    second = run(best, 1)
    assert second.status == "ok" and second.steps == 12  # from step 4, to the schedule's end
    training = json.loads((tmp_path / "tasks" / f"{best}-1" / "training.json").read_text())
    assert training["resumed_from_step"] == 4 and training["stopping"]["reason"] == "completed"
    assert [h["step"] for h in training["history"]] == [4, 8, 12]  # epochs of 4: each rung ends on one
    assert second.seconds == pytest.approx(first[best].seconds + second.rung_s)

    outcome = search_run.join(folder)
    assert outcome.complete and outcome.notes == [] and outcome.reached == 1
    assert outcome.choice["key"] in keys[:2]
    assert {r.key: r.status for r in outcome.results} == {keys[0]: "ok", keys[1]: "ok", keys[2]: "failed"}
    assert outcome.saved["spent_s"] < outcome.saved["full_s"] or outcome.saved["full_s"] is None
    config = yaml.safe_load(storage.read_text(storage.join(folder, search_run.BEST_CONFIG)))
    assert (config["epochs"], config["steps_per_epoch"], config["time_budget"]) == (3, 4, "auto")
