"""The stage store: model versions, what each stage serves, and its history (docs/CONTRACTS.md).

Layout under ``stages_root`` (a local folder or gs://)::

    <stage>/models/<model_name>/<version>/   SavedModel in TensorFlow Serving's layout
    <stage>/current.json                     what the stage serves now (a history entry)
    <stage>/history.jsonl                    one JSON line per promotion or rollback
    <stage>/published.json                   content hash and source of each published version
    <stage>/retired/<model_name>/<version>/  versions taken out of service by a rollback

TensorFlow Serving serves the newest version under ``models/<model_name>``, so a rollback moves
the version it leaves to ``retired/``; version numbers only grow (a later promotion never reuses a
retired number).
"""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any, Optional

from components.params import none_if_empty
from trainer import storage

STAGES = ("demo", "staging", "prod")
ACTIONS = ("promote", "rollback")
READY_MARKER = "saved_model.pb"


def resolve_stages_root(stages_root: Optional[str], pipeline_root: str) -> str:
    """Return the stages root: ``stages_root`` if given, else ``<pipeline_root>/stages``.

    Args:
        stages_root: a folder or gs:// URI; None (or a pipeline's "") derives it from the pipeline root.
        pipeline_root: the pipeline's root (``dsl.PIPELINE_ROOT_PLACEHOLDER`` at run time).

    Raises:
        ValueError: both are empty.
    """
    stages_root = none_if_empty(stages_root)
    if stages_root is not None:
        return stages_root
    if not pipeline_root:
        raise ValueError(
            "no stages root: stages_root is empty and so is pipeline_root; pass stages_root "
            "(a folder or gs:// URI) or the pipeline root it defaults under"
        )
    return storage.join(pipeline_root, "stages")


def _check_stage(stage: str) -> None:
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}: expected one of {list(STAGES)}")


def stage_dir(stages_root: str, stage: str) -> str:
    """Return ``<stages_root>/<stage>``."""
    _check_stage(stage)
    return storage.join(stages_root, stage)


def model_base_path(stages_root: str, stage: str, model_name: str) -> str:
    """Return the folder a model server serves for a stage: ``<stage>/models/<model_name>``."""
    return storage.join(stage_dir(stages_root, stage), "models", model_name)


def version_path(stages_root: str, stage: str, model_name: str, version: int) -> str:
    """Return ``<stage>/models/<model_name>/<version>``."""
    return storage.join(model_base_path(stages_root, stage, model_name), str(version))


def _numeric(names: list[str]) -> list[int]:
    return sorted(int(n) for n in names if n.isdigit())


def list_versions(stages_root: str, stage: str, model_name: str) -> list[int]:
    """Return the complete versions (with ``saved_model.pb``) in service at a stage, ascending."""
    base = model_base_path(stages_root, stage, model_name)
    return [v for v in _numeric(storage.list_dirs(base)) if storage.exists(storage.join(base, str(v), READY_MARKER))]


def _published(stages_root: str, stage: str) -> dict[str, Any]:
    path = storage.join(stage_dir(stages_root, stage), "published.json")
    try:
        return json.loads(storage.read_bytes(path))
    except FileNotFoundError:
        return {}


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def published_info(stages_root: str, stage: str, model_name: str, version: int) -> Optional[dict[str, Any]]:
    """Return what was recorded when a version was published (sha256, source, time), or None."""
    return _published(stages_root, stage).get(model_name, {}).get(str(version))


def publish(saved_model_dir: str, stages_root: str, stage: str, model_name: str) -> int:
    """Publish a SavedModel to a stage as a new numbered version; idempotent for the same content.

    The files are copied with ``saved_model.pb`` last, because a model server treats a version
    folder as ready once that file is there. If the newest version in service already has the
    same content (sha256 over paths and bytes), its number is returned and nothing is copied.

    Args:
        saved_model_dir: the SavedModel folder (local or gs://).
        stages_root: the stage store (local or gs://).
        stage: ``demo``, ``staging`` or ``prod``.
        model_name: the served model name.

    Returns:
        The version number now newest at the stage for this content.

    Raises:
        FileNotFoundError: ``saved_model_dir`` holds no ``saved_model.pb``.
    """
    _check_stage(stage)
    if not storage.exists(storage.join(saved_model_dir, READY_MARKER)):
        raise FileNotFoundError(
            f"{saved_model_dir} holds no {READY_MARKER}: pass a SavedModel folder (the model "
            "artifact's saved_model/ written by trainer.export.export_saved_model)"
        )
    sha = storage.tree_sha256(saved_model_dir)
    base = model_base_path(stages_root, stage, model_name)
    published = _published(stages_root, stage)
    known = published.setdefault(model_name, {})
    in_service = list_versions(stages_root, stage, model_name)
    if in_service and known.get(str(in_service[-1]), {}).get("sha256") == sha:
        return in_service[-1]
    # A folder without the ready marker is a copy that was interrupted: nothing serves it.
    for name in _numeric(storage.list_dirs(base)):
        if name not in in_service:
            storage.delete_tree(storage.join(base, str(name)))
    retired = _numeric(storage.list_dirs(storage.join(stage_dir(stages_root, stage), "retired", model_name)))
    version = max([0, *in_service, *retired, *(int(v) for v in known)]) + 1
    storage.copy_tree(saved_model_dir, storage.join(base, str(version)), last=[READY_MARKER])
    known[str(version)] = {"sha256": sha, "source": saved_model_dir, "time": _now()}
    storage.write_bytes(
        storage.join(stage_dir(stages_root, stage), "published.json"),
        json.dumps(published, indent=1, sort_keys=True).encode(),
    )
    return version


def retire(stages_root: str, stage: str, model_name: str, version: int) -> None:
    """Take a version out of service (move it to ``<stage>/retired/``), so the one before is newest.

    Raises:
        FileNotFoundError: the version is not in service at the stage.
    """
    src = version_path(stages_root, stage, model_name, version)
    if version not in list_versions(stages_root, stage, model_name):
        raise FileNotFoundError(
            f"version {version} of {model_name!r} is not in service at {stage} ({src}); in service: "
            f"{list_versions(stages_root, stage, model_name)}"
        )
    dst = storage.join(stage_dir(stages_root, stage), "retired", model_name, str(version))
    storage.delete_tree(dst)
    storage.move_tree(src, dst)


def read_current(stages_root: str, stage: str) -> Optional[dict[str, Any]]:
    """Return what a stage serves now (its latest promote or rollback entry), or None if nothing.

    The evaluation gate reads prod's entry: its ``metrics`` are the baseline.
    """
    try:
        return json.loads(storage.read_bytes(storage.join(stage_dir(stages_root, stage), "current.json")))
    except FileNotFoundError:
        return None


def read_history(stages_root: str, stage: str) -> list[dict[str, Any]]:
    """Return a stage's history entries, oldest first (empty if it has none)."""
    try:
        text = storage.read_bytes(storage.join(stage_dir(stages_root, stage), "history.jsonl")).decode()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def record(
    stages_root: str,
    stage: str,
    action: str,
    version: Optional[int],
    model_uri: str,
    run: str,
    checks: Optional[dict[str, Any]] = None,
    metrics: Optional[dict[str, Any]] = None,
    model_name: Optional[str] = None,
    **extra: Any,
) -> dict[str, Any]:
    """Append an entry to a stage's history and, if the stage now serves a version, make it current.

    Args:
        stages_root: the stage store.
        stage: the stage.
        action: ``promote`` or ``rollback``.
        version: the version the stage serves after this action; None when it serves nothing
            (the first promotion failed and was rolled back).
        model_uri: the model the version came from.
        run: the pipeline run (job name) that acted.
        checks: the smoke checks and their results.
        metrics: the model's evaluation metrics (the gate's baseline when this is prod).
        model_name: the served model name.
        **extra: more JSON-serialisable fields to keep with the entry (e.g. ``reason``).

    Returns:
        The entry written.
    """
    _check_stage(stage)
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}: expected one of {list(ACTIONS)}")
    entry: dict[str, Any] = {
        "version": version,
        "model_uri": model_uri,
        "model_name": model_name,
        "run": run,
        "time": _now(),
        "action": action,
        "checks": dict(checks or {}),
        "metrics": dict(metrics or {}),
        **extra,
    }
    line = json.dumps(entry, sort_keys=True)
    folder = stage_dir(stages_root, stage)
    history_path = storage.join(folder, "history.jsonl")
    try:
        previous = storage.read_bytes(history_path)
    except FileNotFoundError:
        previous = b""
    # GCS objects cannot be appended to: rewrite whole (one writer per stage at a time).
    storage.write_bytes(history_path, previous + line.encode() + b"\n")
    if version is not None:
        storage.write_bytes(storage.join(folder, "current.json"), json.dumps(entry, indent=1, sort_keys=True).encode())
    return entry


def last_entry_for_version(stages_root: str, stage: str, version: int) -> Optional[dict[str, Any]]:
    """Return the latest history entry that put ``version`` in service at a stage, or None."""
    for entry in reversed(read_history(stages_root, stage)):
        if entry.get("version") == version:
            return entry
    return None
