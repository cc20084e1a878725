"""Serving a version on its target and checking it: the stage's other models served as they were,
the serving checks and the load test, and a canary's steps on a target that splits traffic.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Optional

from components.serving.checks import (
    CheckResult,
    ChecksReport,
    ServingChecksError,
    check_health,
    check_load,
    run_checks,
)
from components.serving.config import LoadTestConfig, PromoteConfig
from components.serving.load import LoadTestRecord
from components.serving.stages import StageExamples, StageRegistry
from components.serving.targets import Endpoints, ServingTarget, TargetSettings, get_target
from trainer.tasks import get_task

log = logging.getLogger(__name__)


def stage_models(stages: StageRegistry, config: PromoteConfig, version: Optional[int]) -> dict[str, int]:
    """What the stage is to serve: its registry's other models, and this one at ``version`` (None: not it)."""
    models = {name: v for name, v in stages.served_versions(config.stage).items() if name != config.model_name}
    if version is not None:
        models[config.model_name] = version
    return dict(sorted(models.items()))


def note_forms(target: ServingTarget, stage: str, models: Mapping[str, int]) -> None:
    """Tells ``target`` the form each model's version is served in (its version folder's)."""
    from components.serving.portable import served_format

    stages = target.stages
    target.forms = {name: served_format(stages.version_path(stage, name, v)) for name, v in models.items()}


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


def serve_and_check(
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
    models = stage_models(target.stages, config, version)
    note_forms(target, config.stage, models)
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
    models = stage_models(target.stages, config, version)
    note_forms(target, config.stage, models)
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


def target_of(config: PromoteConfig, target: Optional[ServingTarget]) -> ServingTarget:
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
