"""The tasks a model can be trained for, behind one small interface (:class:`trainer.tasks.base.Task`).

Every step asks the task instead of assuming classes: training (how a record becomes model inputs
and targets, the model, its loss and training metrics), export (the serving signatures),
evaluation (its metrics and the direction in which each is better), the gate (the same metric
table) and the serving checks (the response schema and what a known example must answer).

Importing this package, :func:`get_task` and a task's metric table and serving schema costs no
TensorFlow: the gate, the serving checks and the pipelines use them freely. TensorFlow (and
keras-hub, for detection) is imported only by the methods that build, export or score a model.
"""

from __future__ import annotations

from trainer.tasks.base import Metric, ServingSchema, Task, TaskError
from trainer.tasks.classification import Classification
from trainer.tasks.detection import Detection

DEFAULT_TASK = "classification"

TASKS: dict[str, Task] = {task.name: task for task in (Classification(), Detection())}


def get_task(name: str | None) -> Task:
    """The task named ``name`` (``None`` means the default, ``classification``).

    Raises:
        TaskError: no task of that name.
    """
    name = name or DEFAULT_TASK
    if name not in TASKS:
        raise TaskError(f"task: unknown task {name!r}; known tasks: {', '.join(sorted(TASKS))}")
    return TASKS[name]


def task_of_manifest(manifest: dict) -> Task:
    """The task a dataset was converted for: ``dataset.json``'s ``task``, else classification."""
    return get_task(manifest.get("task"))


def task_of_model(model_dir: str) -> Task:
    """The task a model folder was trained for: its ``training.json``'s ``task``.

    Folders written before the field existed (and folders without ``training.json``, such as a
    bare SavedModel export) are classification models.

    Raises:
        TaskError: the folder names a task this code does not know.
    """
    import json

    from trainer import storage

    path = storage.join(model_dir, "training.json")
    recorded = json.loads(storage.read_bytes(path)) if storage.exists(path) else {}
    return get_task(recorded.get("task"))


__all__ = [
    "DEFAULT_TASK",
    "TASKS",
    "Classification",
    "Detection",
    "Metric",
    "ServingSchema",
    "Task",
    "TaskError",
    "get_task",
    "task_of_manifest",
    "task_of_model",
]
