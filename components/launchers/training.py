"""A training in this process or across workers: the one entry point the training steps share.

``python -m components.train``, the train step and the sweep's grid cells all call
:func:`run_training`; with ``workers`` 1 it is the trainer's ``train()``, with more it writes the
job file every worker reads and runs the config's launcher (:mod:`components.launchers`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Optional

from trainer import model_folder, storage
from trainer.budget.layout import process_started_at
from trainer.config import ConfigError, TrainConfig

if TYPE_CHECKING:
    from trainer.train import TrainingSummary

log = logging.getLogger(__name__)

WORKER_JOB = "worker-job.yaml"  # the job file every worker reads, beside the checkpoints they share


def run_training(
    dataset_dir: str,
    model_dir: str,
    config: TrainConfig,
    checkpoint_dir: Optional[str] = None,
    worker_command: Optional[Sequence[str]] = None,
    on_progress: Optional[Callable[..., None]] = None,
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
            Python's ``python -m components.train.worker`` (the chief prints progress lines).
        on_progress: the training's progress (``trainer.train.train``'s) in this process; the
            workers' chief prints its own.

    Raises:
        ConfigError: an unknown launcher.
        components.launchers.LaunchError: the workers failed (the message names the cause).
        TrainingError (and the trainer's other errors): a one-process training failed.
    """
    from trainer.train import TrainingSummary, train

    if config.workers == 1:
        return train(
            dataset_dir,
            model_dir,
            config,
            checkpoint_dir=checkpoint_dir,
            on_progress=on_progress,
            started_at=process_started_at(),  # the step's process: its imports count against a budget
        )
    from components.launchers import LaunchError, WorkerSet, choose_launcher, get_launcher
    from trainer.worker import WorkerJob, write_worker_job

    name = choose_launcher(config.launcher)
    try:
        launcher = get_launcher(name)
    except LaunchError as err:
        raise ConfigError(f"train.launcher: {err}") from None
    ckpt_dir = checkpoint_dir or model_folder.checkpoints_dir(model_dir)
    # Every worker's budget counts from this step's start, not from its own process's.
    job = WorkerJob(dataset_dir, model_dir, config, checkpoint_dir, started_at=process_started_at())
    job_path = write_worker_job(storage.join(ckpt_dir, WORKER_JOB), job)
    argv = (*(worker_command or (sys.executable, "-m", "components.train.worker")), "--config", job_path)
    log.info("training with %d workers (launcher %s)", config.workers, name)
    launcher.run(WorkerSet(workers=config.workers, config_path=job_path, model_dir=model_dir, argv=argv))
    storage.delete(job_path)  # kept after a failure: the same step, run again, rewrites it and resumes
    summary = storage.read_json(model_folder.summary_path(model_dir))
    if summary is None:
        raise LaunchError(f"the {config.workers} workers finished but {model_dir} holds no training summary")
    return TrainingSummary.from_dict(summary)
