"""The schedule laid out after compiling (WarmupCosine) and what stops a run early (BudgetGuard, EarlyStopping)."""

import math
from types import SimpleNamespace

import keras
import numpy as np
import pytest
import tensorflow as tf

from trainer.budget.layout import Deadline
from trainer.budget.schedules import WarmupCosine, set_total_steps
from trainer.budget.stopping import BudgetGuard, EarlyStopping


def _rates(schedule, steps) -> np.ndarray:
    return np.array([float(schedule(step)) for step in steps])


# ---------------------------------------------------------------------------------------------
# WarmupCosine.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("peak", "warmup", "total"), [(1e-3, 10, 100), (0.4, 50, 1000), (2.0, 1, 7), (0.1, 1, 4)])
def test_warmup_cosine_equals_the_keras_cosine_decay_it_replaced(peak, warmup, total):
    ours = WarmupCosine(peak, warmup, total)
    keras_schedule = keras.optimizers.schedules.CosineDecay(
        0.0, total - warmup, alpha=0.0, warmup_target=peak, warmup_steps=warmup
    )
    steps = sorted({*range(0, min(total, 40)), *np.linspace(0, total + 5, 37).astype(int).tolist()})
    np.testing.assert_allclose(_rates(ours, steps), _rates(keras_schedule, steps), rtol=1e-5, atol=1e-9 * peak)


def test_the_warmup_is_at_most_a_quarter_of_the_total():
    capped = WarmupCosine(1.0, warmup_steps=1000, total_steps=100)
    assert float(capped(25)) == pytest.approx(1.0)  # the peak at a quarter
    assert float(capped(10)) == pytest.approx(10 / 25)
    as_if_25 = keras.optimizers.schedules.CosineDecay(0.0, 75, alpha=0.0, warmup_target=1.0, warmup_steps=25)
    np.testing.assert_allclose(_rates(capped, range(120)), _rates(as_if_25, range(120)), rtol=1e-5, atol=1e-9)
    assert float(WarmupCosine(1.0, 10, 100)(10)) == pytest.approx(1.0)  # a shorter warm-up is kept


def test_the_rate_rises_to_the_peak_then_falls_and_is_zero_from_the_total_on():
    schedule = WarmupCosine(0.5, 10, 100)
    rates = _rates(schedule, range(0, 131))
    assert rates[0] == 0.0
    assert np.all(np.diff(rates[:11]) > 0) and rates[10] == pytest.approx(0.5)
    assert np.all(np.diff(rates[10:101]) < 0)
    assert np.all(np.abs(rates[100:]) <= 1e-9)
    assert float(schedule(10**6)) == pytest.approx(0.0, abs=1e-9)


def test_a_stopped_run_took_exactly_the_first_rates_of_the_whole_run():
    # Three runs of one laid-out schedule: the whole run, one stopped at step 37, and that one
    # resumed from its step: the stopped one is a prefix, the resumed one goes on as if it had not
    # stopped. The rate each step takes is read from the optimizer as it applies the gradients.
    def train(steps: int, start: int = 0) -> list[float]:
        weight = keras.Variable(np.ones(3, "float32"))
        optimizer = keras.optimizers.Adam(learning_rate=WarmupCosine(1e-2, 8, 1))
        optimizer.build([weight])
        assert set_total_steps(optimizer, 100)
        optimizer.iterations.assign(start)
        taken = []
        for _ in range(steps):
            taken.append(float(optimizer.learning_rate))
            optimizer.apply_gradients([(tf.ones(3), weight)])
        return taken

    whole = train(100)
    assert train(37) == whole[:37]
    assert train(63, start=37) == whole[37:]
    assert whole == _rates(WarmupCosine(1e-2, 8, 100), range(100)).tolist()


def test_the_rate_depends_on_the_step_alone_not_on_what_was_asked_before():
    schedule = WarmupCosine(0.3, 5, 60)
    steps = list(range(70))
    in_order = _rates(schedule, steps)
    shuffled = np.random.default_rng(0).permutation(steps)
    assert dict(zip(shuffled.tolist(), _rates(schedule, shuffled), strict=True)) == dict(
        zip(steps, in_order, strict=True)
    )


def test_setting_the_total_changes_a_traced_step_without_retracing():
    schedule = WarmupCosine(1.0, 10, 100)
    traces = []

    @tf.function
    def rate(step):
        traces.append(step)
        return schedule(step)

    at_60 = float(rate(tf.constant(60)))
    schedule.set_total(400)
    longer = float(rate(tf.constant(60)))
    assert len(traces) == 1
    assert rate.experimental_get_tracing_count() == 1
    assert at_60 == pytest.approx(float(WarmupCosine(1.0, 10, 100)(60)))
    assert longer == pytest.approx(float(WarmupCosine(1.0, 10, 400)(60)))
    assert longer > at_60
    assert schedule.total_steps == 400
    schedule.set_total(0)  # never below one step
    assert schedule.total_steps == 1


def test_set_total_steps_reaches_the_schedule_a_compiled_train_step_reads():
    weight = keras.Variable(np.ones(2, "float32"))
    optimizer = keras.optimizers.Adam(learning_rate=WarmupCosine(1.0, 10, 1))
    optimizer.build([weight])

    @tf.function
    def step():
        optimizer.apply_gradients([(tf.ones(2), weight)])
        return optimizer.learning_rate

    optimizer.iterations.assign(49)
    short = float(step())  # the rate at step 50 (once applied) of a 1-step schedule: 0
    assert set_total_steps(optimizer, 100)
    optimizer.iterations.assign(49)
    laid_out = float(step())
    assert short == 0.0
    assert laid_out == pytest.approx(float(WarmupCosine(1.0, 10, 100)(50)))
    assert step.experimental_get_tracing_count() == 1


def test_set_total_steps_looks_through_loss_scaling_and_skips_a_constant_rate():
    schedule = WarmupCosine(1e-3, 10, 1)
    scaled = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(learning_rate=schedule))
    assert set_total_steps(scaled, 500)
    assert schedule.total_steps == 500
    assert not set_total_steps(keras.optimizers.Adam(learning_rate=1e-3), 500)
    other = keras.optimizers.schedules.CosineDecay(1e-3, 10)
    assert not set_total_steps(keras.optimizers.Adam(learning_rate=other), 500)


def test_a_schedule_reads_back_from_its_config_with_its_laid_out_total():
    schedule = WarmupCosine(0.25, 20, 1)
    schedule.set_total(300)
    config = schedule.get_config()
    assert config == {"peak": 0.25, "warmup_steps": 20, "total_steps": 300}
    again = WarmupCosine.from_config(config)
    steps = range(0, 320, 7)
    np.testing.assert_array_equal(_rates(again, steps), _rates(schedule, steps))
    revived = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert isinstance(revived, WarmupCosine) and revived.get_config() == config


def test_an_optimizer_with_the_schedule_reads_back_from_its_config():
    optimizer = keras.optimizers.Adam(learning_rate=WarmupCosine(0.1, 5, 1))
    set_total_steps(optimizer, 80)
    again = keras.optimizers.Adam.from_config(optimizer.get_config())
    assert isinstance(again._learning_rate, WarmupCosine)
    assert again._learning_rate.get_config() == {"peak": 0.1, "warmup_steps": 5, "total_steps": 80}


# ---------------------------------------------------------------------------------------------
# EarlyStopping and BudgetGuard on a model that only has what they read.
# ---------------------------------------------------------------------------------------------


class FakeModel:
    """What the callbacks touch: ``stop_training`` and the optimizer's step."""

    def __init__(self) -> None:
        self.stop_training = False
        self.step = 0
        self.optimizer = SimpleNamespace(iterations=SimpleNamespace(numpy=lambda: np.int64(self.step)))


def _watch(callback, values, model=None, every=100):
    """Evaluations ``every`` steps apart, one per value (None: no logs), until the model stops."""
    model = model or FakeModel()
    callback.set_model(model)
    for value in values:
        model.step += every
        callback.on_epoch_end(0, None if value is None else {"val_accuracy": value, "loss": 0.1})
        if model.stop_training:
            break
    return model


def test_early_stopping_stops_after_exactly_patience_evaluations_in_vain():
    bests = []
    stopper = EarlyStopping("val_accuracy", higher_is_better=True, patience=3, on_best=bests.append)
    model = FakeModel()
    _watch(stopper, [0.50, 0.60, 0.70, 0.65, 0.70], model)  # two in vain (equal is no improvement)
    assert not model.stop_training and stopper.stopped_at is None
    assert bests == [100, 200, 300]
    _watch(stopper, [0.69], model)
    assert model.stop_training and stopper.stopped_at == 600
    assert (stopper.best, stopper.best_step, stopper.wait) == (0.70, 300, 3)
    model.step = 700
    stopper.on_epoch_end(0, {"val_accuracy": 0.1})
    assert stopper.stopped_at == 600  # recorded once


def test_early_stopping_on_a_loss_keeps_the_lowest():
    bests = []
    stopper = EarlyStopping("val_loss", higher_is_better=False, patience=2, on_best=bests.append)
    model = FakeModel()
    stopper.set_model(model)
    for step, loss in zip((10, 20, 30, 40, 50), (1.0, 0.8, 0.9, 0.6, 0.7), strict=True):
        model.step = step
        stopper.on_epoch_end(0, {"val_loss": loss})
    assert bests == [10, 20, 40]
    assert not model.stop_training
    model.step = 60
    stopper.on_epoch_end(0, {"val_loss": 0.61})
    assert model.stop_training and stopper.stopped_at == 60
    assert (stopper.best, stopper.best_step) == (0.6, 40)


def test_no_patience_never_stops_but_keeps_the_best():
    bests = []
    stopper = EarlyStopping("val_accuracy", True, patience=None, on_best=bests.append)
    model = _watch(stopper, [0.9] + [0.1] * 50)
    assert model.step == 5100 and not model.stop_training and stopper.stopped_at is None
    assert (stopper.best, stopper.best_step, bests) == (0.9, 100, [100])


def test_a_nan_or_missing_figure_is_no_evaluation():
    bests = []
    stopper = EarlyStopping("val_accuracy", True, patience=1, on_best=bests.append)
    model = _watch(stopper, [0.5, float("nan"), None, float("inf"), float("-inf")])
    stopper.on_epoch_end(0, {"loss": 0.3})  # the figure is not in the logs
    assert not model.stop_training and stopper.wait == 0
    assert (stopper.best, bests) == (0.5, [100])
    _watch(stopper, [0.4], model)
    assert model.stop_training and stopper.stopped_at == 600


def test_a_smaller_gain_than_min_delta_is_no_improvement():
    stopper = EarlyStopping("val_accuracy", True, patience=2, on_best=lambda step: None, min_delta=0.01)
    _watch(stopper, [0.5, 0.505, 0.509, 0.52])
    assert stopper.stopped_at == 300 and stopper.best == 0.5


@pytest.mark.parametrize("stopped_after", [1, 3, 5, 6, 9])
def test_a_resumed_run_stops_where_an_uninterrupted_one_does(stopped_after):
    values = [0.3, 0.5, 0.45, 0.6, 0.58, 0.59, 0.61, 0.6, 0.6, 0.6, 0.7]
    whole = EarlyStopping("val_accuracy", True, patience=3, on_best=lambda step: None)
    _watch(whole, values)
    assert whole.stopped_at == 1000 and (whole.best, whole.best_step) == (0.61, 700)

    first = EarlyStopping("val_accuracy", True, patience=3, on_best=lambda step: None)
    model = _watch(first, values[:stopped_after])
    assert first.stopped_at is None
    state = first.state()
    assert set(state) == {"monitor", "best", "best_step", "wait"}
    assert state["monitor"] == "val_accuracy"
    bests = []
    resumed = EarlyStopping(
        state["monitor"],
        True,
        patience=3,
        on_best=bests.append,
        best=state["best"],
        best_step=state["best_step"],
        wait=state["wait"],
    )
    again = FakeModel()
    again.step = model.step
    _watch(resumed, values[stopped_after:], again)
    assert resumed.stopped_at == whole.stopped_at
    assert (resumed.best, resumed.best_step, resumed.wait) == (whole.best, whole.best_step, whole.wait)
    assert all(step > model.step for step in bests)  # only bests after the restart are saved again


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_budget_guard_stops_once_only_the_reserve_is_left():
    clock = FakeClock(1000.0)
    deadline = Deadline(budget_s=100.0, started_at=1000.0, spent_before_s=20.0, clock=clock)
    guard = BudgetGuard(deadline.left_s, reserve_s=15.0)
    model = FakeModel()
    guard.set_model(model)
    for step, now in ((10, 1010.0), (20, 1050.0), (30, 1064.9)):  # 80, 50 then 15.1 s left
        model.step, clock.now = step, now
        guard.on_train_batch_end(0)
        assert not model.stop_training and guard.stopped_at is None
    model.step, clock.now = 31, 1065.0  # 15 s left: the reserve
    guard.on_train_batch_end(0)
    assert model.stop_training and guard.stopped_at == 31
    model.step, clock.now = 32, 1090.0
    guard.on_train_batch_end(0)
    assert guard.stopped_at == 31  # recorded once


def test_the_budget_guard_stops_at_once_when_the_budget_is_already_spent():
    guard = BudgetGuard(lambda: -5.0, reserve_s=0.0)
    model = FakeModel()
    model.step = 7
    guard.set_model(model)
    guard.on_train_batch_end(0)
    assert model.stop_training and guard.stopped_at == 7
    assert isinstance(guard.stopped_at, int)


def test_callbacks_read_the_step_of_a_real_keras_optimizer():
    weight = keras.Variable(np.ones(2, "float32"))
    optimizer = keras.optimizers.Adam(1e-3)
    optimizer.build([weight])
    optimizer.iterations.assign(42)
    model = SimpleNamespace(optimizer=optimizer, stop_training=False)
    guard = BudgetGuard(lambda: 0.0, reserve_s=1.0)
    guard.set_model(model)
    guard.on_train_batch_end(0)
    assert guard.stopped_at == 42 and model.stop_training
    assert math.isclose(float(optimizer.iterations.numpy()), 42)
