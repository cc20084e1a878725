"""A search's rung stop (``TrainConfig.stop_at``): a training stopped at a point of its budget's time
and continued by a new process from its checkpoints, on the same plan; stop_at outside the
fingerprint; its bad values; epochs under a cap budget."""

import hashlib
import json
from types import SimpleNamespace

import pytest

from tests.datasets import write_test_dataset
from trainer.budget import layout, limits
from trainer.budget.layout import plan
from trainer.config import ConfigError, TrainConfig
from trainer.errors import TrainingError

# The trial's own schedule: 3 epochs of 16 steps, one step per execution (the guard looks at every
# step), kept by the cap; patience off (3 evaluations would leave it off anyway).
TRIAL = dict(
    epochs=3,
    steps_per_epoch=16,
    steps_per_execution=1,
    batch_size_per_replica=16,
    precision="float32",  # no second policy to time
    patience="off",
    time_budget="<=540s",
    seed=3,
)
OWN_STEPS = 3 * 16


class TickingClock:
    """The budget's clock, one second further at every reading: where a rung stops depends on the
    training's progress (the guard reads it after every step), not on this machine's speed.
    """

    def __init__(self, start: float) -> None:
        self.now = start

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


DEADLINE = layout.Deadline


def _ticking(monkeypatch, start: float) -> None:
    """The budget's clocks of the next training tick from ``start`` (its process's start)."""
    clock = TickingClock(start)
    monkeypatch.setattr(layout, "Deadline", lambda *args, **kwargs: DEADLINE(*args, **kwargs, clock=clock))


def _state(checkpoints) -> dict:
    return json.loads((checkpoints / "state.json").read_text())


@pytest.mark.slow
def test_a_rung_stops_the_trial_and_the_next_goes_on_from_its_step_on_the_same_plan(tmp_path, monkeypatch):
    import tensorflow as tf

    from trainer.train import train

    dataset = str(write_test_dataset(tmp_path / "ds", {"train": 96, "validation": 32}))
    checkpoints = tmp_path / "trial" / "checkpoints"

    # Rung 0: 60 s of the training's time (its clock ticks a second a reading).
    _ticking(monkeypatch, 1000.0)
    first = train(dataset, str(tmp_path / "rung0"), TrainConfig(**TRIAL, stop_at="60s"),
                  checkpoint_dir=str(checkpoints), started_at=1000.0)  # fmt: skip
    plan0, stop0 = first.budget, first.stopping
    assert (plan0["steps"], plan0["evaluations"], plan0["steps_per_evaluation"]) == (OWN_STEPS, 3, 16)  # its own
    assert stop0["reason"] == "rung stop" and stop0["stop_at"] == "60s"
    assert 0 < first.steps == stop0["step"] < stop0["planned_steps"] == OWN_STEPS
    # The checkpoint the next rung starts from is the stop's step, and state.json keeps the plan
    # and the time spent, the rung's export included (written after it).
    assert tf.train.latest_checkpoint(str(checkpoints)).endswith(f"ckpt-{first.steps}")
    state0 = _state(checkpoints)
    assert state0["budget"] == {k: v for k, v in plan0.items() if not k.startswith("actual_")}
    assert state0["spent_s"] >= first.budget["actual_s"] > 0
    assert state0["history"][-1]["step"] == first.steps
    rung0 = json.loads((tmp_path / "rung0" / "training.json").read_text())
    assert rung0["stopping"] == stop0

    # Rung 1, a new process (another start of its clock) into a new model folder, with a later stop.
    _ticking(monkeypatch, 5000.0)
    second = train(dataset, str(tmp_path / "rung1"), TrainConfig(**TRIAL, stop_at="300s"),
                   checkpoint_dir=str(checkpoints), started_at=5000.0)  # fmt: skip
    plan1, stop1 = second.budget, second.stopping
    assert second.config_fingerprint == first.config_fingerprint
    assert second.resumed_from_step == first.steps  # not 0
    # The same plan, read back (no new calibration): the same steps, so the same schedule.
    same = ("steps", "evaluations", "steps_per_evaluation", "step_s", "eval_s", "export_s", "predicted_s")
    assert {k: plan1[k] for k in same} == {k: plan0[k] for k in same}
    # It ends where one uninterrupted run of the plan does, its optimizer's step (the learning
    # rate's position) going on from the stop: epochs end at the same steps.
    assert second.steps == stop1["step"] == stop1["planned_steps"] == OWN_STEPS
    assert stop1["reason"] == "completed"
    assert [row["step"] for row in second.history] == [16, 32, 48]
    assert second.epochs == 3 and second.steps_per_epoch == 16
    # The first rung's time counts: this process started with it spent.
    state1 = _state(checkpoints)
    assert state1["spent_before_s"] == state0["spent_s"]
    assert plan1["actual_s"] > state0["spent_s"]
    # The first rung's folder is its own result: a retried rung gets it back (1m is its 60s), a
    # later rung is refused there, told to go on in a new folder from the trial's checkpoints.
    again = train(dataset, str(tmp_path / "rung0"), TrainConfig(**TRIAL, stop_at="1m"), checkpoint_dir=str(checkpoints))
    assert again.stopping == stop0 and again.finished_at == first.finished_at
    with pytest.raises(TrainingError, match=f"stopped at stop_at 60s \\(step {first.steps}\\).*checkpoint_dir="):
        train(dataset, str(tmp_path / "rung0"), TrainConfig(**TRIAL, stop_at="300s"))


@pytest.mark.slow
def test_a_rung_stop_in_steps_needs_no_budget_and_the_next_process_goes_on_from_that_step(tmp_path):
    from trainer.train import train

    dataset = str(write_test_dataset(tmp_path / "ds", {"train": 96, "validation": 32}))
    checkpoints = str(tmp_path / "trial" / "checkpoints")
    own = {**TRIAL, "time_budget": "auto"}
    first = train(dataset, str(tmp_path / "rung0"), TrainConfig(**own, stop_at="20 steps"), checkpoint_dir=checkpoints)
    assert (first.steps, first.stopping["reason"], first.stopping["stop_at"]) == (20, "rung stop", "20 steps")
    assert first.stopping["planned_steps"] == OWN_STEPS and first.budget is None
    second = train(dataset, str(tmp_path / "rung1"), TrainConfig(**own), checkpoint_dir=checkpoints)
    assert second.resumed_from_step == 20 and second.config_fingerprint == first.config_fingerprint
    assert (second.steps, second.stopping["reason"]) == (OWN_STEPS, "completed")
    assert second.history[-1]["step"] == OWN_STEPS
    # A retried rung gets its result back; the folder refuses a later stop.
    assert train(dataset, str(tmp_path / "rung0"), TrainConfig(**own, stop_at="20 step")).stopping == first.stopping
    with pytest.raises(TrainingError, match="stopped at stop_at 20 steps"):
        train(dataset, str(tmp_path / "rung0"), TrainConfig(**own, stop_at="40 steps"))


def test_stops_compare_by_the_point_they_stop_at():
    assert limits.Stop.parse("60s") == limits.Stop.parse("1m") == limits.Stop(seconds=60.0)
    assert limits.Stop.parse("120 steps") == limits.Stop.parse("120step") == limits.Stop(steps=120)
    assert limits.Stop.parse("auto") is None
    config = TrainConfig(stop_at="120 steps")  # no budget needed for a step
    assert (config.limits.stop_step, config.limits.stop_s) == (120, None)


def test_the_step_stop_stops_at_its_step_as_a_rung_stop():
    from trainer.budget.stopping import StepStop

    guard = StepStop(20)
    model = _guarded(guard, 19)
    guard.on_train_batch_end(0)
    assert not model.stop_training
    model = _guarded(guard, 20)
    guard.on_train_batch_end(0)
    assert model.stop_training and (guard.stopped_at, guard.reason) == (20, "rung stop")


def test_stop_at_is_not_part_of_the_fingerprint():
    base = TrainConfig(**TRIAL)
    assert {TrainConfig(**TRIAL, stop_at=s).fingerprint() for s in ("60s", "2m", "540s")} == {base.fingerprint()}
    # A config without a stop (or a warm start) hashes as before those fields were added: older
    # checkpoints still match.
    values = {k: v for k, v in base.to_dict().items() if k not in ("stop_at", "warm_start")}
    assert base.fingerprint() == hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:16]
    assert TrainConfig(**{**TRIAL, "time_budget": "<=600s"}).fingerprint() != base.fingerprint()
    assert TrainConfig(**TRIAL, stop_at="60s").limits.stop_s == 60.0 and base.limits.stop_s is None


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"stop_at": "60s"}, "time_budget is 'auto'"),
        ({"stop_at": "10m", "time_budget": "<=540s"}, "past the time budget (<=540s: 540s)"),
        ({"stop_at": "10m", "epochs": None, "time_budget": "9m"}, "at most 540s"),
        ({"stop_at": "<=1m", "time_budget": "<=540s"}, "is a cap"),
        ({"stop_at": "60", "time_budget": "<=540s"}, "needs its unit"),
        ({"stop_at": "10s", "time_budget": "<=540s"}, "under 30s"),
        ({"stop_at": "0 steps"}, "at least 1 step"),
        ({"stop_at": "ten steps", "time_budget": "<=540s"}, "such as 120 steps"),
    ],
)
def test_a_bad_stop_at_is_one_line_naming_the_field_and_the_fix(fields, named):
    with pytest.raises(ConfigError) as err:
        TrainConfig(**fields)
    message = str(err.value)
    assert message.startswith("train.stop_at: ") and named in message and "\n" not in message
    assert "auto" in message


def test_epochs_with_a_cap_budget_are_kept_where_they_fit_and_a_filled_budget_still_refuses_them():
    config = TrainConfig(epochs=3, steps_per_epoch=16, time_budget="<=540s")
    assert (config.limits.budget.seconds, config.limits.budget.cap) == (540.0, True)
    numbers = dict(elapsed_s=10.0, calibration_s=3.0, eval_s=0.5, export_s=3.0, steps_per_execution=4)
    kept = plan(config.limits.budget, step_s=0.01, own_steps=OWN_STEPS, own_evaluations=3, **numbers)
    assert (kept.steps, kept.evaluations, kept.steps_per_evaluation) == (OWN_STEPS, 3, 16)
    # Too long for the cap: laid out over it, fewer steps.
    slow = plan(config.limits.budget, step_s=20.0, own_steps=OWN_STEPS, own_evaluations=3, **numbers)
    assert slow.steps < OWN_STEPS
    with pytest.raises(ConfigError) as err:
        TrainConfig(epochs=3, time_budget="540s")
    message = str(err.value)
    assert message.startswith("train.time_budget: ") and "epochs 3" in message and "time_budget <=540s" in message


def _guarded(guard, step: int):
    import numpy as np

    model = SimpleNamespace(stop_training=False, optimizer=SimpleNamespace(iterations=SimpleNamespace(
        numpy=lambda: np.int64(step))))  # fmt: skip
    guard.set_model(model)
    return model


def test_the_guard_stops_at_the_sooner_of_the_budget_and_the_stop_and_says_which():
    from trainer.budget.stopping import BudgetGuard, SharedBudgetGuard

    budget_left, stop_left = [100.0], [10.0]
    guard = BudgetGuard(lambda: budget_left[0], 4.0, lambda: stop_left[0])
    model = _guarded(guard, 12)
    guard.on_train_batch_end(0)
    assert not model.stop_training and guard.reason is None
    stop_left[0] = 4.0  # only the reserve left before the stop: the budget has more
    guard.on_train_batch_end(0)
    assert model.stop_training and (guard.stopped_at, guard.reason) == (12, "rung stop")
    both = BudgetGuard(lambda: 3.0, 4.0, lambda: 3.0)  # stop_at is the budget: the budget is spent
    _guarded(both, 5)
    both.on_train_batch_end(0)
    assert both.reason == "budget"
    # Workers take the chief's decision, its reason with it, every ``every`` batches.
    shared = SharedBudgetGuard(lambda: 50.0, 4.0, decide=lambda values: values, every=2, stop_left_s=lambda: 1.0)
    model = _guarded(shared, 8)
    shared.on_train_batch_end(0)
    assert not model.stop_training
    shared.on_train_batch_end(1)
    assert model.stop_training and (shared.stopped_at, shared.reason) == (8, "rung stop")
