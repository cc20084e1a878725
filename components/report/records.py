"""The run report's records: what the steps wrote, read into one typed object for the page.

The report is built from the steps' own records, read as plain files and dicts (no TensorFlow, no
import of another step): the dataset's ``dataset.json`` (read by
``trainer.tfrecords.load_dataset_info``) and ``rejected.jsonl``, training's ``training.json``,
the evaluation's metrics, confusion matrix, blessing and run-report part (``samples.json``), the
benchmark's row, and the stages' ``current.json`` and ``history.jsonl``. :func:`read_records`
reads them all once into :class:`RunRecords`; the sections (``components/report/sections.py``)
render that object and read nothing themselves.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

from components.serving.drift_history import DriftHistory, drift_folder, read_history
from trainer import model_folder

if TYPE_CHECKING:
    from components.serving.stages import StageEntry
    from trainer.tfrecords import DatasetInfo

__all__ = [
    "DatasetRecord",
    "Failure",
    "ReportError",
    "ReportInputs",
    "RunRecords",
    "ServedModel",
    "StageRecord",
    "StageStep",
    "StepRecord",
    "confusion_matrix",
    "read_dataset",
    "read_json",
    "read_records",
    "read_stages",
    "read_training",
    "task_parts",
]

# Rejections listed one by one (the rest are counted by reason).
REJECTIONS_LISTED = 20
# History entries shown per stage (newest first).
HISTORY_SHOWN = 8


class ReportError(ValueError):
    """The report cannot be built from what it was given; the message says what and why."""


@dataclasses.dataclass(frozen=True)
class StepRecord:
    """One step of a local run, as the console saw it.

    Attributes:
        name: the step's display name (``Convert to TFRecords``).
        task: the task's name in the run folder (``convert-to-tfrecords``).
        status: ``succeeded``, ``failed`` or ``not run`` (a false condition, a failed upstream).
        seconds: how long it ran; None when it did not run.
        headline: its figure in one line (``40,000 images, 0 rejected``); may be empty.
        log: its log file, relative to the report's folder; None when there is none.
    """

    name: str
    task: str
    status: str
    seconds: Optional[float] = None
    headline: str = ""
    log: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Failure:
    """Why a local run stopped: the first step that failed, and what failed after it.

    Attributes:
        step: the first failing step's display name.
        error: its error line (the last exception in its own log, or kfp.local's message).
        log_tail: the last lines of its log (its own output, no traceback).
        log: the whole log's path.
        then: each later failure in one line, after the first: ``Join the shards failed as a
            consequence: <its error>`` (a step downstream of it, an exit task) or ``... failed on
            its own too: ...``.
    """

    step: str
    error: str
    log_tail: str
    log: Optional[str] = None
    then: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class ReportInputs:
    """What the page is built from; every part may be missing (a failed or partial run).

    Attributes:
        title: the page's title.
        run: the run's name (the kfp.local run folder or the Kubeflow job name).
        dataset_dir: the Dataset folder (``dataset.json``, ``rejected.jsonl``).
        model_dir: the Model folder (``training.json``).
        evaluation: the evaluation's scalar metrics (the Metrics artifact's metadata).
        confusion: the ClassificationMetrics artifact's metadata (``confusionMatrix``), or
            ``{"classes": [...], "matrix": [[...]]}``.
        blessing: the blessing artifact's JSON.
        samples: the evaluation's part of the report (``samples.json``: the task's image sample
            and its parts of the sections).
        benchmark: the benchmark's row (``BenchmarkRow.summary().to_dict()``).
        validation: what the validate step returned (``validation.json``: passed, counts, findings).
        stages_root: the stage store (``current.json`` and ``history.jsonl`` per stage).
        steps: the local run's steps with status and times; None on a cluster.
        failure: why the run stopped, when it did.
        parameters: the run-form parameters that differ from the form's defaults, each a mapping
            of ``name``, ``value``, ``default`` and ``from`` (where the value came from: ``SET``,
            ``CONFIG run.yaml``, ``EPOCHS``, ...); None where they were not recorded (a cluster
            run: the Kubeflow UI shows its parameters).
    """

    title: str = "Run report"
    run: str = ""
    dataset_dir: Optional[str] = None
    model_dir: Optional[str] = None
    evaluation: Optional[Mapping[str, Any]] = None
    confusion: Optional[Mapping[str, Any]] = None
    blessing: Optional[Mapping[str, Any]] = None
    samples: Optional[Mapping[str, Any]] = None
    benchmark: Optional[Mapping[str, Any]] = None
    validation: Optional[Mapping[str, Any]] = None
    stages_root: Optional[str] = None
    steps: Optional[Sequence[StepRecord]] = None
    failure: Optional[Failure] = None
    parameters: Optional[Sequence[Mapping[str, Any]]] = None


@dataclasses.dataclass(frozen=True)
class DatasetRecord:
    """The dataset as the convert step recorded it.

    Attributes:
        info: its manifest (``dataset.json``).
        rejections: the first :data:`REJECTIONS_LISTED` lines of ``rejected.jsonl`` (``path``,
            ``uri`` or ``id``, and ``reason``); empty when no image was rejected.
    """

    info: DatasetInfo
    rejections: tuple[Mapping[str, Any], ...] = ()


@dataclasses.dataclass(frozen=True)
class StageStep:
    """One stage record with the task of its model.

    Attributes:
        entry: the record (``current.json`` or a line of ``history.jsonl``).
        task: the task its model was made for; None where neither the record nor the model
            folder says (a folder that is gone).
    """

    entry: StageEntry
    task: Optional[str]


@dataclasses.dataclass(frozen=True)
class ServedModel:
    """A model a stage serves, with its history.

    Attributes:
        name: the served model's name.
        current: what the stage serves now.
        history: its last :data:`HISTORY_SHOWN` records, newest first.
        drift: the monitor's drift windows of its sampled traffic (none yet: no windows).
    """

    name: str
    current: StageStep
    history: tuple[StageStep, ...]
    drift: Optional[DriftHistory] = None


@dataclasses.dataclass(frozen=True)
class StageRecord:
    """One stage of the stage store.

    Attributes:
        stage: the stage's name (``demo``, ``staging``, ``prod``).
        models: the models it serves, by name; empty when it serves nothing.
    """

    stage: str
    models: tuple[ServedModel, ...]


@dataclasses.dataclass(frozen=True)
class RunRecords:
    """Everything the page shows, read once from the run's records; a part the run did not make is None.

    Attributes:
        title: the page's title.
        run: the run's name.
        task: the task the run was made for, as its records name it; None where none does.
        steps: the local run's steps; None on a cluster.
        failure: why the run stopped, when it did.
        parameters: the run-form parameters that differ from the defaults; None: not recorded.
        dataset: the dataset's manifest and rejections.
        training: the training's summary (``training.json``, as a dict).
        evaluation: the evaluation's scalar metrics.
        confusion: the confusion matrix as (class names, rows: true), where the task has one.
        blessing: the gate's decision.
        samples: the evaluation's part of the report (``samples.json``).
        task_parts: the task's parts of the sections (HTML its renderers made), by section.
        benchmark: the benchmark's row.
        validation: the data checks' outcome (``validation.json``); None where none ran.
        stages: the stage store's stages; None when no store was given.
        export: the export step's record (``<model>/export/export.json``); None where none ran.
    """

    title: str = "Run report"
    run: str = ""
    task: Optional[str] = None
    steps: Optional[Sequence[StepRecord]] = None
    failure: Optional[Failure] = None
    parameters: Optional[Sequence[Mapping[str, Any]]] = None
    dataset: Optional[DatasetRecord] = None
    training: Optional[Mapping[str, Any]] = None
    evaluation: Optional[Mapping[str, Any]] = None
    confusion: Optional[tuple[list[str], list[list[int]]]] = None
    blessing: Optional[Mapping[str, Any]] = None
    samples: Optional[Mapping[str, Any]] = None
    task_parts: Mapping[str, str] = dataclasses.field(default_factory=dict)
    benchmark: Optional[Mapping[str, Any]] = None
    validation: Optional[Mapping[str, Any]] = None
    stages: Optional[tuple[StageRecord, ...]] = None
    export: Optional[Mapping[str, Any]] = None


# ------------------------------------------------------------------------------------ files


def _read_text(path: str) -> Optional[str]:
    from trainer import storage

    try:
        return storage.read_bytes(path).decode("utf-8")
    except FileNotFoundError:
        return None


def read_json(path: Optional[str]) -> Optional[dict[str, Any]]:
    """A JSON file's content (local or gs://), or None when the path is None or the file is missing.

    Raises:
        ReportError: the file is there but is not a JSON object.
    """
    if not path:
        return None
    text = _read_text(path)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ReportError(f"{path} is not JSON ({err}); expected the step's record") from None
    if not isinstance(data, dict):
        raise ReportError(f"{path} holds a {type(data).__name__}, expected a JSON object")
    return data


def _join(folder: str, name: str) -> str:
    return folder.rstrip("/") + "/" + name if folder.startswith("gs://") else os.path.join(folder, name)


# ------------------------------------------------------------------------------------ records


def confusion_matrix(confusion: Optional[Mapping[str, Any]]) -> Optional[tuple[list[str], list[list[int]]]]:
    """(class names, matrix) from a ClassificationMetrics' metadata or a plain dict, or None.

    Raises:
        ReportError: the matrix is not square over the classes.
    """
    if not confusion:
        return None
    if "confusionMatrix" in confusion:
        cm = confusion["confusionMatrix"]
        names = [str(a.get("displayName", "")) for a in cm.get("annotationSpecs", [])]
        matrix = [[int(v) for v in r.get("row", [])] for r in cm.get("rows", [])]
    else:
        names = [str(n) for n in confusion.get("classes", [])]
        matrix = [[int(v) for v in row] for row in confusion.get("matrix", [])]
    if len(matrix) != len(names) or any(len(row) != len(names) for row in matrix):
        raise ReportError(f"the confusion matrix is not {len(names)}x{len(names)} for {len(names)} classes")
    return names, matrix


def _dataset_info(dataset_dir: Optional[str]) -> Optional[DatasetInfo]:
    """The dataset's manifest, or None when there is no dataset folder or no ``dataset.json`` in it.

    Raises:
        ReportError: ``dataset.json`` is there but is not a valid manifest.
    """
    from trainer import storage, tfrecords

    if not dataset_dir or not storage.exists(_join(dataset_dir, tfrecords.MANIFEST_NAME)):
        return None
    try:
        return tfrecords.load_dataset_info(dataset_dir)
    except tfrecords.DatasetError as err:
        raise ReportError(str(err)) from None


def read_dataset(dataset_dir: Optional[str]) -> Optional[DatasetRecord]:
    """The dataset's manifest and its first rejections, or None when the conversion did not finish.

    Raises:
        ReportError: ``dataset.json`` is there but is not a valid manifest.
    """
    info = _dataset_info(dataset_dir)
    if info is None:
        return None
    if not info.rejected:
        return DatasetRecord(info)
    listed = _read_text(_join(dataset_dir, "rejected.jsonl")) or ""
    lines = [json.loads(line) for line in listed.splitlines()[:REJECTIONS_LISTED] if line.strip()]
    return DatasetRecord(info, tuple(lines))


def read_training(model_dir: Optional[str]) -> Optional[dict[str, Any]]:
    """The training's summary (``training.json``), or None when training did not finish.

    Raises:
        ReportError: ``training.json`` is there but is not a JSON object.
    """
    return read_json(model_folder.summary_path(model_dir)) if model_dir else None


def _training_task(summary: Optional[Mapping[str, Any]]) -> Optional[str]:
    """The task of a training summary; one without ``task`` is a classifier's (``trainer.tasks.task_of_model``)."""
    from trainer.tasks import DEFAULT_TASK

    return None if summary is None else str(summary.get("task") or DEFAULT_TASK)


def _model_task(model_uri: str) -> Optional[str]:
    """The task a model folder was trained for (its ``training.json``), or None where the folder is gone."""
    try:
        return _training_task(read_training(model_uri))
    except (OSError, ReportError):
        return None


def _entry_task(entry: StageEntry, known: dict[str, Optional[str]]) -> Optional[str]:
    """The task of a stage record's model: the record's own ``task``, else its model folder's.

    Args:
        entry: a stage record.
        known: model URI -> task, the folders read so far (each is read once per page).
    """
    named = getattr(entry, "task", None) or (getattr(entry, "extra", None) or {}).get("task")
    if named:
        return str(named)
    if entry.model_uri not in known:
        known[entry.model_uri] = _model_task(entry.model_uri)
    return known[entry.model_uri]


def read_stages(stages_root: Optional[str]) -> Optional[tuple[StageRecord, ...]]:
    """Every stage's served models, each with its last records (newest first); None without a store."""
    if not stages_root:
        return None
    from components.serving import stages

    registry = stages.StageRegistry(stages_root)
    known: dict[str, Optional[str]] = {}
    found = []
    for stage in stages.STAGES:
        served = registry.served_models(stage)
        models = []
        for name in sorted(served):
            history = reversed(registry.read_history(stage, name)[-HISTORY_SHOWN:])
            current = StageStep(served[name], _entry_task(served[name], known))
            steps = tuple(StageStep(e, _entry_task(e, known)) for e in history)
            drift = read_history(drift_folder(stages_root, stage, name), stage, name)
            models.append(ServedModel(name, current, steps, drift))
        found.append(StageRecord(stage, tuple(models)))
    return tuple(found)


def _run_task(
    inputs: ReportInputs, training: Optional[Mapping[str, Any]], dataset: Optional[DatasetRecord]
) -> Optional[str]:
    """The task the run was made for, as its records name it: the evaluation's, the training's, the dataset's."""
    for record in (inputs.samples, inputs.blessing):
        if record and record.get("task"):
            return str(record["task"])
    task = _training_task(training)
    if task is not None:
        return task
    return None if dataset is None else dataset.info.task


def task_parts(samples: Optional[Mapping[str, Any]]) -> dict[str, str]:
    """The task's parts of the sections (HTML its renderers made in the evaluate step), by section."""
    found = (samples or {}).get("sections") or {}
    return {str(k): str(v) for k, v in found.items() if isinstance(v, str)}


def _export_record(model_dir: Optional[str]) -> Optional[str]:
    """Where the export step's record of a model folder is (``trainer.export.formats``)."""
    from trainer import storage
    from trainer.export import formats

    return storage.join(model_dir, formats.EXPORT_DIR, formats.RECORD) if model_dir else None


def read_records(inputs: ReportInputs) -> RunRecords:
    """Reads every record the inputs point at.

    Args:
        inputs: the run's records and where its folders are.

    Returns:
        The records, each missing part None.

    Raises:
        ReportError: a record is there but is not what its step writes.
    """
    dataset = read_dataset(inputs.dataset_dir)
    training = read_training(inputs.model_dir)
    return RunRecords(
        title=inputs.title,
        run=inputs.run,
        task=_run_task(inputs, training, dataset),
        steps=inputs.steps,
        failure=inputs.failure,
        parameters=inputs.parameters,
        dataset=dataset,
        training=training,
        evaluation=inputs.evaluation,
        confusion=confusion_matrix(inputs.confusion),
        blessing=inputs.blessing,
        samples=inputs.samples,
        task_parts=task_parts(inputs.samples),
        benchmark=inputs.benchmark,
        validation=inputs.validation or None,
        stages=read_stages(inputs.stages_root),
        export=read_json(_export_record(inputs.model_dir)),
    )
