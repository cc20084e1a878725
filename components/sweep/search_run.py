"""A search as it runs: its plan on record, one trial trained to a rung's stop, the selection, the join.

Everything lives under the search's folder, ``<rows_root>/<plan id>/`` (the id a hash of the
plan, so the same search finds its own folder again and another search gets another)::

    plan.json                       the plan (components/sweep/search.py)
    trials/<key>/checkpoints/       the trial's checkpoints: every rung continues from them
    trials/<key>/rung-<r>.json      the trial's row after rung r (ok, stopped or failed, and why)
    rung-<r>.json                   the trials the selection sent to rung r (r >= 1)
    search.json, frontier.md, frontier.html, best.yaml   the join's

A trial's schedule is laid out once for the last rung's budget (``TrainConfig.time_budget``); each
rung stops it at its own budget (``TrainConfig.stop_at``), and the next rung continues from the
trial's checkpoint folder, which is the trial's, not the rung task's artifact folder (new at every
rung). A trial that fails is a failed row with its reason; the search carries on with the others.
A row already written for a trial and rung is the trial's result: a re-run of an interrupted
search trains only what did not finish. No TensorFlow here but inside :func:`run_trial`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import yaml

from components.sweep.search import (
    SearchError,
    SearchPlan,
    SearchSpec,
    TrialRow,
    pareto_frontier,
    pick,
    plan_search,
    savings,
    select_next,
)
from trainer import model_folder, records, storage

log = logging.getLogger(__name__)

PLAN = "plan.json"
RESULT = "search.json"
BEST_CONFIG = "best.yaml"
LOST = "no result: its task did not finish"  # the reason of a trial whose pod left no row


def search_dir(rows_root: str, plan: SearchPlan) -> str:
    """``<rows_root>/<plan id>``: the search's own folder."""
    blob = json.dumps(plan.to_dict(), sort_keys=True, default=str)
    return storage.join(rows_root, "search-" + hashlib.sha256(blob.encode()).hexdigest()[:12])


def trial_dir(folder: str, key: str) -> str:
    """A trial's folder: its checkpoints and its rows."""
    return storage.join(folder, "trials", key)


def row_uri(folder: str, key: str, rung: int) -> str:
    """Where a trial's row after a rung is."""
    return storage.join(trial_dir(folder, key), f"rung-{rung}.json")


def plan_and_record(
    spec: Mapping[str, Any],
    settings: Mapping[str, Any],
    context: Mapping[str, Any],
    rows_root: str,
    price_table: Optional[str] = None,
    compiled_rungs: Optional[int] = None,
    task_name: Optional[str] = None,
) -> tuple[SearchPlan, str]:
    """Plans the search, checks it against the compiled pipeline, writes ``plan.json`` once.

    Args:
        spec: the search file's mapping.
        settings: grid cell defaults for what the trials leave out (the pipeline's model, ...).
        context: what else the trials depend on (the dataset's source and limit).
        rows_root: the searches' root folder.
        price_table: a YAML price table over the defaults.
        compiled_rungs: the rungs the pipeline was compiled with; None: any.
        task_name: the dataset's task where it is known; None: the file's (``task``), else the default.

    Returns:
        The plan and the search's folder.

    Raises:
        SearchError: a bad search file (its message names the fix), or one with another number of
            rungs than the compiled pipeline has.
    """
    parsed = SearchSpec.from_dict(dict(spec))
    plan = plan_search(parsed, task_name, price_table=price_table, defaults=settings, context=context)
    if compiled_rungs is not None and parsed.rungs != compiled_rungs:
        raise SearchError(
            f"search.rungs: the file asks for {parsed.rungs} rungs and this pipeline was compiled with "
            f"{compiled_rungs}; set rungs: {compiled_rungs}, or compile with SEARCH_RUNGS={parsed.rungs}"
        )
    check_trial_configs(plan)
    folder = search_dir(rows_root, plan)
    if not storage.exists(storage.join(folder, PLAN)):
        storage.write_json(storage.join(folder, PLAN), plan.to_dict())
    return plan, folder


def check_trial_configs(plan: SearchPlan) -> None:
    """Refuses a plan whose trial the trainer would refuse (a learning rate out of range...), before
    any accelerator is asked for; the message names the trial.

    Raises:
        SearchError: the first trial whose training config is refused, with the trainer's reason.
    """
    from trainer.config import ConfigError, TrainConfig

    for trial in plan.trials:
        for rung in (0, len(plan.rungs) - 1):
            try:
                TrainConfig.from_dict(trial_config(plan, trial.key, rung))
            except ConfigError as err:
                raise SearchError(f"search trial {trial.name}: {err}; change the space or the fixed settings") from None


def read_plan(folder: str) -> SearchPlan:
    """The plan written in a search's folder.

    Raises:
        SearchError: none there (the planning step did not finish).
    """
    data = storage.read_json(storage.join(folder, PLAN))
    if data is None:
        raise SearchError(f"no {PLAN} in {folder}: the planning step did not finish (see its log)")
    return SearchPlan.from_dict(data)


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


@dataclasses.dataclass(frozen=True)
class TrialResult(records.Record):
    """A trial's row after one rung (``trials/<key>/rung-<r>.json``).

    Attributes:
        key: the trial.
        rung: the rung it ran.
        status: ``ok`` (trained to the rung's stop, or to the end at the last rung), ``stopped``
            (its training ended before the rung's stop: its own schedule finished or early
            stopping; more budget would change nothing) or ``failed`` (``reason`` says why).
        reason: why it failed, or why it stopped.
        quality: the search's metric on the test split.
        metrics: every metric of the evaluation.
        steps: optimizer steps so far.
        planned_steps: the schedule's whole length.
        rung_s: this rung's billed seconds (its process start to the end of the evaluation).
        startup_s: of those, the process's start-up before training began (TensorFlow's import).
        seconds: billed seconds so far, all its rungs.
        cost: dollars so far, all its rungs, at its accelerator's price.
        model_uri: the model this rung exported (promotable as any other).
        started_at: Unix time this rung's process started.
    """

    _what = "search trial row"
    _error = SearchError
    _omit_empty = ("reason", "quality", "steps", "planned_steps", "model_uri")

    key: str
    rung: int
    status: str
    reason: Optional[str] = None
    quality: Optional[float] = None
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    steps: Optional[int] = None
    planned_steps: Optional[int] = None
    rung_s: float = 0.0
    startup_s: float = 0.0
    seconds: float = 0.0
    cost: float = 0.0
    model_uri: str = ""
    started_at: float = 0.0

    def row(self) -> TrialRow:
        """What the selection and the frontier read."""
        return TrialRow(
            key=self.key, status=self.status, quality=self.quality, cost=self.cost, seconds=self.seconds,
            rung=self.rung, metrics=self.metrics, reason=self.reason if self.status == "failed" else None,
        )  # fmt: skip


def read_result(folder: str, key: str, rung: int) -> Optional[TrialResult]:
    """A trial's row after a rung, or None (not run, or killed before it wrote one)."""
    data = storage.read_json(row_uri(folder, key, rung))
    return None if data is None else TrialResult.from_dict(data)


def _earlier(folder: str, key: str, rung: int) -> tuple[float, float]:
    """(billed seconds, dollars) the trial spent before ``rung``."""
    previous = read_result(folder, key, rung - 1) if rung > 0 else None
    return (previous.seconds, previous.cost) if previous is not None else (0.0, 0.0)


def trial_config(plan: SearchPlan, key: str, rung: int) -> dict[str, Any]:
    """The TrainConfig fields of a trial at a rung: its cell's, its schedule, the rung's stop.

    Budgets in seconds: the schedule is laid out for the last rung's (``time_budget``), each rung
    stops at its own time. Budgets in steps: the schedule is ``max_budget`` steps in evaluations
    of the rungs' common divisor (every rung ends on an evaluation), each rung stops at its step.
    """
    fields = plan.trial(key).cell.train_fields()
    last = rung == len(plan.rungs) - 1
    stop = plan.rungs[rung].stop
    if plan.unit == "steps":
        every = math.gcd(*(int(r.stop) for r in plan.rungs))
        fields["epochs"], fields["steps_per_epoch"] = int(plan.rungs[-1].stop) // every, every
        fields["time_budget"] = "auto"
        fields["stop_at"] = "auto" if last else f"{int(stop)} steps"
    else:
        if not plan.own_schedule:
            fields["epochs"] = None  # a filled budget lays the schedule out itself
            fields["steps_per_epoch"] = None
        fields["time_budget"] = plan.time_budget
        fields["stop_at"] = "auto" if last else f"{stop:g}s"
    cell = plan.trial(key).cell
    fields["accelerator_type"] = cell.accelerator_type
    fields["accelerator_count"] = int(cell.accelerator_count or 0)
    return fields


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
    keys = rung_keys(folder, plan, rung)
    results = [read_result(folder, k, rung) or _lost(k, rung) for k in keys]
    chosen = select_next(plan, rung, [r.row() for r in results], spent=spent(folder, plan))
    storage.write_json(storage.join(folder, f"rung-{rung + 1}.json"), chosen)
    return fan_out_items(plan, folder, chosen)


def _lost(key: str, rung: int) -> TrialResult:
    return TrialResult(key=key, rung=rung, status="failed", reason=LOST)


def rung_keys(folder: str, plan: SearchPlan, rung: int) -> list[str]:
    """The trials a rung trained: every trial at the first, the selection's at the others; None: not reached."""
    if rung == 0:
        return [t.key for t in plan.trials]
    return list(storage.read_json(storage.join(folder, f"rung-{rung}.json")) or [])


def latest_results(folder: str, plan: SearchPlan) -> tuple[list[TrialResult], int]:
    """Each trial's latest row, and the last rung that has rows (how far the search got)."""
    latest: dict[str, TrialResult] = {}
    reached = 0
    for rung in range(len(plan.rungs)):
        keys = rung_keys(folder, plan, rung)
        if rung > 0 and not storage.exists(storage.join(folder, f"rung-{rung}.json")):
            break
        reached = rung
        for key in keys:
            latest[key] = read_result(folder, key, rung) or _lost(key, rung)
    return [latest[t.key] for t in plan.trials if t.key in latest], reached


def spent(folder: str, plan: SearchPlan) -> float:
    """Dollars the whole search has been billed so far (every trial's latest row)."""
    return sum(r.cost for r in latest_results(folder, plan)[0])


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


def search_settings(
    model: str,
    model_options: Mapping[str, Any],
    batch_size_per_replica: int,
    learning_rate: float,
    source: str,
    limit_per_split: int,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The trials' defaults and key context from the pipeline's parameters (the plan and the join alike)."""
    from components.sweep.grid import grid_settings

    return grid_settings(model, model_options, 1, 0, batch_size_per_replica, learning_rate, source, limit_per_split)
