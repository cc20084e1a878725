"""Picking the images worth labelling: what a task says of its scored images (the select step).

A task that batch-predicts may also say how unsure its model is of each image: its
:class:`Selection`, a facet (:meth:`Task.selection`; None for a task without one, which the select
step refuses in one line, :func:`selection_of`). The select step scores a pool of unlabelled
images with the task's batch prediction (``trainer.batch_predict``: one record per image, every
class or box the model returns) and, where a strategy asks for it (:meth:`Selection.flips`), the
same images mirrored left to right; the facet turns the records into one :class:`Uncertainty` per
image (a score, higher is more worth labelling, and the reason in words), and each record into
what a labelling tool shows the reviewer (:class:`Proposal`: boxes, or a class). The ranking,
the diversity step and the files are the step's; ``random``, the baseline, is every task's.

No TensorFlow, nothing but NumPy: the strategies are arithmetic on the records.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from trainer.configbase import ConfigBase
from trainer.errors import TaskError

if TYPE_CHECKING:
    from trainer.tasks.base import Task

# Every task's baseline: a seeded random order, whatever the model says.
RANDOM = "random"
# The task's own first strategy.
AUTO = "auto"


@dataclasses.dataclass(frozen=True)
class Uncertainty:
    """How much one image is worth labelling.

    Attributes:
        score: in [0, 1], higher is more worth labelling (the order of the picks, and the
            per-task ``score`` a reviewer sorts by).
        reason: why, in a few words a reviewer reads (``top class Coat at 0.41, then Shirt at 0.38``).
    """

    score: float
    reason: str


@dataclasses.dataclass(frozen=True)
class ProposedBox:
    """A box a reviewer starts from, in the original image's pixels."""

    xmin: float
    ymin: float
    xmax: float
    ymax: float
    label: str
    score: float


@dataclasses.dataclass(frozen=True)
class Proposal:
    """What the model proposes for one image, as a labelling tool pre-annotates it.

    Attributes:
        boxes: the boxes a reviewer corrects (detection); empty for none.
        label: the class a reviewer confirms or changes (classification); None for none.
        label_score: that class's score.
    """

    boxes: tuple[ProposedBox, ...] = ()
    label: Optional[str] = None
    label_score: Optional[float] = None


class Selection(abc.ABC):
    """A task's uncertainty strategies (what :meth:`Task.selection` returns).

    Args:
        task: the task it belongs to.
        options: the task's typed ``selection_options`` (``Task.step_options``), or None.

    Attributes:
        strategies: the strategies it offers, its default first (``random`` is every task's).
    """

    strategies: ClassVar[tuple[str, ...]] = ()

    def __init__(self, task: Task, options: Optional[ConfigBase] = None) -> None:
        self.task = task
        self.options = options

    def flips(self, strategy: str) -> bool:
        """Whether ``strategy`` also needs each image scored mirrored left to right."""
        return False

    @abc.abstractmethod
    def uncertainty(
        self,
        records: Sequence[Mapping[str, Any]],
        flipped: Optional[Sequence[Mapping[str, Any]]],
        *,
        strategy: str,
        class_names: Sequence[str],
    ) -> list[Uncertainty]:
        """One :class:`Uncertainty` per record.

        Args:
            records: the batch prediction's records (:meth:`Prediction.records`), every class or
                box the model returns (no score threshold, no top-k).
            flipped: the records of the same images mirrored left to right, in the same order;
                None unless :meth:`flips`.
            strategy: one of :attr:`strategies`.
            class_names: the model's classes.
        """

    @abc.abstractmethod
    def proposal(self, record: Mapping[str, Any]) -> Proposal:
        """What a reviewer is shown for one record (its confident boxes, or its top class)."""

    def check(self, strategy: str) -> str:
        """``strategy`` resolved: ``auto`` is the first of :attr:`strategies`, ``random`` stays.

        Raises:
            TaskError: a strategy the task does not offer; the message lists those it does.
        """
        if strategy == AUTO:
            return self.strategies[0]
        if strategy == RANDOM or strategy in self.strategies:
            return strategy
        offered = ", ".join([*self.strategies, RANDOM])
        raise TaskError(f"strategy {strategy!r}: task {self.task.name!r} offers {offered} (or auto, its first)")


def selection_of(task: Task, options: Optional[Mapping[str, Any]] = None) -> Selection:
    """The task's selection facet with its typed ``selection_options``, asked for before anything is scored.

    Raises:
        TaskError: the task has none (the one line names what is missing), or options it refuses.
    """
    typed = task.step_options("selection_options", options)
    facet = task.selection(typed)
    if facet is None or not facet.strategies:
        raise TaskError(
            f"task {task.name!r} picks no images to label: its selection() gives no Selection with strategies; "
            "give the task a Selection (trainer/tasks/selection.py)"
        )
    return facet
