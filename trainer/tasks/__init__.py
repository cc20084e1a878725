"""The tasks a model can be trained for, behind one small interface (:class:`trainer.tasks.base.Task`).

Every step asks the task instead of assuming classes: training (how a record becomes model inputs
and targets, the model, its loss and training metrics), export (the serving signatures),
evaluation (its metrics and the direction in which each is better), the gate (the same metric
table) and the serving checks (the response schema and what a known example must answer).

The registry holds task *types*; :func:`get_task` returns a configured instance. Besides the
built-in tasks, the modules named in the ``LTP_EXTENSIONS`` environment variable
(comma-separated, e.g. ``tests.toy_task``; :mod:`trainer.extensions`) are imported when the
registry is first looked up, and each calls :func:`register`: subprocesses (a kfp.local step) see
the same tasks.

Importing this package, :func:`get_task` and a task's metric table and serving schema costs no
TensorFlow: the gate, the serving checks and the pipelines use them freely. TensorFlow (and
keras-hub, for detection) is imported only by the methods that build, export or score a model.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Optional

from trainer import model_folder
from trainer.registry import Registry
from trainer.tasks.base import EvaluationResultBase, Metric, RunDefaults, ServingSchema, Task, TaskError
from trainer.tfrecords import DatasetInfo

DEFAULT_TASK = "classification"
_BUILTIN_MODULES = ("trainer.tasks.classification", "trainer.tasks.detection")

_TASKS: Registry[type[Task]] = Registry("task", _BUILTIN_MODULES, error=TaskError)


def register(task_type: type[Task]) -> type[Task]:
    """Adds a task type to the registry (a class decorator); the name must be new.

    Raises:
        TaskError: another type is registered under the same name.
    """
    return _TASKS.register(task_type.name, task_type)


def task_types() -> dict[str, type[Task]]:
    """Task name -> task type, every registered task (built-in and ``LTP_EXTENSIONS``).

    Raises:
        TaskError: a module named in ``LTP_EXTENSIONS`` cannot be imported.
    """
    return _TASKS.entries()


def task_names() -> list[str]:
    """The registered tasks' names, sorted."""
    return sorted(_TASKS.names())


def get_task(name: str | None, options: Mapping[str, Any] | None = None) -> Task:
    """The task named ``name`` (``None`` means the default, ``classification``), configured.

    Args:
        name: the task's name.
        options: the model's options (``TrainConfig.model_options``); None for the defaults.

    Raises:
        TaskError: no task of that name, or options it does not take.
    """
    return _TASKS.get(name or DEFAULT_TASK)(options)


def check_step_options(field: str, options: Mapping[str, Any] | None) -> None:
    """Checks a step's task settings (``evaluation_options``, ...) before the model's task is known.

    Some registered task must take them (:meth:`Task.step_options`); the step asks the model's
    own task again when it knows it.

    Raises:
        TaskError: no task takes them; the message is that of a task that takes such settings.
    """
    if not options:
        return
    refusals = []
    for task_type in task_types().values():
        try:
            task_type.step_options(field, options)
            return
        except TaskError as err:
            refusals.append((field not in task_type.step_options_types, str(err)))
    raise TaskError(min(refusals)[1])


def task_of_manifest(info: DatasetInfo, options: Mapping[str, Any] | None = None) -> Task:
    """The task a dataset was converted for (``dataset.json``'s ``task``)."""
    return get_task(info.task, options)


def task_of_model(model_dir: str) -> Task:
    """The task a model folder was trained for (its ``training.json``'s ``task``), with default options.

    Scoring and serving read what they need from the SavedModel, so the model's own options are
    not needed here. Folders without ``training.json`` (a bare SavedModel export) or written
    before the field existed are classification models.

    Raises:
        TaskError: the folder names a task this code does not know.
    """
    from trainer import storage

    path = model_folder.summary_path(model_dir)
    recorded: Optional[dict] = json.loads(storage.read_bytes(path)) if storage.exists(path) else {}
    return get_task((recorded or {}).get("task"))


__all__ = [
    "DEFAULT_TASK",
    "EvaluationResultBase",
    "Metric",
    "RunDefaults",
    "ServingSchema",
    "Task",
    "TaskError",
    "check_step_options",
    "get_task",
    "register",
    "task_names",
    "task_of_manifest",
    "task_of_model",
    "task_types",
]
