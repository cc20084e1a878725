"""The launcher interface: how a training of several workers is started, watched and torn down."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class WorkerSet:
    """The workers one training step runs.

    Attributes:
        workers: how many worker processes (pods, or local processes), N >= 2.
        config_path: the TrainConfig YAML every worker reads (its model_dir is the chief's folder).
        model_dir: the chief's output folder, the step's output.
        argv: the worker command, e.g. ``("python", "-m", "trainer.worker", "--config", path)``.
    """

    workers: int
    config_path: str
    model_dir: str
    argv: tuple[str, ...]


class LaunchError(RuntimeError):
    """Starting, watching or tearing down the workers failed; the message names the cause."""


class Launcher(ABC):
    """Runs a :class:`WorkerSet` to its end."""

    name: ClassVar[str]

    @abstractmethod
    def run(self, workers: WorkerSet) -> None:
        """Start the workers, wait while reporting progress, tear everything down.

        Everything is torn down on success, failure and SIGTERM; raise LaunchError naming the cause.
        """
