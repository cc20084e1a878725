"""The training errors, apart from ``train.py`` so that its callbacks raise them without importing it."""

from __future__ import annotations


class TrainingError(RuntimeError):
    """Training cannot start or went wrong; the message says what and how to fix it."""


class TrainingDivergedError(TrainingError):
    """The loss became NaN/inf or exploded; nothing is exported."""
