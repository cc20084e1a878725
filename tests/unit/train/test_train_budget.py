"""A training with a time budget, killed mid-way and resumed: one plan, the time spent counted, the
schedule laid out once; progress with no epochs set; the budget and the stop in training.json and
the model card."""

import json
import sys

import pytest

from tests.datasets import write_test_dataset
from tests.preempt import kill_at_first_checkpoint
from trainer.budget.limits import MIN_BUDGET_S
from trainer.config import TrainConfig
from trainer.train import train

pytestmark = pytest.mark.slow

BUDGET = TrainConfig(
    epochs=None,
    time_budget=f"{MIN_BUDGET_S:.0f}s",
    patience="2",  # early stopping on whatever the plan's evaluations
    batch_size_per_replica=16,
    checkpoint_every_steps=8,
    seed=3,
)


def test_a_killed_budgeted_training_resumes_its_plan_and_counts_the_time_it_spent(tmp_path, monkeypatch):
    # Its precision measurement stays its own (the killed process and this one share it).
    monkeypatch.setenv("LTP_PRECISION_CACHE", str(tmp_path / "precision.json"))
    dataset = str(write_test_dataset(tmp_path / "ds", {"train": 96, "validation": 32}))
    model_dir = tmp_path / "model"
    config_file = tmp_path / "train.yaml"
    config_file.write_text(BUDGET.to_yaml())
    command = [sys.executable, "-m", "trainer", "--dataset", dataset, "--model-dir", str(model_dir)]
    kill_at_first_checkpoint([*command, "--config", str(config_file), "--log-level", "WARNING"],
                             model_dir / "checkpoints" / "checkpoint")  # fmt: skip
    state = json.loads((model_dir / "checkpoints" / "state.json").read_text())
    plan, spent = state["budget"], state["spent_s"]
    assert plan["steps"] == plan["evaluations"] * plan["steps_per_evaluation"] > 0
    assert 0 < spent < MIN_BUDGET_S  # the killed process's start-up and calibration, at least

    reports = []
    summary = train(dataset, str(model_dir), BUDGET, on_progress=lambda done, total, **fields: reports.append(
        (done, total, fields)))  # fmt: skip
    budget, stopping = summary.budget, summary.stopping
    # The same plan, not a new calibration: the schedule is the one the killed run laid out.
    assert {k: budget[k] for k in ("steps", "evaluations", "steps_per_evaluation", "step_s")} == {
        k: plan[k] for k in ("steps", "evaluations", "steps_per_evaluation", "step_s")
    }
    assert summary.resumed_from_step > 0 and summary.epochs == plan["evaluations"]
    # The time the killed process spent counts: the whole training is the budget (with the
    # margin for a noisy machine), not the budget again from the restart.
    assert budget["actual_s"] >= spent and budget["actual_s"] < MIN_BUDGET_S * 1.5
    assert stopping["reason"] in ("completed", "budget", "early stopping")
    assert stopping["step"] == summary.steps <= stopping["planned_steps"] == plan["steps"]
    assert stopping["monitor"] == "val_accuracy" and stopping["best_step"] <= summary.steps
    # Progress with no epochs set: steps of the planned total, the last at the step it ended.
    reports = [r for r in reports if "plan" not in r[2]]
    assert reports and all(total == plan["steps"] for _, total, _ in reports[:-1])
    assert reports[-1][0] == summary.steps and any("eta_s" in fields for _, _, fields in reports)
    written = json.loads((model_dir / "training.json").read_text())
    assert written["budget"]["actual_s"] == budget["actual_s"] and written["stopping"] == stopping
    card = (model_dir / "model_card.md").read_text()
    assert f"- budget: time_budget {MIN_BUDGET_S:.0f}s: {plan['steps']} steps" in card
    assert f"- stopping: ended at step {summary.steps} of {plan['steps']}" in card


def test_the_plan_is_reported_before_the_first_step_it_buys(tmp_path, monkeypatch):
    # Its precision measurement stays its own: the process's cache is shared by the module's trainings.
    monkeypatch.setenv("LTP_PRECISION_CACHE", str(tmp_path / "precision.json"))
    dataset = str(write_test_dataset(tmp_path / "ds", {"train": 64, "validation": 16}))
    # A cap over a short schedule of its own: the plan is laid out as with any budget, and trains 8 steps.
    capped = BUDGET.replace(time_budget=f"<={MIN_BUDGET_S:.0f}s", epochs=2, steps_per_epoch=4, patience="off")
    reports = []
    summary = train(dataset, str(tmp_path / "model"), capped,
                    on_progress=lambda done, total, **fields: reports.append((done, fields)))  # fmt: skip
    planned = [i for i, (_, fields) in enumerate(reports) if "plan" in fields]
    trained = [i for i, (done, fields) in enumerate(reports) if done > 0]
    assert len(planned) == 1 and trained and planned[0] < trained[0]
    line = reports[planned[0]][1]["plan"]
    assert line.startswith(f"time_budget <={MIN_BUDGET_S:.0f}s buys {summary.budget['steps']:,} steps")
    assert summary.budget["steps"] == 8 and f"at {summary.budget['price_key']}" in line and "$" in line
