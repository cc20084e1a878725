"""Promotion of a model to a serving stage, and rollback (DESIGN.md section 5, issue 6).

``promote``: publish the SavedModel to the stage as a new version -> serve it (a loopback model
server for target ``local``; the stage's Kubernetes rollout for ``kubernetes``) -> smoke tests ->
on any failure retire the new version, verify the previous one serves, record the rollback and
raise -> else record the promotion. Re-running for the model the stage already serves is a no-op.

``rollback``: take the stage's newest version out of service and verify the one before it.

The Kubernetes side (``components.serving.deploy``) is imported only for that target.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import tempfile
from collections.abc import Callable, Iterator
from typing import Any, Optional

from components.serving import stages
from components.serving.checks import run_smoke_tests
from trainer import storage
from trainer.config import PromoteConfig

log = logging.getLogger(__name__)

SMOKE_SPLIT = "test"
SMOKE_FILE = "smoke_examples.json"


class PromotionError(RuntimeError):
    """A promotion failed (and was rolled back); the message says why and what the stage serves."""


def saved_model_dir_of(model_dir: str) -> str:
    """Return the SavedModel folder of a model folder (``<model>/saved_model``), or the folder itself.

    Raises:
        FileNotFoundError: neither holds ``saved_model.pb``.
    """
    for candidate in (storage.join(model_dir, "saved_model"), model_dir):
        if storage.exists(storage.join(candidate, stages.READY_MARKER)):
            return candidate
    raise FileNotFoundError(
        f"{model_dir} is not a model folder: neither {model_dir}/saved_model/saved_model.pb nor "
        f"{model_dir}/saved_model.pb exists; pass the train step's model artifact"
    )


def load_smoke_examples(dataset_dir: str, count: int, split: str = SMOKE_SPLIT) -> list[tuple[bytes, int]]:
    """Return the first ``count`` (encoded image, label) pairs of a dataset split.

    Raises:
        ValueError: the split has no labelled examples.
    """
    from trainer.evaluate import read_encoded_split

    images, labels, _ = read_encoded_split(dataset_dir, split, limit=count)
    examples = [(img, int(lab)) for img, lab in zip(images, labels, strict=False) if int(lab) >= 0]
    if not examples:
        raise ValueError(f"no labelled examples in the {split!r} split of {dataset_dir} for the smoke tests")
    return examples


def _save_smoke_examples(stages_root: str, stage: str, examples: list[tuple[bytes, int]]) -> None:
    # Kept with the stage so that a rollback (which has no dataset) runs the same prediction check.
    data = [{"b64": base64.b64encode(b).decode("ascii"), "label": label} for b, label in examples]
    storage.write_bytes(storage.join(stages.stage_dir(stages_root, stage), SMOKE_FILE), json.dumps(data).encode())


def _stored_smoke_examples(stages_root: str, stage: str) -> list[tuple[bytes, int]]:
    path = storage.join(stages.stage_dir(stages_root, stage), SMOKE_FILE)
    try:
        data = json.loads(storage.read_bytes(path))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path} not found: the stage has never been promoted to, so there is nothing to verify a rollback with"
        ) from None
    return [(base64.b64decode(d["b64"]), int(d["label"])) for d in data]


@contextlib.contextmanager
def _local_server(stages_root: str, stage: str, model_name: str) -> Iterator[Any]:
    """Serve a stage's newest version on loopback (downloading it first if the stage is on GCS)."""
    from components.serving.server import ModelServer

    base = stages.model_base_path(stages_root, stage, model_name)
    with contextlib.ExitStack() as stack:
        if storage.is_gcs(base):
            versions = stages.list_versions(stages_root, stage, model_name)
            if not versions:
                raise FileNotFoundError(f"no version of {model_name} in service under {base}")
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="stage-"))
            storage.copy_tree(storage.join(base, str(versions[-1])), f"{tmp}/{versions[-1]}")
            base = tmp
        yield stack.enter_context(ModelServer(base, model_name))


def _serve_and_check(
    config: PromoteConfig, version: int, examples: list[tuple[bytes, int]], rollback: bool = False
) -> dict[str, Any]:
    """Make the stage serve ``version`` (its newest in service) and run the smoke tests on it."""
    if config.target == "local":
        with _local_server(config.stages_root, config.stage, config.model_name) as server:
            return run_smoke_tests(
                server.url, config.model_name, examples, config.min_smoke_accuracy, expected_version=version
            )
    from components.serving import deploy as kube  # the Kubernetes client, only for this target

    args = (config.stage, config.stages_root, config.model_name, version, config.rollout_timeout_s)
    url = kube.rollback_stage(*args) if rollback else kube.deploy_stage(*args)
    return run_smoke_tests(
        url,
        config.model_name,
        examples,
        config.min_smoke_accuracy,
        expected_version=version,
        timeout_s=config.rollout_timeout_s,
    )


def _check_target(config: PromoteConfig) -> None:
    if config.target == "kubernetes" and not storage.is_gcs(config.stages_root):
        raise ValueError(
            f"target kubernetes needs stages_root on GCS (gs://bucket/prefix) so that TensorFlow Serving "
            f"in the cluster can load the model; got {config.stages_root!r}"
        )


def _float_metrics(metrics: Optional[dict[str, Any]]) -> dict[str, float]:
    return {k: float(v) for k, v in (metrics or {}).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _evaluation_metrics(saved_model_dir: str, dataset_dir: str) -> dict[str, float]:
    # The gate compares a candidate's test-split metrics with prod's recorded ones: record the same.
    from trainer.evaluate import evaluate_saved_model

    return _float_metrics(evaluate_saved_model(saved_model_dir, dataset_dir, split=SMOKE_SPLIT).metrics)


def promote(
    model_dir: str,
    dataset_dir: str,
    config: PromoteConfig,
    run_id: str,
    metrics: Optional[dict] = None,
) -> dict[str, Any]:
    """Promote a model to ``config.stage``; on any failed check roll back and raise.

    Args:
        model_dir: the model folder (with ``saved_model/``) or a SavedModel folder.
        dataset_dir: the dataset whose test split gives the smoke-test images.
        config: stage, target, stages_root, model_name, smoke settings.
        run_id: the run that promotes (recorded in the history).
        metrics: the model's evaluation metrics to record (prod's are the gate's baseline);
            None scores the SavedModel on the dataset's test split.

    Returns:
        ``{"action": "promote", "stage", "version", "previous_version", "no_op", "model_uri",
        "checks", "accuracy", "metrics"}``.

    Raises:
        PromotionError: a smoke check (or the rollout) failed; the stage was rolled back.
        FileNotFoundError: ``model_dir`` holds no SavedModel.
    """
    if not isinstance(config, PromoteConfig):
        raise TypeError(f"config must be a PromoteConfig, got {type(config).__name__}")
    saved_model = saved_model_dir_of(model_dir)
    return _promote(
        saved_model,
        model_dir,
        config,
        run_id,
        examples_fn=lambda: load_smoke_examples(dataset_dir, config.smoke_examples),
        metrics_fn=lambda: (
            _float_metrics(metrics) if metrics is not None else _evaluation_metrics(saved_model, dataset_dir)
        ),
    )


def promote_version(
    config: PromoteConfig, source_stage: str, run_id: str, version: Optional[int] = None
) -> dict[str, Any]:
    """Promote a version that passed one stage to the next stage (demo -> staging -> prod).

    The version's files, its recorded metrics and the source stage's smoke images are reused, so
    the promote pipeline needs neither the model artifact nor the dataset.

    Args:
        config: the target stage (``config.stage``), target, stages_root, model_name.
        source_stage: the stage the version comes from; ``config.stage`` must be the one after it.
        run_id: the run that promotes.
        version: the source stage's version to promote; None takes the one it serves now. Either
            way it must be the version the source stage serves now, having passed its checks.

    Returns:
        As :func:`promote`, plus ``source_stage`` and ``source_version``.

    Raises:
        ValueError: the stages are not consecutive, or the version is not what the source serves.
        PromotionError: a check failed at the target stage; it was rolled back.
    """
    root, name = config.stages_root, config.model_name
    if source_stage not in stages.STAGES or stages.STAGES.index(source_stage) + 1 >= len(stages.STAGES):
        raise ValueError(f"source_stage must be demo or staging (a stage with a next one), got {source_stage!r}")
    expected = stages.STAGES[stages.STAGES.index(source_stage) + 1]
    if config.stage != expected:
        raise ValueError(
            f"a version moves one stage at a time: from {source_stage} only to {expected}, not to {config.stage}"
        )
    current = stages.read_current(root, source_stage)
    if current is None or current.get("version") is None:
        raise ValueError(f"{source_stage} serves no model yet: promote one there first")
    version = current["version"] if version is None else version
    passed = current.get("checks") and all(c.get("passed") for c in current["checks"].values())
    if current["version"] != version or not passed:
        raise ValueError(
            f"{source_stage} serves version {current['version']} (checks passed: {bool(passed)}), not a passing "
            f"version {version}: only the version a stage serves, having passed its checks, moves on to {expected}"
        )
    saved_model = stages.version_path(root, source_stage, name, version)
    result = _promote(
        saved_model,
        current.get("model_uri") or saved_model,
        config,
        run_id,
        examples_fn=lambda: _stored_smoke_examples(root, source_stage),
        metrics_fn=lambda: _float_metrics(current.get("metrics")),
        source={"source_stage": source_stage, "source_version": version},
    )
    return {**result, "source_stage": source_stage, "source_version": version}


def _promote(
    saved_model: str,
    model_uri: str,
    config: PromoteConfig,
    run_id: str,
    examples_fn: Callable[[], list[tuple[bytes, int]]],
    metrics_fn: Callable[[], dict[str, float]],
    source: Optional[dict[str, Any]] = None,
) -> dict[str, Any]:
    root, stage, name = config.stages_root, config.stage, config.model_name
    _check_target(config)
    sha = storage.tree_sha256(saved_model)
    current = stages.read_current(root, stage)
    in_service = stages.list_versions(root, stage, name)
    base = {"action": "promote", "stage": stage, "model_uri": model_uri, "target": config.target}
    if current and current.get("sha256") == sha and current.get("version") in in_service[-1:]:
        log.info("%s already serves this model as version %s: nothing to do", stage, current["version"])
        return {
            **base,
            "version": current["version"],
            "previous_version": current.get("previous_version"),
            "no_op": True,
            "checks": current.get("checks", {}),
            "accuracy": current.get("accuracy"),
            "metrics": current.get("metrics", {}),
        }

    examples = examples_fn()
    recorded_metrics = metrics_fn()
    previous = in_service[-1] if in_service else None
    version = stages.publish(saved_model, root, stage, name)
    _save_smoke_examples(root, stage, examples)
    try:
        result = _serve_and_check(config, version, examples)
    except Exception as err:
        # Any failure (a check, the rollout, the server not starting) takes the version out of service.
        reason = f"{type(err).__name__}: {err}"
        log.error("promotion of version %d to %s failed: %s; rolling back", version, stage, reason)
        back = _roll_back(config, version, run_id, reason, examples)
        served = f"version {back['version']} (verified)" if back["version"] is not None else "nothing"
        raise PromotionError(
            f"promotion of {model_uri} to {stage} as version {version} failed: {reason}. Rolled back: {stage} "
            f"serves {served}. Fix the model (or the check settings in PromoteConfig) and promote again."
        ) from err
    entry = stages.record(
        root,
        stage,
        "promote",
        version,
        model_uri,
        run_id,
        checks=result["checks"],
        metrics=recorded_metrics,
        model_name=name,
        sha256=sha,
        previous_version=previous,
        accuracy=result["accuracy"],
        target=config.target,
        **(source or {}),
    )
    return {
        **base,
        "version": version,
        "previous_version": previous,
        "no_op": False,
        "checks": entry["checks"],
        "accuracy": result["accuracy"],
        "metrics": recorded_metrics,
    }


def _roll_back(
    config: PromoteConfig, version: int, run_id: str, reason: str, examples: list[tuple[bytes, int]]
) -> dict[str, Any]:
    """Retire ``version``, make the stage serve the one before it, verify and record that."""
    root, stage, name = config.stages_root, config.stage, config.model_name
    stages.retire(root, stage, name, version)
    remaining = stages.list_versions(root, stage, name)
    if not remaining:
        # Nothing was served before: the stage serves nothing, and says so in its history.
        if config.target == "kubernetes":
            log.warning("%s had no earlier version; the failed version was retired from the model path", stage)
        stages.record(root, stage, "rollback", None, "", run_id, model_name=name, reason=reason, failed_version=version)
        return {"version": None, "checks": {}}
    target_version = remaining[-1]
    earlier = stages.last_entry_for_version(root, stage, target_version) or {}
    try:
        checks = _serve_and_check(config, target_version, examples, rollback=True)
    except Exception as err:
        stages.record(
            root,
            stage,
            "rollback",
            target_version,
            earlier.get("model_uri", ""),
            run_id,
            checks=getattr(err, "result", {}).get("checks", {}),
            metrics=earlier.get("metrics"),
            model_name=name,
            sha256=earlier.get("sha256"),
            reason=reason,
            failed_version=version,
            verified=False,
        )
        raise PromotionError(
            f"{stage}: rolled back from version {version} to {target_version}, but version {target_version} "
            f"fails its checks too: {err}. The stage needs attention."
        ) from err
    stages.record(
        root,
        stage,
        "rollback",
        target_version,
        earlier.get("model_uri", ""),
        run_id,
        checks=checks["checks"],
        metrics=earlier.get("metrics"),
        model_name=name,
        sha256=earlier.get("sha256"),
        reason=reason,
        failed_version=version,
        verified=True,
    )
    return {"version": target_version, "checks": checks["checks"], "accuracy": checks["accuracy"]}


def rollback(config: PromoteConfig, run_id: str) -> dict[str, Any]:
    """Return a stage to the version it served before its current one, verified by smoke tests.

    Args:
        config: the stage, target, stages_root and model_name.
        run_id: the run that rolls back (recorded in the history).

    Returns:
        ``{"action": "rollback", "stage", "version", "previous_version", "checks", "accuracy"}``.

    Raises:
        ValueError: the stage has fewer than two versions in service (nothing to return to).
        PromotionError: the earlier version fails its checks.
    """
    root, stage, name = config.stages_root, config.stage, config.model_name
    _check_target(config)
    in_service = stages.list_versions(root, stage, name)
    if len(in_service) < 2:
        raise ValueError(
            f"cannot roll back {stage}: versions in service are {in_service} under "
            f"{stages.model_base_path(root, stage, name)}; a rollback needs an earlier version to return to"
        )
    examples = _stored_smoke_examples(root, stage)
    back = _roll_back(config, in_service[-1], run_id, "rollback requested", examples)
    return {
        "action": "rollback",
        "stage": stage,
        "version": back["version"],
        "previous_version": in_service[-1],
        "no_op": False,
        "model_uri": (stages.read_current(root, stage) or {}).get("model_uri", ""),
        "checks": back["checks"],
        "accuracy": back.get("accuracy"),
        "metrics": {},
        "target": config.target,
    }


def render_report(result: dict[str, Any]) -> str:
    """Render a promotion or rollback result as Markdown for the Kubeflow UI."""
    action = result["action"]
    lines = [f"# {action.capitalize()}: {result['stage']} serves version {result['version']}", ""]
    if result.get("no_op"):
        lines += ["The stage already served this model: nothing was changed.", ""]
    lines += [
        f"- model: `{result.get('model_uri', '')}`",
        f"- target: {result.get('target', '')}",
        f"- previous version: {result.get('previous_version')}",
    ]
    if result.get("accuracy") is not None:
        lines.append(f"- smoke accuracy on known test images: {result['accuracy']:.3f}")
    if result.get("metrics"):
        lines.append("- recorded metrics: " + ", ".join(f"{k}={v:.4g}" for k, v in sorted(result["metrics"].items())))
    lines += ["", "| check | passed | detail |", "|---|---|---|"]
    for name, check in result.get("checks", {}).items():
        detail = str(check.get("detail", "")).replace("|", "\\|")
        lines.append(f"| {name} | {'yes' if check.get('passed') else 'NO'} | {detail} |")
    return "\n".join(lines) + "\n"
