"""What renders each task's evaluation for people, one module per task: ``renderers/<task>.py``.

A task's module holds everything the evaluate step shows of that task: its Markdown report, its
HTML page, its image sample and its parts of the run report's sections (the dataset, the
training, the evaluation), and registers them under the task's name with :func:`register`.

One registry (``trainer.registry.Registry``) for every task: its built-in modules are the
per-task modules of this package (every module but the shared ``parts``), imported on the first
look-up, so a new task's renderers are one new module here; a module named in ``LTP_EXTENSIONS``
registers its task and, here, its renderers. A task without renderers fails plainly when it is
evaluated.
"""

from __future__ import annotations

import dataclasses
import pkgutil
from collections.abc import Callable
from typing import Any, Optional

from trainer.registry import Registry
from trainer.tasks import EvaluationResultBase, Task, TaskError

# The modules here that are no task's: pieces the task modules share.
_SHARED = {"parts"}
_BUILTIN_MODULES = tuple(
    f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__) if m.name not in _SHARED
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Evaluated:
    """What the sample and the run report's parts are made from: one scored model.

    Attributes:
        task: the task evaluated (default options: scoring reads the model's own).
        result: its evaluation result (the task's type).
        model_dir: the Model folder (``saved_model/``, ``training.json``).
        dataset_dir: the Dataset folder (``dataset.json`` and the shards).
        split: the split that was scored.
    """

    task: Task
    result: EvaluationResultBase
    model_dir: str
    dataset_dir: str
    split: str


@dataclasses.dataclass(frozen=True)
class Renderers:
    """A task's renderers.

    Attributes:
        report: ``(result, decision, split, model_uri, baseline_entry) -> Markdown``.
        page: ``(result, decision, split) -> HTML``.
        sample: ``(Evaluated) -> the sample's fields`` (``images`` as ``components.evaluate.
            samples.tile`` makes them, ``scanned``, ``summary``, ``class_names``, ``tile_px``); None:
            the task has no image sample.
        sections: ``(Evaluated) -> {section: HTML}``: the task's parts of the run report's
            ``dataset``, ``training`` and ``evaluation`` sections; None: the generic parts only.
    """

    report: Callable[..., str]
    page: Callable[..., str]
    sample: Optional[Callable[[Evaluated], dict[str, Any]]] = None
    sections: Optional[Callable[[Evaluated], dict[str, str]]] = None


_RENDERERS: Registry[Renderers] = Registry("renderers", _BUILTIN_MODULES, error=TaskError)


def register(task_name: str, renderers: Renderers) -> Renderers:
    """Registers a task's renderers (once per task).

    Raises:
        TaskError: other renderers are registered for the task.
    """
    return _RENDERERS.register(task_name, renderers)


def renderers_of(task_name: str) -> Renderers:
    """The renderers of a task.

    Raises:
        TaskError: the task has no renderers registered.
    """
    if task_name not in _RENDERERS:
        raise TaskError(
            f"the evaluate step has no renderers for task {task_name!r}; tasks with renderers: "
            f"{sorted(_RENDERERS.names())}; register them with components.evaluate.renderers.register"
        )
    return _RENDERERS.get(task_name)


__all__ = ["Evaluated", "Renderers", "register", "renderers_of"]
