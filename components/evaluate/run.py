"""Evaluation step: score the exported model, compare with prod, decide, write the artifacts.

The KFP adapter (``component.py``) calls :func:`run_evaluation` and only logs what it returns.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
from collections.abc import Callable, Sequence
from typing import Any, Optional

from components.evaluate import samples
from components.evaluate.gate import Decision, decide, validate_thresholds
from components.evaluate.renderers import Evaluated, renderers_of
from components.evaluate.report import blessing_record
from components.evaluate.slice_gate import check_settings, check_values, slice_checks, with_slices
from trainer import model_folder, slices, storage
from trainer.config import EvaluateConfig
from trainer.tasks import EvaluationResultBase, task_of_model

BASELINE_STAGE = "prod"
REFERENCE_IMAGES = 1000
"""The test images whose answers make the traffic reference (a detector answers about 76 a second here)."""


@dataclasses.dataclass
class ReferenceAnswers:
    """The first ``limit`` images of the split the evaluation scored, and its answers on them.

    The answers are as the server's REST answer has them after JSON (``Task.evaluate``'s
    ``on_answers``); :meth:`take` is that callback.
    """

    limit: int = REFERENCE_IMAGES
    images: list[bytes] = dataclasses.field(default_factory=list)
    answers: list[Any] = dataclasses.field(default_factory=list)

    def take(self, images: Sequence[bytes], answers: Sequence[Any]) -> None:
        """Keeps a batch's images and answers, up to ``limit`` in all (the split's first)."""
        if len(images) != len(answers):
            raise ValueError(f"{len(answers)} answers for {len(images)} images")
        room = max(0, self.limit - len(self.images))
        self.images += list(images[:room])
        self.answers += list(answers[:room])


@dataclasses.dataclass(frozen=True)
class EvaluationOutcome:
    """What the evaluation step produced.

    Attributes:
        task: the task evaluated (its name).
        result: the task's evaluation result (``metrics`` and the task's tables).
        decision: the gate's decision.
        report: the Markdown report.
        blessing: the blessing artifact's JSON content (the task's name in it).
        page: the HTML page (the task's charts and images).
        evaluated: what the run report's part (:func:`run_report_part`) is made from.
        answers: the evaluation's answers on the split's first images, what the traffic reference
            is made from (:func:`write_traffic_reference`); None: the task hands none.
    """

    task: str
    result: EvaluationResultBase
    decision: Decision
    report: str
    blessing: dict[str, Any]
    page: str = ""
    evaluated: Optional[Evaluated] = None
    answers: Optional[ReferenceAnswers] = None

    @property
    def metrics(self) -> dict[str, float]:
        """The scalar metrics (the step's ``Metrics`` artifact)."""
        return dict(self.result.metrics)

    @property
    def confusion(self) -> Optional[tuple[list[str], list[list[int]]]]:
        """(class names, matrix) for the Kubeflow UI's confusion matrix, when the task has one."""
        return self.result.confusion_matrix()


def read_baseline(stages_root: Optional[str], model_name: str) -> Optional[dict[str, Any]]:
    """Returns prod's current promotion record of a served model (its ``metrics`` are the baseline), or None.

    A stage serves several models side by side: the baseline is the one served under the same
    name as the candidate will be (a detector is never compared with the classifier).

    Args:
        stages_root: the stages folder or gs:// URI; None means there are no stages (no baseline).
        model_name: the served model name (``/v1/models/<name>``) the candidate is promoted as.
    """
    if not stages_root:
        return None
    from components.serving.stages import StageRegistry

    current = StageRegistry(stages_root).read_current(BASELINE_STAGE, model_name)
    return None if current is None else current.to_dict()


def _same_place(a: str, b: str) -> bool:
    """Whether two dataset locations (folders or gs:// URIs) are the same one."""
    if "://" in a or "://" in b:
        return a.rstrip("/") == b.rstrip("/")
    return os.path.realpath(a) == os.path.realpath(b)


def split_change_note(
    baseline_entry: Optional[dict[str, Any]], dataset_dir: str, split: str, shas: list[str]
) -> list[str]:
    """A line for the gate when the split scored here is not the one prod's model was judged on.

    Prod's model was evaluated on the same split of the dataset it was trained on (its
    ``training.json`` names it); the images are compared by their ``image/sha256``. A change
    threshold against prod then compares two models on different images: not like for like.

    Returns:
        No line when there is no prod model or the split is the same; else one line saying so,
        or why it cannot be told.
    """
    if baseline_entry is None:
        return []
    model_uri = baseline_entry.get("model_uri") or ""
    try:
        training = storage.read_json(storage.join(model_uri, "training.json")) if model_uri else None
    except Exception as err:  # noqa: BLE001 (a note, never a failure: any storage error says why)
        training, why = None, f"its training.json cannot be read ({' '.join(str(err).split())[:200]})"
    else:
        why = "it records no training dataset (training.json)"
    dataset = (training or {}).get("dataset")
    if not dataset:
        return [f"note: whether prod's model was judged on this {split} split cannot be told: {why}"]
    if _same_place(dataset, dataset_dir):
        return []
    try:
        theirs = set(slices.read_split_slices(dataset, split).shas)
    except Exception as err:  # noqa: BLE001 (as above)
        why = " ".join(str(err).split())[:200]
        return [f"note: whether prod's model was judged on this {split} split cannot be told: {dataset}: {why}"]
    ours = set(shas)
    if ours == theirs:
        return []
    return [
        f"NOTE: the {split} split is not the one prod's model was judged on ({dataset}): "
        f"{len(ours):,} images here, {len(theirs):,} there, {len(ours & theirs):,} in both; "
        "the comparison with prod is not like for like"
    ]


def run_evaluation(
    model_dir: str,
    dataset_dir: str,
    config: EvaluateConfig,
    stages_root: Optional[str] = None,
    limit: Optional[int] = None,
    served_model_name: Optional[str] = None,
    on_progress: Optional[Callable[..., None]] = None,
) -> EvaluationOutcome:
    """Scores ``<model_dir>/saved_model`` on a split and decides whether it is blessed.

    Everything that can be checked without scoring is checked first: threshold names, the
    split (exists, not empty), the SavedModel's signature against the dataset's classes.

    Args:
        model_dir: the Model artifact's folder (holds ``saved_model/``).
        dataset_dir: the Dataset artifact's folder (holds ``dataset.json``).
        config: the evaluation settings, thresholds included.
        stages_root: where the promotion records are; None means no baseline.
        limit: score at most this many examples (tests); None for the whole split.
        served_model_name: the name the model is served under; prod's record of it is the baseline.
            None: the task's (``classifier``, ``detector``).
        on_progress: called with (examples scored, examples in all) as the task scores, for a
            task whose ``evaluate`` takes ``on_progress`` (:func:`score`).

    Returns:
        The result, the decision, the report and the blessing record.
    """
    task = task_of_model(model_dir)
    renderers = renderers_of(task.name)
    validate_thresholds(config.value_thresholds, config.change_thresholds, task.directions())
    task.step_options("evaluation_options", config.evaluation_options)  # the model's task takes them
    split = slices.read_split_slices(dataset_dir, config.split, limit, config.slice_columns, config.slice_size_edges)
    columns = {*split.columns, *task.builtin_slice_columns}
    check_settings(config.slice_thresholds, config.slice_change_thresholds, task.name, task.slice_metrics, columns)
    baseline_entry = read_baseline(stages_root, served_model_name or task.run_defaults.served_model_name)
    baseline = None
    if baseline_entry is not None:
        baseline = {
            k: float(v)
            for k, v in (baseline_entry.get("metrics") or {}).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)
        }
    kept = ReferenceAnswers()
    result = score(task, model_folder.saved_model_dir(model_dir), dataset_dir, config, limit, on_progress, kept.take)
    rows = result.slice_rows()
    check_values(config.slice_thresholds, rows)
    decision = decide(result.metrics, config.value_thresholds, config.change_thresholds, baseline, task.directions())
    checks, reasons = slice_checks(
        rows, config.slice_thresholds, config.slice_change_thresholds, baseline, task.directions()
    )
    reasons += split_change_note(baseline_entry, dataset_dir, config.split, split.shas)
    decision = with_slices(decision, checks, reasons)
    report = renderers.report(result, decision, config.split, model_dir, baseline_entry)
    return EvaluationOutcome(
        task=task.name,
        result=result,
        decision=decision,
        report=report,
        blessing=blessing_record(decision, result.metrics, model_dir, config.split, task.name),
        page=renderers.page(result, decision, config.split),
        evaluated=Evaluated(task, result, model_dir, dataset_dir, config.split),
        answers=kept if kept.images else None,
    )


def score(
    task: Any,
    saved_model_dir: str,
    dataset_dir: str,
    config: EvaluateConfig,
    limit: Optional[int] = None,
    on_progress: Optional[Callable[..., None]] = None,
    on_answers: Optional[Callable[..., None]] = None,
) -> EvaluationResultBase:
    """The task's evaluation of the SavedModel, reporting progress and answers where the task can.

    A task reports its scoring's progress when its ``evaluate`` takes an ``on_progress``
    keyword, and hands its answers when it takes ``on_answers``; a task without them (an
    extension written before them) scores silently.

    Args:
        task: the model's task.
        saved_model_dir: the SavedModel folder.
        dataset_dir: the dataset folder.
        config: the evaluation settings.
        limit: score at most this many examples; None for the whole split.
        on_progress: ``on_progress(done, total, **fields)``; None for no progress.
        on_answers: ``on_answers(images, answers)`` of each batch (``Task.evaluate``); None: not wanted.

    Returns:
        The task's evaluation result.
    """
    takes = inspect.signature(task.evaluate).parameters
    hooks = {"on_progress": on_progress, "on_answers": on_answers}
    return task.evaluate(
        saved_model_dir, dataset_dir, config, limit, **{k: v for k, v in hooks.items() if v is not None and k in takes}
    )


def run_report_part(outcome: EvaluationOutcome) -> dict[str, Any]:
    """The evaluation's part of the run report (``samples.json``): the task's image sample and sections.

    The task's renderers make both from the evaluation (``components/evaluate/samples.py`` says
    the record's keys); a task whose renderers make neither gets a record that says so.
    """
    evaluated = outcome.evaluated
    if evaluated is None:
        raise ValueError("the outcome has no evaluation context; make it with run_evaluation")
    renderers = renderers_of(outcome.task)
    record = samples.empty_record(outcome.task, evaluated.split)
    if renderers.sample is not None:
        record.update(renderers.sample(evaluated))
    if renderers.sections is not None:
        record["sections"] = {k: v for k, v in renderers.sections(evaluated).items() if v}
    return record


def write_outputs(
    outcome: EvaluationOutcome,
    report_path: str,
    blessing_path: str,
    page_path: Optional[str] = None,
    samples_path: Optional[str] = None,
) -> None:
    """Writes the Markdown report, the blessing JSON and, given their paths, the page and the run report's part.

    The run report's part is ``samples.json`` (:func:`run_report_part`).
    """
    files = [(report_path, outcome.report), (blessing_path, json.dumps(outcome.blessing, indent=2))]
    if page_path is not None:
        files.append((page_path, outcome.page))
    for path, text in files:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    if samples_path is not None:
        samples.write_record(run_report_part(outcome), samples_path)


def served_answers(
    model_dir: str, dataset_dir: str, split: str, limit: int = REFERENCE_IMAGES
) -> tuple[list[bytes], list[Any]]:
    """The first ``limit`` images of ``split`` and the model's answers on them through the served path.

    The served path is ``components.serving.model`` with base64 bodies (the bytes signature), in
    requests of 256 images: a second pass over the images, for a reference made without an
    evaluation's answers (:class:`ReferenceAnswers`).
    """
    import base64
    from pathlib import Path

    from components.serving.model import Model
    from components.serving.traffic import answer_rows
    from trainer.evaluate import read_encoded_split

    images, _, _ = read_encoded_split(dataset_dir, split, limit)
    model = Model("reference", 1, Path(model_folder.saved_model_dir(model_dir)), 256, None)
    answers = []
    for start in range(0, len(images), 256):
        body = {"instances": [{"b64": base64.b64encode(b).decode()} for b in images[start : start + 256]]}
        answers += answer_rows(model.predict(body))
    return images, answers


def write_traffic_reference(
    model_dir: str, dataset_dir: str, split: str, answers: Optional[ReferenceAnswers] = None
) -> str:
    """Writes ``<model_dir>/traffic_reference.json``: the model's answers on ``split``, summarized as served traffic.

    The answers are the evaluation's own (``answers``, :attr:`EvaluationOutcome.answers`: the
    ``serving_default`` signature the server runs, on the split's first :data:`REFERENCE_IMAGES`
    images), so the monitor compares like with like (docs/observability.md) at no extra cost;
    without them, the served path answers them again (:func:`served_answers`). Returns the path.
    """
    from components.serving.reference import REFERENCE_FILE, build_reference
    from components.serving.traffic import TrafficConfig, summaries_of

    if answers is None:
        images, rows = served_answers(model_dir, dataset_dir, split)
    else:
        images, rows = answers.images, answers.answers
    reference = build_reference(summaries_of(images, rows, TrafficConfig()), source=f"{split} split of {dataset_dir}")
    path = storage.join(model_dir, REFERENCE_FILE)
    storage.write_json(path, reference)
    return path
