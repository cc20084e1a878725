"""What ``train()`` checks before TensorFlow builds anything: the dataset, the task, the folders.

A finished training in the model folder is returned as it is; a folder or checkpoints of another
training are refused, so nothing mixes two trainings.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

from trainer import model_folder, storage, tfrecords
from trainer.budget import limits
from trainer.config import TrainConfig
from trainer.errors import TrainingError
from trainer.tasks import Task, TaskError, task_of_manifest
from trainer.tfrecords import DatasetInfo
from trainer.training.run import STATE_NAME, Prepared, gfile
from trainer.training.summary import TrainingSummary

if TYPE_CHECKING:
    from trainer.multiworker import WorkerRole

log = logging.getLogger(__name__)


def check_writable(model_dir: str) -> None:
    """Creates ``model_dir`` and writes a probe file, so a bad URI fails before training, not after.

    Raises:
        TrainingError: the folder cannot be created or written.
    """
    fs = gfile()
    probe = storage.join(model_dir, f".write-probe-{uuid.uuid4().hex[:8]}")
    try:
        fs.makedirs(model_dir)
        with fs.GFile(probe, "w") as f:
            f.write("ok")
        fs.remove(probe)
    except Exception as err:  # noqa: BLE001 - every filesystem failure means the same thing here
        raise TrainingError(
            f"model_dir: cannot write to {model_dir!r} ({type(err).__name__}: {err}); give a folder or gs:// "
            "URI this process can write (on GKE: the pod's service account needs storage.objectAdmin)"
        ) from err


def dataset_fingerprint(info: DatasetInfo) -> str:
    """The source's fingerprint, or (a source without one) a hash of the shards' checksums."""
    if info.source.fingerprint:
        return str(info.source.fingerprint)
    shards = {s: [sh.crc32c or sh.sha256 or sh.file for sh in v.shards] for s, v in info.splits.items()}
    return hashlib.sha256(json.dumps(shards, sort_keys=True).encode()).hexdigest()[:16]


def check_role(config: TrainConfig, role: Optional[WorkerRole]) -> None:
    """Refuses a worker set that is not the config's, and several workers without a set."""
    if role is None and config.workers > 1:
        raise TrainingError(
            f"train.workers: {config.workers} workers are started by the train step's launcher "
            "(python -m components.train, the pipeline's train step); trainer.train alone trains in one "
            "process: set workers: 1, or run the set"
        )
    if role is not None and role.workers != config.workers:
        raise TrainingError(f"train.workers: the config says {config.workers}, the worker set has {role.workers}")
    if role is not None and not role.chief and role.scratch_dir is None:
        raise TrainingError(f"worker {role.index}: a worker other than the chief needs a scratch folder")


def prepare(
    dataset_dir: str, model_dir: str, config: TrainConfig, checkpoint_dir: str | None
) -> Prepared | TrainingSummary:
    """Checks everything that can be checked before TensorFlow builds anything.

    Returns the finished training's summary when ``model_dir`` already holds this very training.
    """
    info = tfrecords.load_dataset_info(dataset_dir)
    try:
        task_type = type(task_of_manifest(info))
    except TaskError as err:
        raise TrainingError(f"{dataset_dir}: {err}") from err
    task = task_type(config.model_options)  # a bad option is the task's error, naming the option
    task.check_dataset(info)
    if config.epochs is None and not config.limits.budgeted and type(task).fit_to_data is Task.fit_to_data:
        raise TrainingError(
            f"train.epochs: null (fitted to the data) but the {task.name} task fits no schedule; set epochs"
        )
    info.split_count(config.train_split)
    val_split = _validation_split(info, config.validation_split)
    check_writable(model_dir)
    model, model_reason = task.resolve_model(config.model, info)
    if model_reason is not None:
        log.info("model %s: %s", model, model_reason)

    fingerprint = config.fingerprint()
    dataset_fp = dataset_fingerprint(info)
    finished = storage.read_json(model_folder.summary_path(model_dir))
    if finished is not None:
        if finished.get("config_fingerprint") == fingerprint and finished.get("dataset_fingerprint") == dataset_fp:
            _check_same_stop(model_dir, finished, config, checkpoint_dir or model_folder.checkpoints_dir(model_dir))
            log.info(
                "%s already holds a finished training (step %s); not training again", model_dir, finished.get("steps")
            )
            return TrainingSummary.from_dict(finished)
        raise TrainingError(
            f"model_dir: {model_dir} already holds a model trained with another config or dataset "
            f"(config {finished.get('config_fingerprint')} vs {fingerprint}, dataset "
            f"{finished.get('dataset_fingerprint')} vs {dataset_fp}); train into a new folder"
        )
    ckpt_dir = checkpoint_dir or model_folder.checkpoints_dir(model_dir)
    if checkpoint_dir is not None:
        check_writable(checkpoint_dir)
    state = storage.read_json(storage.join(ckpt_dir, STATE_NAME))
    if state is not None and (state.get("config_fingerprint"), state.get("dataset_fingerprint")) != (
        fingerprint,
        dataset_fp,
    ):
        raise TrainingError(
            f"model_dir: {ckpt_dir} holds checkpoints of another config or dataset; resuming from them "
            "would mix two trainings. Train into a new folder (or delete the checkpoints)"
        )
    return Prepared(
        info=info,
        task=task,
        model=model,
        model_reason=model_reason,
        val_split=val_split,
        ckpt_dir=ckpt_dir,
        fingerprint=fingerprint,
        dataset_fp=dataset_fp,
        history=list((state or {}).get("history", [])),
        state=dict(state or {}),
    )


def _check_same_stop(model_dir: str, finished: Mapping[str, Any], config: TrainConfig, ckpt_dir: str) -> None:
    """Refuses a finished folder that a search's rung stopped at another ``stop_at``.

    ``stop_at`` is not in the fingerprint, so the folder would otherwise pass for this training's
    end: a retried rung (the same ``stop_at``) gets its result back, a later rung must go on.

    Raises:
        TrainingError: the folder's training stopped at another ``stop_at``.
    """
    stopping = finished.get("stopping") or {}
    if stopping.get("reason") != limits.RUNG_STOP:
        return
    try:
        same = limits.Stop.parse(stopping.get("stop_at")) == config.limits.stop
    except limits.BudgetError:
        same = False  # unreadable: not this stop
    if not same:
        raise TrainingError(
            f"model_dir: {model_dir} holds this training stopped at stop_at {stopping.get('stop_at')} (step "
            f"{stopping.get('step')}), not at {config.stop_at}; to go on from there, train into a new model folder "
            f"with checkpoint_dir={ckpt_dir}"
        )


def _validation_split(info: tfrecords.DatasetInfo, split: Optional[str]) -> Optional[str]:
    """The validation split to use: ``split`` when the dataset has it (and it is not empty), else None."""
    if split is not None and split not in info.splits:
        log.warning(
            "validation split %r is not in the dataset (%s); training without validation", split, sorted(info.splits)
        )
        return None
    if split is not None:
        info.split_count(split)
    return split
