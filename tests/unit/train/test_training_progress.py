"""The training's progress callback with a fake clock and a fake optimizer: no training runs."""

import io

import numpy as np
import pytest

from components import progress
from trainer.callbacks import TrainingProgress, validation_figure


class _Iterations:
    def __init__(self) -> None:
        self.value = 0

    def numpy(self) -> int:
        return self.value


class _Model:
    """What the callback reads of a model: ``optimizer.iterations``."""

    def __init__(self) -> None:
        self.optimizer = type("Optimizer", (), {})()
        self.optimizer.iterations = _Iterations()
        self.reads = 0

    @property
    def step(self) -> int:
        return self.optimizer.iterations.value

    @step.setter
    def step(self, value: int) -> None:
        self.optimizer.iterations.value = value


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _callback(total=100, every_s=1.0, **kwargs):
    calls, clock, model = [], _Clock(), _Model()
    cb = TrainingProgress(
        lambda done, total, **fields: calls.append((done, total, fields)), total, global_batch=32,
        every_s=every_s, clock=clock, **kwargs,
    )  # fmt: skip
    cb.set_model(model)
    return cb, calls, clock, model


def _batches(cb, clock, model, steps, seconds_per_step, loss=1.0):
    for _ in range(steps):
        clock.now += seconds_per_step
        model.step += 1
        cb.on_train_batch_end(model.step - 1, {"loss": np.float32(loss)})


def test_first_batch_calibrates_then_reports_rate_images_and_eta_throttled():
    cb, calls, clock, model = _callback(total=100)
    _batches(cb, clock, model, 1, 5.0)  # the first step traces: slow
    assert calls == [(1, 100, {"loss": 1.0, "note": "calibrating"})]
    _batches(cb, clock, model, 9, 0.25, loss=0.5)  # 0.25 s a step: a report every 4 steps (every_s 1)
    assert [c[0] for c in calls] == [1, 5, 9]
    done, total, fields = calls[-1]
    assert fields["images_per_sec"] == pytest.approx(4 * 32 / 1.0)
    assert fields["loss"] == 0.5 and isinstance(fields["loss"], float)
    assert fields["eta_s"] == pytest.approx((100 - 9) * 0.25)  # the traced first step left out
    assert "note" not in fields


def test_epoch_end_reports_validation_and_keeps_it_on_later_lines():
    cb, calls, clock, model = _callback(total=20, every_s=1000)
    _batches(cb, clock, model, 10, 1.0)
    clock.now += 3.0  # validation
    cb.on_epoch_end(0, {"loss": 0.4, "accuracy": 0.8, "val_loss": 0.5, "val_accuracy": np.float64(0.75)})
    done, total, fields = calls[-1]
    assert (done, total) == (10, 20)
    assert fields["metric"] == "val_accuracy" and fields["value"] == 0.75 and fields["loss"] == 0.4
    assert "images_per_sec" not in fields  # only the first report so far: no window yet
    _batches(cb, clock, model, 10, 1.0)
    cb.on_epoch_end(1, {"loss": 0.3})  # an epoch without validation keeps the last figure
    done, total, fields = calls[-1]
    assert (done, total, fields["metric"], fields["eta_s"]) == (20, 20, "val_accuracy", 0.0)


def test_the_task_metric_is_preferred_then_any_val_figure_then_val_loss():
    logs = {"val_loss": 0.5, "val_box_loss": 0.2, "val_map": 0.3}
    assert validation_figure(logs, "val_map") == ("val_map", 0.3)
    assert validation_figure(logs, "val_missing") == ("val_box_loss", 0.2)
    assert validation_figure({"loss": 1.0, "val_loss": 0.5}) == ("val_loss", 0.5)
    assert validation_figure({"loss": 1.0}) is None


def test_a_budget_sets_the_eta_and_the_total_later():
    left = [None]
    cb, calls, clock, model = _callback(total=1000, deadline=lambda: left[0])
    _batches(cb, clock, model, 3, 1.0)
    assert "eta_s" in calls[-1][2]  # no budget answer yet: the rate's estimate
    left[0] = 42.0
    cb.set_total(50)
    _batches(cb, clock, model, 1, 1.0)
    done, total, fields = calls[-1]
    assert (done, total, fields["eta_s"]) == (4, 50, 42.0)


def test_early_stop_ends_with_done_equal_total_and_a_note():
    cb, calls, clock, model = _callback(total=100)
    _batches(cb, clock, model, 30, 1.0)
    cb.finish(30)
    assert calls[-1] == (30, 30, {"images_per_sec": 32.0, "loss": 1.0, "eta_s": 0.0, "note": "stopped early"})


def test_a_resumed_training_counts_optimizer_steps_and_no_fit_only_hook_is_needed():
    cb, calls, clock, model = _callback(total=100, start_step=60)
    model.step = 60
    # The multi-worker loop calls batch and epoch hooks only (no on_train_begin).
    _batches(cb, clock, model, 5, 1.0)
    assert [c[0] for c in calls] == [61, 62, 63, 64, 65]
    assert calls[-1][2]["eta_s"] == pytest.approx(35.0)


def test_the_step_is_read_only_when_a_report_is_due():
    cb, calls, clock, model = _callback(total=100, every_s=10)
    reads = []
    model.optimizer.iterations.numpy = lambda: reads.append(1) or model.optimizer.iterations.value
    _batches(cb, clock, model, 20, 1.0)
    assert len(reads) == len(calls) == 2  # the first batch and 10 s later


def test_lines_through_the_reporter_read_back():
    out = io.StringIO()
    report = progress.reporter("train", "steps", every_s=0, stream=out)
    cb = TrainingProgress(report, 10, global_batch=8, clock=_Clock())
    model = _Model()
    cb.set_model(model)
    model.step = 10
    cb.on_epoch_end(0, {"loss": float("nan"), "val_loss": 0.5})
    line = progress.parse(out.getvalue().splitlines()[-1])
    assert line["step"] == "train" and line["done"] == line["total"] == 10 and line["unit"] == "steps"
    assert "loss" not in line and line["metric"] == "val_loss"  # a NaN is no figure
