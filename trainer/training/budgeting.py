"""A budget's part in a training: its clock, the calibration that times real steps, the plan.

With a time or cost budget (``TrainConfig.limits``) the training gets the budget's clock before
it builds anything; once compiled it times real steps (in each precision worth timing), and the
plan lays the budget out over the steps that fit. A resumed training keeps its plan and counts
the time its earlier processes spent.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from trainer.budget import layout, limits
from trainer.errors import TrainingError
from trainer.training.run import Fit, Run, write_state
from trainer.training.setup import build, start

log = logging.getLogger(__name__)


def with_budget(run: Run, started_at: float) -> Run:
    """The run with its budget's clock (and its stop's), and the plan of a resumed training (its
    schedule as laid out).

    A training resumed after a restart, or continued by a search's next rung, keeps its plan (the
    same steps, so the same schedule) and counts the time its earlier processes spent
    (``state.json``'s ``spent_s``). A ``stop_at`` changes no plan: it stops this process on the
    same clock.
    """
    config, prepared = run.config, run.prepared
    if not config.limits.budgeted:
        return run
    deadline = layout.Deadline(config.limits.budget.limit_s, started_at, _spent_before(prepared.state, started_at))
    stop_s = config.limits.stop_s
    stop = deadline.with_limit(stop_s) if stop_s is not None else None
    run = dataclasses.replace(run, deadline=deadline, stop=stop)
    spent = deadline.spent_before_s
    if stop_s is not None:
        log.info("stopping this process at %.0fs of the training's time (stop_at %s; %.0fs spent before it)",
                 stop_s, config.stop_at, spent)  # fmt: skip
    saved = prepared.state.get("budget")
    if not saved:
        return run
    plan = layout.BudgetPlan.from_dict(saved)
    log.info("resuming the budget's plan (%.0fs spent before this process): %s", spent, plan.line())
    return _with_plan(run, plan)


def _spent_before(state: Mapping[str, Any], started_at: float) -> float:
    """The seconds earlier processes of this training spent that this one's clock does not count.

    A step retried in a new pod starts a new clock: all its predecessors spent counts. Workers
    restarted by the same step keep the step's clock (``started_at``), which already counts the
    time since the step started: only what was spent before that.
    """
    if not state.get("spent_s"):
        return 0.0
    if abs(float(state.get("clock_started_at") or 0.0) - started_at) < 1.0:
        return float(state.get("spent_before_s") or 0.0)
    return float(state["spent_s"])


def _with_plan(run: Run, plan: layout.BudgetPlan) -> Run:
    """The run with the plan's evaluation intervals as its epochs."""
    settings = dataclasses.replace(run.settings, epochs=plan.evaluations, steps_per_epoch=plan.steps_per_evaluation)
    return dataclasses.replace(run, plan=plan, settings=settings)


def _precision_key(run: Run) -> str:
    """The cache key of a precision measurement: the device and what sets a step's speed."""
    from trainer.budget import calibrate

    prepared, settings = run.prepared, run.settings
    return calibrate.precision_key(
        calibrate.device_name(settings.kind),
        model=prepared.model,
        options=prepared.task.options.to_dict(),
        shape=list(prepared.task.input_shape(prepared.info)),
        batch=settings.global_batch,
        replicas=settings.replicas,
        steps_per_execution=settings.steps_per_execution,
        jit=bool(settings.jit_compile),
        candidates=list(settings.precision_candidates),
    )


def _with_precision(run: Run, policy: str, reason: str) -> Run:
    return dataclasses.replace(
        run, settings=dataclasses.replace(run.settings, precision=policy, precision_reason=reason)
    )


def cached_precision(run: Run) -> Run:
    """The run in the policy an earlier run measured faster on this device, where the device offers a choice."""
    from trainer.budget import calibrate

    if len(run.settings.precision_candidates) < 2:
        return run
    measured = calibrate.cached_precision(_precision_key(run))
    if measured is None or measured.chosen not in run.settings.precision_candidates:
        return run
    log.info("precision %s: %s", measured.chosen, measured.reason())
    return _with_precision(run, measured.chosen, measured.reason())


def _measure_precision(run: Run, fit: Fit, step_s: float) -> tuple[Run, Fit, float]:
    """Times the other candidate policies at the fitted size and batch and keeps the faster
    (remembered on this machine); returns the run, its fit and its seconds per step.
    """
    from trainer.budget import calibrate

    timed = {run.settings.precision: step_s}
    runs = {run.settings.precision: (run, fit)}
    for policy in run.settings.precision_candidates[1:]:
        other = _with_precision(run, policy, "")
        other_fit = start(other, build(other))
        timed[policy] = calibrate.time_steps(other_fit.model, other_fit.train_ds, run.settings.steps_per_execution)
        runs[policy] = (other, other_fit)
    measured = calibrate.PrecisionMeasurement(calibrate.choose(timed), timed)
    calibrate.keep_precision(_precision_key(run), measured)
    log.info("precision %s: %s", measured.chosen, measured.reason())
    # Another policy's model has not traced its validation yet: its first one takes longer than
    # the plan's estimate, which the budget's guard absorbs.
    chosen, chosen_fit = runs[measured.chosen]
    return _with_precision(chosen, measured.chosen, measured.reason()), chosen_fit, timed[measured.chosen]


def _calibrate_workers(run: Run, fit: Fit) -> tuple[Any, float, float]:
    """(timing, seconds per step, seconds elapsed) of a set of workers: each times its distributed
    steps, and every worker takes the chief's figures, so all lay out the same plan.
    """
    from trainer import multiworker
    from trainer.budget import calibrate

    started = time.perf_counter()
    step_s, eval_s = multiworker.time_steps(
        fit, run.role.strategy, bool(run.settings.jit_compile), calibrate.MIN_TIMED_STEPS, calibrate.TIMED_SECONDS
    )
    elapsed = run.deadline.clock() - run.deadline.started_at
    export_s = max(calibrate.EXPORT_FLOOR_S, calibrate.EXPORT_FACTOR * eval_s)
    step_s, eval_s, export_s, elapsed, seconds = multiworker.from_chief(
        run.role.strategy, [step_s, eval_s, export_s, elapsed, time.perf_counter() - started]
    )
    return calibrate.Timing(step_s, eval_s, export_s, seconds), step_s, elapsed


def lay_out_budget(run: Run, fit: Fit) -> tuple[Run, Fit]:
    """Times real steps of the compiled model (in each precision worth timing, keeping the
    faster), lays the budget out over the steps that fit, and sets the schedule's length; the
    calibration's steps are undone (weights and optimizer).

    Raises:
        TrainingError: the budget cannot buy one evaluation interval (naming the least that can).
    """
    from trainer.budget import calibrate, schedules

    started = time.perf_counter()
    if run.role is not None:
        timing, step_s, elapsed = _calibrate_workers(run, fit)
    else:
        timing = calibrate.measure(fit.model, fit.train_ds, run.settings.steps_per_execution, _evaluation(fit))
        step_s = timing.step_s
        measured = run.settings.precision_reason.startswith("measured")
        if len(run.settings.precision_candidates) > 1 and not measured:
            run, fit, step_s = _measure_precision(run, fit, step_s)
        elapsed = run.deadline.clock() - run.deadline.started_at
    own = run.config.epochs is not None or run.prepared.fit is not None
    try:
        plan = layout.plan(
            run.config.limits.budget,
            elapsed_s=elapsed,
            calibration_s=time.perf_counter() - started,
            step_s=step_s,
            eval_s=timing.eval_s,
            export_s=timing.export_s,
            steps_per_execution=run.settings.steps_per_execution,
            spent_before_s=run.deadline.spent_before_s,
            # The run's own schedule, where it has one (the configured epochs, or the task's fitted
            # schedule): what a cap (<=5m) keeps where it fits.
            own_steps=run.total_steps if own else None,
            own_evaluations=run.settings.epochs if run.config.epochs is not None else None,
        )
    except limits.BudgetError as err:
        raise TrainingError(f"train.time_budget: {err}") from None
    log.info("%s", plan.line())
    if not schedules.set_total_steps(fit.optimizer, plan.steps):
        log.info("the %s task's schedule does not depend on its length", run.prepared.task.name)
    run = _with_plan(run, plan)
    if run.chief:
        write_state(run, fit.history, fit)
    return run, fit


def _evaluation(fit: Fit) -> Optional[Any]:
    """One evaluation as the epochs run it (the validation split, the task's scoring), or None."""
    if fit.val_ds is None:
        return None

    def evaluate() -> None:
        logs = fit.model.evaluate(fit.val_ds, steps=fit.val_steps, verbose=0, return_dict=True)
        for callback in fit.validation:
            callback.set_model(fit.model)
            callback.on_epoch_end(0, logs)

    return evaluate


def replan(run: Run, fit: Fit, intervals: Sequence[float]) -> Run:
    """The run with its plan laid out again from this process's intervals as they ran
    (``layout.replanned``): the budget filled where the steps ran faster than calibrated, the
    schedule ended in time where they ran slower.

    Only a budgeted training in one process, without a rung's stop (a search's rungs share one
    plan), from its start (a resumed one keeps the plan it resumed), after each interval once
    ``layout.REPLAN_AFTER`` have run, from the mean of the last ``REPLAN_AFTER`` (``intervals``:
    the seconds of each, in order): the machine's speed can change during a run, and a plan laid
    out once from its first intervals left up to a third of a budget unused when it sped up.
    """
    from trainer.budget import schedules

    plan = run.plan
    alone = run.role is None and run.stop is None and not fit.resumed_from
    if plan is None or not alone or len(intervals) < layout.REPLAN_AFTER:
        return run
    recent = statistics.mean(intervals[-layout.REPLAN_AFTER :])
    again = layout.replanned(
        plan,
        done=len(intervals),
        interval_s=recent,
        left_s=run.deadline.left_s(),
        steps_per_execution=run.settings.steps_per_execution,
    )
    if again is plan:
        return run
    schedules.set_total_steps(fit.optimizer, again.steps)
    if fit.progress is not None:
        fit.progress.set_total(again.steps)
    log.info("the last intervals ran at %.1fs each: %s", recent, again.line())
    run = _with_plan(run, again)
    write_state(run, fit.history, fit)
    return run
