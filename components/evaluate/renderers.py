"""What renders each task's evaluation result: its Markdown report, its HTML page, its sample of images.

One registry for every task, built-in and extra (``LTP_EXTENSIONS``: such a module registers
its task and, here, its renderers). A task without renderers fails plainly when it is evaluated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Optional

from trainer.tasks import TaskError, task_types


@dataclasses.dataclass(frozen=True)
class Renderers:
    """A task's renderers.

    Attributes:
        report: ``(result, decision, split, model_uri, baseline_entry) -> Markdown``.
        page: ``(result, decision, split) -> HTML``.
        sample: ``(task, model_dir, dataset_dir, split) -> the sample's fields`` (images with
            true and predicted labels for the run report); None: the task has no such sample.
    """

    report: Callable[..., str]
    page: Callable[..., str]
    sample: Optional[Callable[..., dict[str, Any]]] = None


_RENDERERS: dict[str, Renderers] = {}


def register(task_name: str, renderers: Renderers) -> None:
    """Registers a task's renderers (once per task)."""
    _RENDERERS[task_name] = renderers


def _builtin() -> None:
    from components.evaluate.page import classification_page, detection_page
    from components.evaluate.report import render_detection_report, render_report
    from components.evaluate.samples import classification_sample

    _RENDERERS.setdefault("classification", Renderers(render_report, classification_page, classification_sample))
    _RENDERERS.setdefault("detection", Renderers(render_detection_report, detection_page))


def renderers_of(task_name: str) -> Renderers:
    """The renderers of a task.

    Raises:
        TaskError: the task has no renderers registered.
    """
    task_types()  # imports the extra task modules, which register their renderers
    _builtin()
    if task_name not in _RENDERERS:
        raise TaskError(
            f"the evaluate step has no renderers for task {task_name!r}; tasks with renderers: "
            f"{sorted(_RENDERERS)}; register them with components.evaluate.renderers.register"
        )
    return _RENDERERS[task_name]
