"""A search's folder: its plan on record, each trial's rows, and how far the search got.

Everything lives under the search's folder, ``<rows_root>/<plan id>/`` (the id a hash of the
plan, so the same search finds its own folder again and another search gets another)::

    plan.json                       the plan (components/sweep/search/plan.py)
    trials/<key>/checkpoints/       the trial's checkpoints: every rung continues from them
    trials/<key>/rung-<r>.json      the trial's row after rung r (ok, stopped or failed, and why)
    rung-<r>.json                   the trials the selection sent to rung r (r >= 1)
    search.json, frontier.md, frontier.html, best.yaml   the join's (components/sweep/search/run.py)

A trial's schedule is laid out once for the last rung's budget (``TrainConfig.time_budget``); each
rung stops it at its own budget (``TrainConfig.stop_at``): :func:`trial_config`. A row already
written for a trial and rung is the trial's result. No TensorFlow here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any, Optional

from components.sweep.search.plan import SearchPlan, plan_search
from components.sweep.search.selection import TrialRow
from components.sweep.search.space import SearchError, SearchSpec
from trainer import records, storage

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


def search_settings(
    model: str,
    model_options: Mapping[str, Any],
    batch_size_per_replica: int,
    learning_rate: float,
    source: str,
    limit_per_split: int,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The trials' defaults and key context from the pipeline's parameters (the plan and the join alike)."""
    from components.sweep.config import SweepConfig

    settings = SweepConfig(
        model=model,
        source=source,
        model_options=model_options,
        epochs=1,
        batch_size_per_replica=batch_size_per_replica,
        learning_rate=learning_rate,
        limit_per_split=limit_per_split,
    )
    return settings.grid_defaults(), settings.key_context()


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


def _lost(key: str, rung: int) -> TrialResult:
    return TrialResult(key=key, rung=rung, status="failed", reason=LOST)


def rung_keys(folder: str, plan: SearchPlan, rung: int) -> list[str]:
    """The trials a rung trained: every trial at the first, the selection's at the others; None: not reached."""
    if rung == 0:
        return [t.key for t in plan.trials]
    return list(storage.read_json(storage.join(folder, f"rung-{rung}.json")) or [])


def rung_results(folder: str, plan: SearchPlan, rung: int) -> list[TrialResult]:
    """The rows of the trials a rung trained; a trial without one (its task was killed) is a failed row."""
    return [read_result(folder, k, rung) or _lost(k, rung) for k in rung_keys(folder, plan, rung)]


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
