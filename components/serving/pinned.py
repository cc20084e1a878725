"""A model pinned for offline scoring: the version a stage serves now, or a model folder, with its
content hash and its task. What batch prediction and the select step score with; no TensorFlow
(but for a bare SavedModel, whose task nothing records).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from components.serving.stages import READY_MARKER
from trainer import model_folder, records, storage
from trainer.tasks import get_task, task_types


class PinError(ValueError):
    """The model asked for is not there; the message names what is there and the fix."""


@dataclasses.dataclass(frozen=True)
class ModelRef(records.Record):
    """The model a batch prediction (or a selection) scores with, pinned before anything is scored.

    Attributes:
        saved_model: the SavedModel folder (a stage's version folder, or a model folder's export).
        sha256: its content hash (paths and bytes): what "the same model" means.
        task: the model's task.
        version: a stage's version number, else None.
        stage: the stage it was resolved at, else None.
        model_name: the served model name at that stage, else None.
        model_uri: the model folder it came from, where known.
        serving_format: the form it is scored in (a portable format, ``components.serving.portable``);
            None: the SavedModel.
    """

    _what = "batch prediction model"
    _omit_empty = ("version", "stage", "model_name", "model_uri", "serving_format")

    saved_model: str
    sha256: str
    task: str
    version: Optional[int] = None
    stage: Optional[str] = None
    model_name: Optional[str] = None
    model_uri: str = ""
    serving_format: Optional[str] = None

    @property
    def label(self) -> str:
        """``staging/detector v3`` or ``sha256:1a2b3c4d5e6f``: the version each prediction names."""
        if self.stage:
            return f"{self.stage}/{self.model_name} v{self.version}"
        return f"sha256:{self.sha256[:12]}"


def _task_of_saved_model(saved_model: str) -> str:
    """The task whose serving outputs a bare SavedModel's ``serving_default`` has (no training.json)."""
    import tensorflow as tf  # only for a bare export, whose task nothing records

    outputs = set(tf.saved_model.load(saved_model).signatures["serving_default"].structured_outputs)
    for name, kind in task_types().items():
        if kind.serving.outputs and set(kind.serving.outputs) <= outputs:
            return name
    return get_task(None).name


def model_from_folder(model_dir: str) -> ModelRef:
    """A model folder (``saved_model/`` inside) or a SavedModel folder, identified by its sha256.

    Raises:
        PinError: the folder holds no SavedModel.
    """
    inner = model_folder.saved_model_dir(model_dir)
    if storage.exists(storage.join(inner, READY_MARKER)):
        saved_model = inner
    elif storage.exists(storage.join(model_dir, READY_MARKER)):
        saved_model = model_dir
    else:
        raise PinError(
            f"{model_dir} is not an exported model: no saved_model/{READY_MARKER} (a model folder the train step "
            f"wrote) and no {READY_MARKER} (a SavedModel folder) inside"
        )
    summary = storage.read_json(model_folder.summary_path(model_dir)) if saved_model == inner else None
    task = (summary or {}).get("task") or _task_of_saved_model(saved_model)
    model_uri = model_dir if saved_model == inner else ""
    return ModelRef(saved_model, storage.tree_sha256(saved_model), task, model_uri=model_uri)


def model_from_stage(stages_root: str, stage: str, model_name: Optional[str]) -> ModelRef:
    """The version ``stage`` serves of ``model_name`` now, pinned by number and content hash.

    Raises:
        PinError: the stage serves no such model (the message lists what it serves).
    """
    from components.serving.stages import StageRegistry

    registry = StageRegistry(stages_root)
    name = model_name or _default_model_name(registry, stage)
    entry = registry.read_current(stage, name)
    if entry is None or entry.version is None:
        served = sorted(registry.served_models(stage))
        raise PinError(
            f"{stage} serves no model named {name!r} under {stages_root}; it serves {served or 'nothing'}. "
            "Promote one there first, give model_name, or score a model folder (model_dir)"
        )
    saved_model = registry.version_path(stage, name, entry.version)
    if not storage.exists(storage.join(saved_model, READY_MARKER)):
        raise PinError(f"{stage} records version {entry.version} of {name!r}, but {saved_model} holds no model")
    sha = entry.sha256 or storage.tree_sha256(saved_model)
    task = entry.task or get_task(None).name
    served = entry.serving_format if entry.serving_format != "saved_model" else None
    return ModelRef(saved_model, sha, task, entry.version, stage, name, entry.model_uri, served)


def with_format(model: ModelRef, serving_format: Optional[str]) -> ModelRef:
    """``model`` to be scored in ``serving_format`` (None: the form it was pinned in), checked.

    Raises:
        ServingFormatError: no such form, its runtime is not installed, or the model has no such file.
    """
    from components.serving.portable import format_sources
    from trainer.export import serving
    from trainer.export.formats import FORMATS

    if serving_format is None:
        return model
    name = serving.check_name(serving_format)
    if name == serving.SERVED:
        return dataclasses.replace(model, serving_format=None)
    if name == serving.AUTO:
        raise serving.ServingFormatError("serving_format auto chooses at promotion; score saved_model or a format")
    if not serving.installed(name):
        runtime = FORMATS[name].runtime
        raise serving.ServingFormatError(
            f"serving_format {name!r}: its runtime {runtime} is not installed in this image; install it "
            f"(pip install {runtime}) or score saved_model"
        )
    sources = [s for s in format_sources(model.model_uri, model.saved_model) if s]
    if not any(storage.exists(storage.join(s, FORMATS[name].file)) for s in sources):
        raise serving.ServingFormatError(
            f"serving_format {name!r}: {model.label} has no {FORMATS[name].file} (looked in {', '.join(sources)}): "
            "its export refused or did not write it; choose a format its export passed, or saved_model"
        )
    return dataclasses.replace(model, serving_format=name)


def _default_model_name(registry: Any, stage: str) -> str:
    """The one model a stage serves; with several, the error asks which."""
    served = sorted(registry.served_models(stage))
    if len(served) == 1:
        return served[0]
    raise PinError(f"{stage} serves {served or 'nothing'}: name the model to score (model_name)")


def pin_model(
    model_dir: Optional[str],
    stage: Optional[str],
    model_name: Optional[str],
    stages_root: Optional[str],
    pipeline_root: str = "",
) -> ModelRef:
    """The model a step's config names: a model folder, else a stage's current version.

    Args:
        model_dir: a model folder or SavedModel folder; None: the stage's.
        stage: the stage whose model is scored (with ``model_dir`` None).
        model_name: the served model name at the stage; None: the one it serves.
        stages_root: the stage store; None: ``<pipeline_root>/stages``.
        pipeline_root: the pipeline's root.

    Raises:
        PinError: no such model (the message names what is there).
    """
    if model_dir is not None:
        return model_from_folder(model_dir)
    from components.serving.stages import resolve_stages_root

    return model_from_stage(resolve_stages_root(stages_root, pipeline_root), stage or "", model_name)
