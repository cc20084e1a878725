"""A search as it runs: one trial trained to a rung's stop, the selection between rungs, the join.

A trial's schedule is laid out once for the last rung's budget; each rung stops it at its own
budget, and the next rung continues from the trial's checkpoint folder, which is the trial's, not
the rung task's artifact folder (new at every rung). A trial that fails is a failed row with its
reason; the search carries on with the others. A row already written for a trial and rung is the
trial's result: a re-run of an interrupted search trains only what did not finish. Where each
file lives is :mod:`components.sweep.search.folder`'s. No TensorFlow here but inside
:func:`run_trial`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import traceback
from collections.abc import Sequence
from typing import Any

import yaml

from components.sweep.search.folder import (
    BEST_CONFIG,
    LOST,
    RESULT,
    TrialResult,
    latest_results,
    read_plan,
    read_result,
    row_uri,
    rung_results,
    spent,
    trial_config,
    trial_dir,
)
from components.sweep.search.plan import SearchPlan
from components.sweep.search.selection import TrialRow, pareto_frontier, pick, savings, select_next
from trainer import model_folder, storage

log = logging.getLogger(__name__)


def fan_out_items(plan: SearchPlan, folder: str, keys: Sequence[str]) -> list[dict[str, Any]]:
    """A rung's trials as the fan-out's items: what each trial task needs, its pod's request included."""
    items = []
    for key in keys:
        cell = plan.trial(key).cell
        items.append(
            {
                "key": key,
                "folder": folder,
                "accelerator_type": cell.accelerator_type,
                "accelerator_count": cell.accelerator_count or "0",
            }
        )
    return items


def _earlier(folder: str, key: str, rung: int) -> tuple[float, float]:
    """(billed seconds, dollars) the trial spent before ``rung``."""
    previous = read_result(folder, key, rung - 1) if rung > 0 else None
    return (previous.seconds, previous.cost) if previous is not None else (0.0, 0.0)


def run_trial(
    dataset: tuple[str, str],
    model: tuple[str, str],
    folder: str,
    key: str,
    rung: int,
    started_at: float,
) -> TrialResult:
    """Trains a trial to a rung's stop from its own checkpoints and scores it; never raises for its own failure.

    A row already written for this trial and rung is returned as it is (a re-run of the search).

    Args:
        dataset: the converted dataset's (local path, URI).
        model: this rung's model folder (local path, URI).
        folder: the search's folder.
        key: the trial.
        rung: the rung.
        started_at: when this process started (the billed time's start).
    """
    done = read_result(folder, key, rung)
    if done is not None and done.status != "failed":
        return done
    plan = read_plan(folder)
    seconds_before, cost_before = _earlier(folder, key, rung)
    price = plan.trial(key).price_per_hour or 0.0
    import tensorflow  # noqa: F401 (its import is the start-up every trial's process pays before training)

    startup = time.time() - started_at
    try:
        result = _train_and_score(plan, dataset, model, folder, key, rung)
    except Exception as err:  # noqa: BLE001 (a trial's failure is its row; the search goes on)
        log.error("trial %s failed at rung %d:\n%s", key, rung, traceback.format_exc())
        result = TrialResult(key=key, rung=rung, status="failed", reason=f"{type(err).__name__}: {err}"[:2000])
    billed = time.time() - started_at
    result = dataclasses.replace(
        result, rung_s=billed, startup_s=startup, seconds=seconds_before + billed,
        cost=cost_before + billed * price / 3600.0, started_at=started_at,
    )  # fmt: skip
    storage.write_json(row_uri(folder, key, rung), result.to_dict())
    return result


def _train_and_score(
    plan: SearchPlan, dataset: tuple[str, str], model: tuple[str, str], folder: str, key: str, rung: int
) -> TrialResult:
    from components.launchers.locations import training_locations
    from components.launchers.training import run_training
    from trainer.config import EvaluateConfig, TrainConfig
    from trainer.tasks import get_task

    cell = plan.trial(key).cell
    dataset_dir, model_dir = training_locations(dataset, model, cell.workers, "auto")
    config = TrainConfig.from_dict(trial_config(plan, key, rung))
    checkpoints = storage.join(trial_dir(folder, key), "checkpoints")
    summary = run_training(dataset_dir, model_dir, config, checkpoint_dir=checkpoints)
    task = get_task(plan.task)
    scored = task.evaluate(model_folder.saved_model_dir(model_dir), dataset_dir, EvaluateConfig(split="test"))
    metrics = {k: float(v) for k, v in scored.metrics.items()}
    stopping = summary.stopping or {}
    rung_stop = stopping.get("reason") == "rung stop"
    last = rung == len(plan.rungs) - 1
    status, reason = "ok", None
    if not last and not rung_stop:
        status, reason = "stopped", stopping.get("reason") or "its schedule ended before the rung's budget"
    elif last and stopping.get("reason") not in (None, "completed"):
        reason = f"{stopping['reason']} at step {stopping.get('step')}"  # ended early, as any training may
    return TrialResult(
        key=key, rung=rung, status=status, reason=reason, quality=metrics.get(plan.objective.metric),
        metrics=metrics, steps=summary.steps, planned_steps=(summary.budget or {}).get("steps"),
        model_uri=model[1],
    )  # fmt: skip


def run_here(folder: str, dataset: str, models_root: str, say=print) -> SearchOutcome:
    """A planned search in this process, one trial after the other (the command line's ``search``):
    each rung's trials to its stop, the selection between rungs, the join.

    Args:
        folder: the search's folder (:func:`plan_and_record`).
        dataset: the converted dataset's folder.
        models_root: where each trial's rung models go (``<key>/rung-<r>``).
        say: where each trial's line goes.
    """
    plan = read_plan(folder)
    keys = [t.key for t in plan.trials]
    for rung in range(len(plan.rungs)):
        for key in keys:
            model = storage.join(models_root, key, f"rung-{rung}")
            result = run_trial((dataset, dataset), (model, model), folder, key, rung, time.time())
            quality = f", {plan.objective.metric} {result.quality:.4f}" if result.quality is not None else ""
            reason = f" ({result.reason})" if result.reason else ""
            say(f"rung {rung}: {plan.trial(key).name}: {result.status}{quality}{reason}")
        if rung < len(plan.rungs) - 1:
            keys = [item["key"] for item in select(folder, rung)]
    return join(folder)


def select(folder: str, rung: int) -> list[dict[str, Any]]:
    """The trials promoted from ``rung`` (fan-out items for the next), also in ``rung-<r+1>.json``.

    A trial of the rung without a row (its task was killed) is a failed row: never promoted.
    """
    plan = read_plan(folder)
    results = rung_results(folder, plan, rung)
    chosen = select_next(plan, rung, [r.row() for r in results], spent=spent(folder, plan))
    storage.write_json(storage.join(folder, f"rung-{rung + 1}.json"), chosen)
    return fan_out_items(plan, folder, chosen)


@dataclasses.dataclass(frozen=True)
class SearchOutcome:
    """What the join made of a search."""

    plan: SearchPlan
    results: list[TrialResult]
    reached: int
    frontier_cost: list[str]
    frontier_time: list[str]
    choice: dict[str, Any]
    saved: dict[str, Any]
    complete: bool
    notes: list[str]


def join(folder: str) -> SearchOutcome:
    """The search's table, frontiers, pick and savings from the rows the trials wrote (``search.json``).

    Runs whichever rungs finished: a rung whose trials left no rows (a killed pod) ends the search
    there, with the frontier of what finished, and the notes say so.
    """
    plan = read_plan(folder)
    results, reached = latest_results(folder, plan)
    rows = [r.row() for r in results]
    metric, higher = plan.objective.metric, plan.objective.higher_is_better
    notes = []
    lost = [r.key for r in results if r.reason == LOST]
    if lost:
        notes.append(f"the search ended at rung {reached}: {len(lost)} trial(s) left no result ({', '.join(lost)})")
    complete = reached == len(plan.rungs) - 1 and not lost
    if not complete and not lost:
        notes.append(f"the search reached rung {reached} of {len(plan.rungs) - 1}")
    choice = pick(plan.objective, rows)
    outcome = SearchOutcome(
        plan=plan,
        results=results,
        reached=reached,
        frontier_cost=[r.key for r in pareto_frontier(rows, "cost", metric, higher)],
        frontier_time=[r.key for r in pareto_frontier(rows, "seconds", metric, higher)],
        choice=choice.to_dict(),
        saved=_saved(rows, plan),
        complete=complete,
        notes=notes,
    )
    storage.write_json(storage.join(folder, RESULT), record(outcome))
    if choice.key is not None:
        storage.write_text(storage.join(folder, BEST_CONFIG), best_config(plan, choice.key))
    return outcome


def _saved(rows: Sequence[TrialRow], plan: SearchPlan) -> dict[str, Any]:
    figures = savings(rows, plan)
    return {**figures.to_dict(), "share": figures.share, "line": figures.line()}


def record(o: SearchOutcome) -> dict[str, Any]:
    """``search.json``'s content: the outcome as JSON data."""
    chosen = next((r for r in o.results if r.key == o.choice.get("key")), None)
    return {
        "complete": o.complete,
        "reached_rung": o.reached,
        "notes": o.notes,
        "objective": o.plan.objective.to_dict(),
        "choice": {**o.choice, **({"model_uri": chosen.model_uri} if chosen is not None else {})},
        "frontier_cost": o.frontier_cost,
        "frontier_time": o.frontier_time,
        "savings": o.saved,
        "trials": [{"name": o.plan.trial(r.key).name, **r.to_dict()} for r in o.results],
    }


def best_config(plan: SearchPlan, key: str) -> str:
    """The chosen trial's settings as a ``CONFIG`` file for ``make run`` / ``make submit``."""
    cell = plan.trial(key).cell
    fields = trial_config(plan, key, len(plan.rungs) - 1)
    form = {
        "model": fields["model"],
        "model_options": dict(fields["model_options"]),
        "batch_size_per_replica": fields["batch_size_per_replica"],
        "learning_rate": fields["learning_rate"],
        "time_budget": fields["time_budget"],
    }
    if plan.own_schedule or plan.unit == "steps":
        form["epochs"] = fields["epochs"]
    if plan.unit == "steps":
        form["steps_per_epoch"] = fields["steps_per_epoch"]
    if cell.accelerator_type:
        form["accelerator_type"] = cell.accelerator_type
        form["accelerator_count"] = int(cell.accelerator_count)
    head = f"# The search's pick: {plan.trial(key).name} (trial {key}); make run CONFIG=this-file\n"
    return head + yaml.safe_dump(form, sort_keys=False)
