"""The launcher interface: what starts, watches and tears down a set of training workers.

A launcher gets a :class:`WorkerSet` (how many workers, the config file every worker reads, the
command that starts one) and runs it to the end: the workers train under
``MultiWorkerMirroredStrategy`` (``python -m components.train.worker``: ``trainer.worker`` with the
step's progress lines), the chief (worker 0) writes the
model folder, and nothing the launcher started outlives :meth:`Launcher.run`, whether the training
succeeded, failed or the step was told to stop (SIGTERM). No TensorFlow, no kfp.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import ClassVar

# How many times a failed set is started again (all workers together), as a JobSet's
# failurePolicy.maxRestarts: preemptible nodes lose workers now and then; each restart resumes
# from the last checkpoint.
DEFAULT_MAX_RESTARTS = 3


@dataclasses.dataclass(frozen=True)
class WorkerSet:
    """A set of training workers to run.

    Attributes:
        workers: how many (2 or more; one worker trains in the step's own process).
        config_path: the worker job file every worker reads (``trainer.worker.write_worker_job``:
            the dataset, the chief's model folder, the checkpoint folder and the TrainConfig).
        model_dir: the chief's model folder, the step's output.
        argv: the command that starts one worker, e.g.
            ``(sys.executable, "-m", "components.train.worker", "--config", config_path)``; its index and
            peers come from the environment (``trainer.worker``).
    """

    workers: int
    config_path: str
    model_dir: str
    argv: tuple[str, ...]

    def __post_init__(self) -> None:
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) or self.workers < 2:
            raise ValueError(f"WorkerSet.workers: expected a whole number >= 2, got {self.workers!r}")
        if not self.argv:
            raise ValueError("WorkerSet.argv: expected the worker's command, got an empty one")


class LaunchError(RuntimeError):
    """The workers could not be started, or failed; the message names the cause."""


class Launcher(abc.ABC):
    """Starts a :class:`WorkerSet`, waits for it and removes everything it started."""

    name: ClassVar[str] = ""

    @abc.abstractmethod
    def run(self, workers: WorkerSet) -> None:
        """Starts the workers, waits while reporting progress, tears everything down at the end.

        Everything started is removed on success, on failure and on SIGTERM.

        Raises:
            LaunchError: the workers could not start or failed (after the restarts the launcher
                allows); the message names the cause.
        """
