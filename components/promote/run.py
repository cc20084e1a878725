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

Each public function builds the serving target once (:func:`target_of`: the registry of
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
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any, Optional

from components.promote.result import PromotionResult, result_of
from components.promote.rollback import failed_promotion
from components.promote.verify import serve_and_check, target_of
from components.serving.checks import (
    KnownExample,
)
from components.serving.config import STAGES, PromoteConfig
from components.serving.contract import ContractChangeError, ServingContract, contract_change, read_contract
from components.serving.portable import format_sources, publish_format, trained_options
from components.serving.stages import READY_MARKER, StageEntry, StageExamples, StageRegistry
from components.serving.targets import ServingTarget
from trainer import model_folder, storage
from trainer.export import serving
from trainer.export.formats import EXPORT_DIR, RECORD, SERVED
from trainer.tasks import Task, get_task, task_of_model

log = logging.getLogger(__name__)

CHECKS_SPLIT = "test"


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
    recorded_formats: tuple[str, ...] = ()

    def export_record(self) -> Optional[dict[str, Any]]:
        """The model's ``export.json``; else (the run's outputs gone) what its source stage recorded,
        the passed formats without their figures; None for a model without an export.
        """
        path = storage.join(self.model_uri, EXPORT_DIR, RECORD) if self.model_uri else ""
        fallback = {"passed": list(self.recorded_formats), "rows": []} if self.recorded_formats else None
        if not path or not storage.exists(path):
            return fallback
        try:
            record = json.loads(storage.read_text(path))
            return record if isinstance(record, dict) else fallback
        except ValueError:
            log.warning("%s is not an export record: no formats recorded for this version", path)
            return fallback

    def passed_formats(self) -> tuple[str, ...]:
        """The portable formats the model's export passed, best images per dollar first; () without an export."""
        return tuple(str(f) for f in (self.export_record() or {}).get("passed") or ())


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
            target ``config.target`` names, built from ``config`` (:func:`target_of`).

    Returns:
        What was done (``no_op`` when the stage already served this model).

    Raises:
        PromotionError: a check (or the rollout) failed; the stage was rolled back.
        FileNotFoundError: ``model_dir`` holds no SavedModel.
    """
    if not isinstance(config, PromoteConfig):
        raise TypeError(f"config must be a PromoteConfig, got {type(config).__name__}")
    target = target_of(config, target)
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
            target ``config.target`` names, built from ``config`` (:func:`target_of`).

    Returns:
        What was done, with ``source_stage`` and ``source_version``.

    Raises:
        ValueError: the stages are not consecutive, or the version is not what the source serves.
        PromotionError: a check failed at the target stage; it was rolled back.
    """
    target = target_of(config, target)
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
        recorded_formats=tuple(current.formats),
    )
    return _promote(candidate, config, run_id, target)


def _promote(candidate: _Candidate, config: PromoteConfig, run_id: str, target: ServingTarget) -> PromotionResult:
    stages, stage, name = target.stages, config.stage, config.model_name
    record = candidate.export_record()
    choice = serving.choose(config.serving_format, record, target.name, target.serving_formats)
    sha = storage.tree_sha256(candidate.saved_model)
    in_service = stages.list_versions(stage, name)
    already = _already_served(stages, config, candidate, sha, in_service, choice.format)
    if already is not None:
        return already
    log.info("%s serves %s as %s", stage, name, choice.reason)

    contract, change = _kept_contract(stages, config, candidate)
    examples = candidate.examples()
    recorded_metrics = candidate.metrics()
    previous = in_service[-1] if in_service else None
    version = stages.publish(candidate.saved_model, stage, name, choice.format)
    stages.save_examples(stage, name, examples)
    try:
        _publish_form(stages.version_path(stage, name, version), choice.format, candidate, examples.task, contract)
        report = serve_and_check(config, target, version, examples, canary=previous is not None)
    except Exception as err:
        # Any failure (a check, the rollout, the server not starting) takes the version out of service.
        raise failed_promotion(config, target, candidate.model_uri, version, run_id, examples, err) from err
    stages.publish_warm_start(_warm_sources(stages, candidate, name), stage, name, version)
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
            formats=candidate.passed_formats(),
            serving_format=choice.format,
        ),
    )
    return result_of(entry, stage, no_op=False)


def _publish_form(
    version_dir: str, fmt: str, candidate: _Candidate, task: str, contract: Optional[ServingContract]
) -> None:
    """Makes the published version serve in ``fmt``: the format's file and what serves it, in its folder."""
    sources = format_sources(candidate.model_uri, candidate.saved_model)
    options = trained_options(candidate.model_uri, candidate.saved_model)
    publish_format(version_dir, fmt, sources, task, options, contract.class_names if contract is not None else None)


def _warm_sources(stages: StageRegistry, candidate: _Candidate, name: str) -> list[str]:
    """Where the version's warm-start files are: its model folder, else (its run's outputs gone) the
    source stage's copy.
    """
    sources = [candidate.model_uri]
    if candidate.source_stage is not None and candidate.source_version is not None:
        sources.append(stages.warm_start_dir(candidate.source_stage, name, candidate.source_version))
    return sources


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


def _already_served(
    stages: StageRegistry, config: PromoteConfig, candidate: _Candidate, sha: str, in_service: list[int], fmt: str
) -> Optional[PromotionResult]:
    """The no-op result when the stage's newest version in service is this very model in this form, else None."""
    current = stages.read_current(config.stage, config.model_name)
    if current is None or current.sha256 != sha or current.version not in in_service[-1:]:
        return None
    if (current.serving_format or SERVED) != fmt:
        return None
    log.info("%s already serves this model as version %s: nothing to do", config.stage, current.version)
    result = result_of(current, config.stage, no_op=True)
    return dataclasses.replace(
        result,
        action="promote",
        model_uri=candidate.model_uri,
        target=config.target,
        source_stage=candidate.source_stage,
        source_version=candidate.source_version,
        contract_change=None,
    )
