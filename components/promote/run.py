"""Promotion of a model to a serving stage, and rollback (docs/promotion.md).

``promote``: publish the SavedModel to the stage as a new version -> serve it on the configured
serving target (``components.serving.targets``: a loopback model server for ``local``, the
stage's Kubernetes rollout for ``kubernetes``) -> serving checks
(``components.serving.checks``) -> on any failure retire the new version, verify the previous one
serves, record the rollback and raise -> else record the promotion. Re-running for the model the
stage already serves is a no-op. On a target that splits traffic (its ``canary_steps``: kserve in
Knative mode, local when configured) a new version that replaces an earlier one takes each share
in turn, the serving checks run against the canary alone and the load objectives against the
shared URL at each step, and a failed step rolls back the same way.

A stage serves several models side by side by name (``PromoteConfig.model_name``): promoting or
rolling back one model serves the stage's other models as they were (their records are the
stage's registry, ``StageRegistry.served_versions``), checks that they still answer, and leaves
their records alone.

Each public function builds the serving target once (:func:`_target_of`: the registry of
``config.stages_root``, the target's own ``config.serving_options``, the generic
``config.canary_steps``) and works on the stage store through the target's registry. Every
record names the target and the model's task.

``promote_version``: the same for a version another stage serves (demo -> staging -> prod).

``rollback``: take the stage's newest version out of service and verify the one before it.

The checks ask the model's task (``PromoteConfig.task``, else the model folder's
``training.json``, else the stage's known examples, else classification).

A promotion keeps the contract of what a stage serves under a model name
(``components.serving.contract``): a candidate whose classes, class order, signatures' inputs or
output keys differ is refused before anything is published, with one line naming the difference,
unless ``PromoteConfig.allow_contract_change`` (the entry then records ``contract_change``). A
rollback returns to what was served and is not checked.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any, Optional

from components import markdown
from components.serving.checks import (
    CheckResult,
    ChecksReport,
    KnownExample,
    ServingChecksError,
    check_health,
    check_load,
    checks_from_dict,
    checks_to_dict,
    run_checks,
)
from components.serving.config import STAGES, LoadTestConfig, PromoteConfig
from components.serving.contract import ContractChangeError, ServingContract, contract_change, read_contract
from components.serving.load import LoadTestRecord
from components.serving.stages import READY_MARKER, StageEntry, StageExamples, StageRegistry
from components.serving.targets import Endpoints, ServingTarget, TargetSettings, get_target
from trainer import model_folder, records, storage
from trainer.tasks import Task, get_task, task_of_model

log = logging.getLogger(__name__)

CHECKS_SPLIT = "test"


class PromotionError(RuntimeError):
    """A promotion failed (and was rolled back); the message says why and what the stage serves."""


@dataclasses.dataclass(frozen=True)
class PromotionResult(records.Record):
    """What a promotion or a rollback did (rendered by :func:`render_report`).

    A strict record; its JSON (the command line's ``--json``) is every field, ``checks`` as in the
    stage history.

    Attributes:
        action: ``promote`` or ``rollback``.
        stage: the stage acted on.
        version: the version the stage serves now (None: nothing).
        previous_version: the version it served before (the one a rollback left).
        no_op: the stage already served this model; nothing changed.
        model_uri: the model the served version came from.
        target: the serving target's name (``components.serving.targets``).
        checks: the serving checks of the version now served.
        accuracy: the share of known examples the prediction check got right.
        metrics: the evaluation metrics recorded with the version.
        source_stage, source_version: for a version moved from another stage.
        load_test: the served version's load test at this action, and its objectives.
        contract_change: the line naming how this promotion replaced what the stage served under
            the model name (``allow_contract_change``); None: it kept it.
    """

    _what = "promotion result"

    action: str
    stage: str
    version: Optional[int]
    previous_version: Optional[int]
    no_op: bool
    model_uri: str
    target: str
    checks: tuple[CheckResult, ...] = records.field(default=(), dump=checks_to_dict, load=checks_from_dict)
    accuracy: Optional[float] = None
    metrics: Mapping[str, float] = dataclasses.field(default_factory=dict)
    source_stage: Optional[str] = None
    source_version: Optional[int] = None
    load_test: Optional[LoadTestRecord] = None
    contract_change: Optional[str] = None

    def check(self, name: str) -> CheckResult:
        """The check called ``name``.

        Raises:
            KeyError: no such check ran.
        """
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(f"no check {name!r} ran; ran: {[c.name for c in self.checks]}")


def saved_model_dir_of(model_dir: str) -> str:
    """Return the SavedModel folder of a model folder (``<model>/saved_model``), or the folder itself.

    Raises:
        FileNotFoundError: neither holds ``saved_model.pb``.
    """
    for candidate in (model_folder.saved_model_dir(model_dir), model_dir):
        if storage.exists(storage.join(candidate, READY_MARKER)):
            return candidate
    raise FileNotFoundError(
        f"{model_dir} is not a model folder: neither {model_dir}/saved_model/saved_model.pb nor "
        f"{model_dir}/saved_model.pb exists; pass the train step's model artifact"
    )


def known_examples_of_dataset(dataset_dir: str, task: Task, count: int, split: str = CHECKS_SPLIT) -> StageExamples:
    """The first ``count`` known examples of a dataset split, as the task reads them.

    Raises:
        ValueError: the split has no examples with a known answer.
    """
    examples = tuple(
        KnownExample(image, expected) for image, expected in task.known_examples(dataset_dir, split, count)
    )
    if not examples:
        raise ValueError(f"no labelled examples in the {split!r} split of {dataset_dir} for the serving checks")
    return StageExamples(task=task.name, examples=examples)


def _stage_models(stages: StageRegistry, config: PromoteConfig, version: Optional[int]) -> dict[str, int]:
    """What the stage is to serve: its registry's other models, and this one at ``version`` (None: not it)."""
    models = {name: v for name, v in stages.served_versions(config.stage).items() if name != config.model_name}
    if version is not None:
        models[config.model_name] = version
    return dict(sorted(models.items()))


def _with_stage_models(
    report: ChecksReport, endpoints: Endpoints, others: Mapping[str, int], config: PromoteConfig, timeout_s: float
) -> ChecksReport:
    """Adds the ``stage_models`` check: the stage's ``others`` (name -> the version it serves them at) answer.

    Without other models the report is returned as it is.

    Raises:
        ServingChecksError: one of the other models is not AVAILABLE at its recorded version.
    """
    if not others:
        return report
    health = {name: check_health(endpoints.url(name), name, version, timeout_s) for name, version in others.items()}
    failed = [f"{name}: {result.detail}" for name, result in health.items() if not result.passed]
    detail = "; ".join(failed) if failed else "also serves " + ", ".join(f"{n} version {v}" for n, v in others.items())
    check = CheckResult("stage_models", not failed, detail, {"models": len(others)})
    report = dataclasses.replace(report, checks=(*report.checks, check))
    if failed:
        raise ServingChecksError(
            f"the stage's other models do not all answer after serving {config.model_name}: {detail}", report
        )
    return report


def _serve_and_check(
    config: PromoteConfig,
    target: ServingTarget,
    version: int,
    examples: StageExamples,
    rollback: bool = False,
    canary: bool = False,
) -> ChecksReport:
    """Make the stage serve ``version`` (its newest in service) on ``target`` and run the serving checks on it.

    With ``canary`` (an earlier version serves) on a target that splits traffic, the version goes
    through the target's canary steps instead (:func:`_canary`).
    """
    load = config.effective_load_test(target.load_profile)
    if canary and not rollback and target.canary_steps():
        return _canary(config, target, version, examples, load)
    if rollback:
        # The version returned to met its objectives when it was promoted; now it must answer
        # (the API checks, the bounded load without errors). Holding it to latency objectives the
        # failed version missed could leave the stage with nothing verified to serve.
        load = load.replace(max_p50_ms=None, max_p95_ms=None, max_p99_ms=None, min_requests_per_s=None)
    models = _stage_models(target.stages, config, version)
    act = target.restore if rollback else target.serve
    act(config.stage, models, config.model_name, config.rollout_timeout_s)
    timeout_s = target.checks_timeout_s(config.rollout_timeout_s)
    with target.endpoints(config.stage, models) as endpoints:
        return _stage_checks(endpoints, models, config, examples, timeout_s, load)


def _stage_checks(
    endpoints: Endpoints,
    models: Mapping[str, int],
    config: PromoteConfig,
    examples: StageExamples,
    timeout_s: float,
    load: Optional[LoadTestConfig],
) -> ChecksReport:
    """Every serving check and the load test on the stage's URL (the model at its version in
    ``models``), then that the stage's other models in ``models`` still answer.
    """
    version = models[config.model_name]
    report = run_checks(
        endpoints.url(config.model_name),
        config.model_name,
        examples.examples,
        config.min_smoke_accuracy,
        task=get_task(examples.task),
        expected_version=version,
        timeout_s=timeout_s,
        load=load,
    )
    others = {name: v for name, v in models.items() if name != config.model_name}
    return _with_stage_models(report, endpoints, others, config, timeout_s)


def _canary_step(
    endpoints: Endpoints,
    config: PromoteConfig,
    examples: StageExamples,
    version: int,
    timeout_s: float,
    load: LoadTestConfig,
) -> ChecksReport:
    """The serving checks against the canary alone, and the stage's load objectives against the shared URL.

    Raises:
        ServingChecksError: a check or an objective failed (its report holds every result).
    """
    name = config.model_name
    report = run_checks(
        endpoints.canary_url(name),
        name,
        examples.examples,
        config.min_smoke_accuracy,
        task=get_task(examples.task),
        expected_version=version,
        timeout_s=timeout_s,
        load=None,
    )
    load_check = check_load(endpoints.url(name), name, examples.examples[0].image, load)
    record = LoadTestRecord.of(load_check.figures, load.objectives(), load_check.passed) if load_check.figures else None
    report = dataclasses.replace(report, checks=(*report.checks, load_check), load_test=record)
    if not load_check.passed:
        raise ServingChecksError(f"load objectives at {endpoints.url(name)}: {load_check.detail}", report)
    return report


def _canary_check(steps: tuple[int, ...], passed: list[int], failed: Optional[int]) -> CheckResult:
    done = ", ".join(f"{p}%" for p in passed) or "none"
    detail = f"failed at {failed}% (passed: {done})" if failed is not None else f"passed at {done}"
    figures = {"steps": float(len(steps)), "passed_steps": float(len(passed))}
    return CheckResult("canary", failed is None, detail, figures)


def _canary(
    config: PromoteConfig, target: ServingTarget, version: int, examples: StageExamples, load: LoadTestConfig
) -> ChecksReport:
    """Walks ``version`` through ``target``'s canary steps, checking it at each; the last (100%) runs
    every check against the shared URL. The report ends with a ``canary`` check naming the steps.

    Raises:
        ServingChecksError: a step's checks failed (the report says at which step); the caller
            rolls back.
    """
    models = _stage_models(target.stages, config, version)
    steps, passed = target.canary_steps(), []
    timeout_s = target.checks_timeout_s(config.rollout_timeout_s)
    report = ChecksReport(checks=(), version=version, accuracy=None)
    for percent in steps:
        target.serve_canary(config.stage, models, config.model_name, percent, config.rollout_timeout_s)
        with target.endpoints(config.stage, models) as endpoints:
            try:
                if percent < 100:
                    report = _canary_step(endpoints, config, examples, version, timeout_s, load)
                else:
                    report = _stage_checks(endpoints, models, config, examples, timeout_s, load)
            except ServingChecksError as err:
                checks = (*err.report.checks, _canary_check(steps, passed, percent))
                raise ServingChecksError(
                    f"canary at {percent}% failed: {err}", dataclasses.replace(err.report, checks=checks)
                ) from err
        log.info("%s: version %d passed its checks at %d%% of the traffic", config.stage, version, percent)
        passed.append(percent)
    return dataclasses.replace(report, checks=(*report.checks, _canary_check(steps, passed, None)))


def _float_metrics(metrics: Optional[Mapping[str, Any]]) -> dict[str, float]:
    return {k: float(v) for k, v in (metrics or {}).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _evaluation_metrics(task: Task, saved_model_dir: str, dataset_dir: str) -> dict[str, float]:
    # The gate compares a candidate's test-split metrics with prod's recorded ones: record the same.
    from trainer.config import EvaluateConfig

    return _float_metrics(task.evaluate(saved_model_dir, dataset_dir, EvaluateConfig(split=CHECKS_SPLIT)).metrics)


@dataclasses.dataclass(frozen=True)
class _Candidate:
    """A version to promote: its files, and how to get its contract, examples and metrics.

    They are got lazily: a no-op promotion needs none of them.
    """

    saved_model: str
    model_uri: str
    contract: Callable[[], Optional[ServingContract]]
    examples: Callable[[], StageExamples]
    metrics: Callable[[], dict[str, float]]
    source_stage: Optional[str] = None
    source_version: Optional[int] = None


def promote(
    model_dir: str,
    dataset_dir: str,
    config: PromoteConfig,
    run_id: str,
    metrics: Optional[Mapping[str, Any]] = None,
    target: Optional[ServingTarget] = None,
) -> PromotionResult:
    """Promote a model to ``config.stage``; on any failed check roll back and raise.

    Args:
        model_dir: the model folder (with ``saved_model/``) or a SavedModel folder.
        dataset_dir: the dataset whose test split gives the known examples.
        config: stage, target, stages_root, model_name, task, check settings.
        run_id: the run that promotes (recorded in the history).
        metrics: the model's evaluation metrics to record (prod's are the gate's baseline);
            None scores the SavedModel on the dataset's test split.
        target: where the stage serves, built for the registry of ``config.stages_root``; None: the
            target ``config.target`` names, built from ``config`` (:func:`_target_of`).

    Returns:
        What was done (``no_op`` when the stage already served this model).

    Raises:
        PromotionError: a check (or the rollout) failed; the stage was rolled back.
        FileNotFoundError: ``model_dir`` holds no SavedModel.
    """
    if not isinstance(config, PromoteConfig):
        raise TypeError(f"config must be a PromoteConfig, got {type(config).__name__}")
    target = _target_of(config, target)
    saved_model = saved_model_dir_of(model_dir)
    task = get_task(config.task) if config.task is not None else task_of_model(model_dir)
    candidate = _Candidate(
        saved_model,
        model_dir,
        contract=lambda: read_contract(saved_model, task),
        examples=lambda: known_examples_of_dataset(dataset_dir, task, config.smoke_examples),
        metrics=lambda: (
            _float_metrics(metrics) if metrics is not None else _evaluation_metrics(task, saved_model, dataset_dir)
        ),
    )
    return _promote(candidate, config, run_id, target)


def _passing_version(
    stages: StageRegistry, source_stage: str, target_stage: str, model_name: str, version: Optional[int]
) -> tuple[StageEntry, int]:
    """The source stage's current entry and version, checked to be the (given) version it serves, having passed.

    Raises:
        ValueError: the stages are not consecutive, or the version is not what the source serves.
    """
    if source_stage not in STAGES or STAGES.index(source_stage) + 1 >= len(STAGES):
        raise ValueError(f"source_stage must be demo or staging (a stage with a next one), got {source_stage!r}")
    expected = STAGES[STAGES.index(source_stage) + 1]
    if target_stage != expected:
        raise ValueError(
            f"a version moves one stage at a time: from {source_stage} only to {expected}, not to {target_stage}"
        )
    current = stages.read_current(source_stage, model_name)
    if current is None or current.version is None:
        raise ValueError(f"{source_stage} serves no {model_name!r} model yet: promote one there first")
    version = current.version if version is None else version
    if current.version != version or not current.checks_passed:
        raise ValueError(
            f"{source_stage} serves version {current.version} (checks passed: {current.checks_passed}), not a "
            f"passing version {version}: only the version a stage serves, having passed its checks, moves on to "
            f"{expected}"
        )
    return current, version


def promote_version(
    config: PromoteConfig,
    source_stage: str,
    run_id: str,
    version: Optional[int] = None,
    target: Optional[ServingTarget] = None,
) -> PromotionResult:
    """Promote a version that passed one stage to the next stage (demo -> staging -> prod).

    The version's files, its recorded metrics and the source stage's known examples (and task)
    are reused, so the promote pipeline needs neither the model artifact nor the dataset.

    Args:
        config: the target stage (``config.stage``), target, stages_root, model_name.
        source_stage: the stage the version comes from; ``config.stage`` must be the one after it.
        run_id: the run that promotes.
        version: the source stage's version to promote; None takes the one it serves now. Either
            way it must be the version the source stage serves now, having passed its checks.
        target: where the stage serves, built for the registry of ``config.stages_root``; None: the
            target ``config.target`` names, built from ``config`` (:func:`_target_of`).

    Returns:
        What was done, with ``source_stage`` and ``source_version``.

    Raises:
        ValueError: the stages are not consecutive, or the version is not what the source serves.
        PromotionError: a check failed at the target stage; it was rolled back.
    """
    target = _target_of(config, target)
    stages = target.stages
    current, version = _passing_version(stages, source_stage, config.stage, config.model_name, version)
    saved_model = stages.version_path(source_stage, config.model_name, version)

    def examples() -> StageExamples:
        stored = stages.load_examples(source_stage, config.model_name)
        return stored if config.task is None else dataclasses.replace(stored, task=get_task(config.task).name)

    candidate = _Candidate(
        saved_model,
        current.model_uri or saved_model,
        # The source stage recorded the version's contract when it promoted it (older entries: read it).
        contract=lambda: current.contract or read_contract(saved_model, get_task(config.task or current.task)),
        examples=examples,
        metrics=lambda: _float_metrics(current.metrics),
        source_stage=source_stage,
        source_version=version,
    )
    return _promote(candidate, config, run_id, target)


def _target_of(config: PromoteConfig, target: Optional[ServingTarget]) -> ServingTarget:
    """``target``, else the one ``config`` names, built for the registry of ``config.stages_root`` with
    its own ``serving_options`` and the generic ``canary_steps``; checked to serve from that store.

    Raises:
        components.serving.targets.TargetError: an unknown target, options it does not take, or a
            given target built for another stages root.
        ValueError: the target cannot serve from the stage store.
    """
    if target is None:
        settings = TargetSettings(canary_steps=config.canary_steps)
        target = get_target(config.target, StageRegistry(config.stages_root), config.serving_options, settings)
    target.check_registry(config.stages_root)
    target.check()
    return target


def _promote(candidate: _Candidate, config: PromoteConfig, run_id: str, target: ServingTarget) -> PromotionResult:
    stages, stage, name = target.stages, config.stage, config.model_name
    sha = storage.tree_sha256(candidate.saved_model)
    in_service = stages.list_versions(stage, name)
    already = _already_served(stages, config, candidate, sha, in_service)
    if already is not None:
        return already

    contract, change = _kept_contract(stages, config, candidate)
    examples = candidate.examples()
    recorded_metrics = candidate.metrics()
    previous = in_service[-1] if in_service else None
    version = stages.publish(candidate.saved_model, stage, name)
    stages.save_examples(stage, name, examples)
    try:
        report = _serve_and_check(config, target, version, examples, canary=previous is not None)
    except Exception as err:
        # Any failure (a check, the rollout, the server not starting) takes the version out of service.
        raise _failed(config, target, candidate, version, run_id, examples, err) from err
    entry = stages.record(
        stage,
        StageEntry(
            action="promote",
            version=version,
            model_uri=candidate.model_uri,
            run=run_id,
            model_name=name,
            checks=report.checks,
            metrics=recorded_metrics,
            sha256=sha,
            previous_version=previous,
            accuracy=report.accuracy,
            target=config.target,
            task=examples.task,
            source_stage=candidate.source_stage,
            source_version=candidate.source_version,
            load_test=report.load_test,
            contract=contract,
            contract_change=change,
        ),
    )
    return _result_of(entry, stage, no_op=False)


def _served_contract(stages: StageRegistry, config: PromoteConfig) -> Optional[ServingContract]:
    """The contract of what the stage serves under the model name; None: it serves nothing of it.

    An entry written before contracts were recorded has none: the version it serves says it.
    """
    current = stages.read_current(config.stage, config.model_name)
    if current is None or current.version is None:
        return None
    if current.contract is not None:
        return current.contract
    folder = stages.version_path(config.stage, config.model_name, current.version)
    if not storage.exists(storage.join(folder, READY_MARKER)):
        log.warning(
            "%s serves version %s of %r by its records, but %s holds no SavedModel: no contract to keep",
            config.stage,
            current.version,
            config.model_name,
            folder,
        )
        return None
    return read_contract(folder, get_task(current.task or config.task))


def _kept_contract(
    stages: StageRegistry, config: PromoteConfig, candidate: _Candidate
) -> tuple[Optional[ServingContract], Optional[str]]:
    """The candidate's contract, and the line naming how it changes what the stage serves (None: it keeps it).

    Where either has none (no contract recorded or readable: no SavedModel to read) nothing is compared.

    Raises:
        ContractChangeError: it changes it, and ``config.allow_contract_change`` is false.
    """
    contract = candidate.contract()
    served = _served_contract(stages, config)
    unknown = served is None or contract is None
    change = None if unknown else contract_change(config.stage, config.model_name, served, contract)
    if change is not None and not config.allow_contract_change:
        raise ContractChangeError(change)
    if change is not None:
        log.warning("allow_contract_change: %s", change)
    return contract, change


def _result_of(entry: StageEntry, stage: str, no_op: bool) -> PromotionResult:
    return PromotionResult(
        action=entry.action,
        stage=stage,
        version=entry.version,
        previous_version=entry.previous_version,
        no_op=no_op,
        model_uri=entry.model_uri,
        target=entry.target or "",
        checks=entry.checks,
        accuracy=entry.accuracy,
        metrics=entry.metrics,
        source_stage=entry.source_stage,
        source_version=entry.source_version,
        load_test=entry.load_test,
        contract_change=entry.contract_change,
    )


def _already_served(
    stages: StageRegistry, config: PromoteConfig, candidate: _Candidate, sha: str, in_service: list[int]
) -> Optional[PromotionResult]:
    """The no-op result when the stage's newest version in service is this very model, else None."""
    current = stages.read_current(config.stage, config.model_name)
    if current is None or current.sha256 != sha or current.version not in in_service[-1:]:
        return None
    log.info("%s already serves this model as version %s: nothing to do", config.stage, current.version)
    result = _result_of(current, config.stage, no_op=True)
    return dataclasses.replace(
        result,
        action="promote",
        model_uri=candidate.model_uri,
        target=config.target,
        source_stage=candidate.source_stage,
        source_version=candidate.source_version,
        contract_change=None,
    )


def _failed(
    config: PromoteConfig,
    target: ServingTarget,
    candidate: _Candidate,
    version: int,
    run_id: str,
    examples: StageExamples,
    err: Exception,
) -> PromotionError:
    """Rolls the stage back after a failed promotion; returns the error to raise."""
    reason = f"{type(err).__name__}: {err}"
    log.error("promotion of version %d to %s failed: %s; rolling back", version, config.stage, reason)
    failed_load = err.report.load_test if isinstance(err, ServingChecksError) else None
    back = _roll_back(config, target, version, run_id, reason, examples, failed_load)
    served = f"version {back.version} (verified)" if back.version is not None else "nothing"
    return PromotionError(
        f"promotion of {candidate.model_uri} to {config.stage} as version {version} failed: {reason}. Rolled back: "
        f"{config.stage} serves {served}. Fix the model (or the check settings in PromoteConfig) and promote again."
    )


def _roll_back(
    config: PromoteConfig,
    target: ServingTarget,
    version: int,
    run_id: str,
    reason: str,
    examples: StageExamples,
    failed_load: Optional[LoadTestRecord] = None,
) -> StageEntry:
    """Retire ``version``, make the stage serve the one before it, verify and record that."""
    stages, stage, name = target.stages, config.stage, config.model_name
    stages.retire(stage, name, version)
    remaining = stages.list_versions(stage, name)
    back_to = remaining[-1] if remaining else None
    entry = _rollback_entry(stages, config, version, run_id, reason, failed_load, back_to, examples.task)
    if not remaining:
        # Nothing was served before: the stage serves its other models only, and says so in its history.
        target.restore(stage, _stage_models(stages, config, None), name, config.rollout_timeout_s)
        return stages.record(stage, entry)
    try:
        report = _serve_and_check(config, target, remaining[-1], examples, rollback=True)
    except Exception as err:
        failed = err.report if isinstance(err, ServingChecksError) else None
        stages.record(
            stage,
            dataclasses.replace(
                entry,
                checks=failed.checks if failed else (),
                verified=False,
                load_test=failed.load_test if failed else None,
            ),
        )
        raise PromotionError(
            f"{stage}: rolled back from version {version} to {remaining[-1]}, but version {remaining[-1]} "
            f"fails its checks too: {err}. The stage needs attention."
        ) from err
    verified = dataclasses.replace(
        entry, checks=report.checks, accuracy=report.accuracy, verified=True, load_test=report.load_test
    )
    return stages.record(stage, verified)


def _rollback_entry(
    stages: StageRegistry,
    config: PromoteConfig,
    version: int,
    run_id: str,
    reason: str,
    failed_load: Optional[LoadTestRecord],
    back_to: Optional[int],
    task: str,
) -> StageEntry:
    """The history entry of rolling ``version`` back to ``back_to`` (None: to nothing), before its checks."""
    stage, name = config.stage, config.model_name
    earlier = stages.last_entry_for_version(stage, name, back_to) if back_to is not None else None
    return StageEntry(
        action="rollback",
        version=back_to,
        model_uri=earlier.model_uri if earlier else "",
        run=run_id,
        model_name=name,
        metrics=earlier.metrics if earlier else {},
        sha256=earlier.sha256 if earlier else None,
        previous_version=version if back_to is not None else None,
        target=config.target,
        task=task,
        reason=reason,
        failed_version=version,
        failed_load_test=failed_load,
        contract=earlier.contract if earlier else None,  # what is served again (a rollback is not checked)
    )


def rollback(config: PromoteConfig, run_id: str, target: Optional[ServingTarget] = None) -> PromotionResult:
    """Return a stage's model to the version it served before its current one, verified by the serving checks.

    The stage's other models keep the versions they are served at.

    Args:
        config: the stage, target, stages_root and model_name (the model rolled back).
        run_id: the run that rolls back (recorded in the history).
        target: where the stage serves, built for the registry of ``config.stages_root``; None: the
            target ``config.target`` names, built from ``config`` (:func:`_target_of`).

    Returns:
        What was done: ``version`` is the version served now, ``previous_version`` the one left.

    Raises:
        ValueError: the stage has fewer than two versions in service (nothing to return to).
        PromotionError: the earlier version fails its checks.
    """
    stage, name = config.stage, config.model_name
    target = _target_of(config, target)
    stages = target.stages
    in_service = stages.list_versions(stage, name)
    if len(in_service) < 2:
        raise ValueError(
            f"cannot roll back {stage}: versions in service are {in_service} under "
            f"{stages.model_base_path(stage, name)}; a rollback needs an earlier version to return to"
        )
    examples = stages.load_examples(stage, name)
    if config.task is not None:
        examples = dataclasses.replace(examples, task=get_task(config.task).name)
    back = _roll_back(config, target, in_service[-1], run_id, "rollback requested", examples)
    return _result_of(back, stage, no_op=False)


def render_report(result: PromotionResult) -> str:
    """Render a promotion or rollback result as Markdown for the Kubeflow UI."""
    lines = [f"# {result.action.capitalize()}: {result.stage} serves version {result.version}", ""]
    if result.no_op:
        lines += ["The stage already served this model: nothing was changed.", ""]
    lines += [
        f"- model: `{result.model_uri}`",
        f"- target: {result.target}",
        f"- previous version: {result.previous_version}",
    ]
    if result.source_stage is not None:
        lines.append(f"- from: {result.source_stage} version {result.source_version}")
    if result.contract_change is not None:
        lines.append(f"- contract replaced (allow_contract_change): {result.contract_change}")
    if result.accuracy is not None:
        lines.append(f"- accuracy on known test images: {result.accuracy:.3f}")
    if result.metrics:
        lines.append("- recorded metrics: " + ", ".join(f"{k}={v:.4g}" for k, v in sorted(result.metrics.items())))
    if result.load_test is not None:
        lt = result.load_test
        pcts = ", ".join(
            f"{n} {v:.1f} ms" for n, v in (("p50", lt.p50_ms), ("p95", lt.p95_ms), ("p99", lt.p99_ms)) if v
        )
        goals = ", ".join(f"{k} {v:g}" for k, v in lt.objectives.items())
        lines.append(
            f"- load test: {lt.requests} requests from {lt.clients} clients, {lt.requests_per_s:.0f} req/s, "
            f"{pcts}, {lt.errors} errors; objectives {goals}: {'met' if lt.passed else 'MISSED'}"
        )
    checks = [[c.name, "yes" if c.passed else "NO", c.detail] for c in result.checks]
    lines += ["", *markdown.table(["check", "passed", "detail"], checks, "lll")]
    return "\n".join(lines) + "\n"
