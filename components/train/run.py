"""The train step's logic: the config from component parameters, the training run, model metadata."""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

import yaml

from trainer import model_folder, storage
from trainer.config import ConfigError, TrainConfig

if TYPE_CHECKING:
    from trainer.train import TrainingSummary


def train_config(config_yaml: str = "", model_options: Mapping[str, Any] | None = None, **fields: Any) -> TrainConfig:
    """Builds the TrainConfig from optional YAML plus the component's explicit parameters.

    Args:
        config_yaml: YAML mapping of TrainConfig fields, or empty.
        model_options: the model builder's options; None or empty leaves the YAML's (or none).
        **fields: fields set by the component's parameters; they override the YAML.

    Returns:
        The validated config.

    Raises:
        ConfigError: the YAML is not a mapping, names an unknown field, or a value is invalid.
    """
    data = yaml.safe_load(config_yaml) if config_yaml.strip() else {}
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"train config_yaml: expected a YAML mapping of TrainConfig fields, got {data!r}")
    if model_options:
        fields["model_options"] = dict(model_options)
    return TrainConfig.from_dict({**data, **fields})


log = logging.getLogger(__name__)

WORKER_JOB = "worker-job.yaml"  # the job file every worker reads, beside the checkpoints they share


def run_training(
    dataset_dir: str,
    model_dir: str,
    config: TrainConfig,
    checkpoint_dir: Optional[str] = None,
    worker_command: Optional[Sequence[str]] = None,
) -> TrainingSummary:
    """Trains in this process (``workers`` 1) or with ``workers`` workers through the config's launcher.

    With several workers, the job file goes beside the checkpoints (which every worker reaches:
    on a cluster, the model's gs:// URI), the launcher runs the set, and the chief's
    ``training.json`` in ``model_dir`` is the summary.

    Args:
        dataset_dir: the dataset folder.
        model_dir: the model folder (the chief's, with several workers).
        config: the training settings (``workers``, ``launcher``).
        checkpoint_dir: where checkpoints go; ``None`` for ``<model_dir>/checkpoints``.
        worker_command: what starts one worker, before its ``--config JOB``; ``None`` for this
            Python's ``python -m trainer.worker``.

    Raises:
        ConfigError: an unknown launcher.
        components.train.launchers.LaunchError: the workers failed (the message names the cause).
        TrainingError (and the trainer's other errors): a one-process training failed.
    """
    from trainer.train import TrainingSummary, train

    if config.workers == 1:
        return train(dataset_dir, model_dir, config, checkpoint_dir=checkpoint_dir)
    from components.train.launchers import LaunchError, WorkerSet, choose_launcher, get_launcher
    from trainer.worker import WorkerJob, write_worker_job

    name = choose_launcher(config.launcher)
    try:
        launcher = get_launcher(name)
    except LaunchError as err:
        raise ConfigError(f"train.launcher: {err}") from None
    ckpt_dir = checkpoint_dir or model_folder.checkpoints_dir(model_dir)
    job_path = write_worker_job(
        storage.join(ckpt_dir, WORKER_JOB), WorkerJob(dataset_dir, model_dir, config, checkpoint_dir)
    )
    argv = (*(worker_command or (sys.executable, "-m", "trainer.worker")), "--config", job_path)
    log.info("training with %d workers (launcher %s)", config.workers, name)
    launcher.run(WorkerSet(workers=config.workers, config_path=job_path, model_dir=model_dir, argv=argv))
    storage.delete(job_path)  # kept after a failure: the same step, run again, rewrites it and resumes
    summary = storage.read_json(model_folder.summary_path(model_dir))
    if summary is None:
        raise LaunchError(f"the {config.workers} workers finished but {model_dir} holds no training summary")
    return TrainingSummary.from_dict(summary)


def describe_model(summary: TrainingSummary, config: TrainConfig) -> dict[str, Any]:
    """The Model artifact's metadata: what it was trained on and how to call it."""
    from trainer.tasks import get_task

    task = get_task(summary.task)
    height, width, channels = summary.image_shape
    return {
        "framework": "tensorflow",
        "task": summary.task,
        "model": summary.model,
        "accelerator": summary.accelerator,
        "strategy": summary.strategy,
        "replicas": summary.replicas,
        "workers": summary.workers,
        "precision": summary.precision,
        "config_hash": config.fingerprint(),
        "dataset_fingerprint": summary.dataset_fingerprint,
        "class_names": list(summary.class_names),
        "image_shape": [height, width, channels],
        "input_signature": {
            "serving_default": {task.serving.input_name: "tf.string [None] (encoded PNG/JPEG/GIF/BMP)"},
            task.serving.tensor_signature: {"images": f"float32 [None, {height}, {width}, {channels}] in [0, 1]"},
        },
        "output_signature": task.output_signature(len(summary.class_names)),
        "steps": summary.steps,
        "images_per_sec": summary.images_per_sec,
    }


# The training figures the step logs as Metrics, when the task reports them.
METRIC_FIELDS = ("train_loss", "train_accuracy", "val_loss", "val_accuracy", "images_per_sec", "steps")


def scalar_metrics(summary: TrainingSummary) -> dict[str, float]:
    """The training figures for the step's ``Metrics`` artifact (those that are not None)."""
    values = summary.to_dict()
    return {name: float(values[name]) for name in METRIC_FIELDS if values.get(name) is not None}
