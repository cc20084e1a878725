"""The library's errors, apart from the modules that raise them: a callback raises a training
error without importing the training, and the presets and the tasks share the task's error
without importing each other.
"""

from __future__ import annotations


class TrainingError(RuntimeError):
    """Training cannot start or went wrong; the message says what and how to fix it."""


class TrainingDivergedError(TrainingError):
    """The loss became NaN/inf or exploded; nothing is exported."""


class TaskError(ValueError):
    """A task cannot do what was asked (unknown task, a prediction of the wrong shape, ...)."""
