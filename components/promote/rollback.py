"""Rollback: a stage's newest version out of service and the one before it verified, on request or
after a failed promotion (the new version retired, the stage back to what it served).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Optional

from components.promote.result import PromotionError, PromotionResult, result_of
from components.promote.verify import note_forms, serve_and_check, stage_models, target_of
from components.serving.checks import ServingChecksError
from components.serving.config import PromoteConfig
from components.serving.load import LoadTestRecord
from components.serving.stages import StageEntry, StageExamples, StageRegistry
from components.serving.targets import ServingTarget
from trainer.tasks import get_task

log = logging.getLogger(__name__)


def failed_promotion(
    config: PromoteConfig,
    target: ServingTarget,
    model_uri: str,
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
        f"promotion of {model_uri} to {config.stage} as version {version} failed: {reason}. Rolled back: "
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
        others = stage_models(stages, config, None)
        note_forms(target, stage, others)
        target.restore(stage, others, name, config.rollout_timeout_s)
        return stages.record(stage, entry)
    try:
        report = serve_and_check(config, target, remaining[-1], examples, rollback=True)
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
        serving_format=earlier.serving_format if earlier else None,  # its folder keeps the form it served in
    )


def rollback(config: PromoteConfig, run_id: str, target: Optional[ServingTarget] = None) -> PromotionResult:
    """Return a stage's model to the version it served before its current one, verified by the serving checks.

    The stage's other models keep the versions they are served at.

    Args:
        config: the stage, target, stages_root and model_name (the model rolled back).
        run_id: the run that rolls back (recorded in the history).
        target: where the stage serves, built for the registry of ``config.stages_root``; None: the
            target ``config.target`` names, built from ``config`` (:func:`target_of`).

    Returns:
        What was done: ``version`` is the version served now, ``previous_version`` the one left.

    Raises:
        ValueError: the stage has fewer than two versions in service (nothing to return to).
        PromotionError: the earlier version fails its checks.
    """
    stage, name = config.stage, config.model_name
    target = target_of(config, target)
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
    return result_of(back, stage, no_op=False)
