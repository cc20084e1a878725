"""Whether a scheduled retraining has anything to do: the source's fingerprint against the data the
served model was trained on, and the served model's latest drift record (docs/retraining.md).

:func:`decide` reads, in seconds and without TensorFlow: what prod (else staging) serves under a
model name (its stage entry, the model folder's ``training.json`` and ``config.yaml``, the dataset's
``dataset.json``), the source's fingerprint as the convert step computes it (the source is listed,
no image is read), and the newest ``drift.json``. Its :class:`Decision` is one of:

- ``retrain``: the source differs from the data the model was trained on, or the model records no
  fingerprint of it (trained before fingerprints were recorded: its data is treated as new),
  unless demo already serves a candidate trained on exactly this data (an earlier retraining's,
  waiting for its promotion: ``nothing``, so a schedule does not train it again every time);
- ``drift``: nothing new, but the served model's traffic raised a drift alarm: recorded, and the
  run ends (retraining on the same data cannot fix drift);
- ``nothing``: nothing new and no alarm: the run ends, having asked for no accelerator.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from components.retrain.config import BASE_STAGES, RetrainConfig, split_budget
from trainer import storage

RETRAIN, DRIFT, NOTHING = "retrain", "drift", "nothing"
DECISION_FILE = "decision.json"
DRIFT_DIR = "drift"
DRIFT_FILE = "drift.json"


class RetrainError(ValueError):
    """The decision cannot be made; the message says what is wrong and what to do."""


@dataclasses.dataclass(frozen=True)
class Served:
    """The model a stage serves under a name, and what it was trained on.

    Attributes:
        model_name: the served model name.
        stage: ``prod`` or ``staging``.
        version: the served version.
        model_uri: the model folder it came from (``training.json``, ``config.yaml`` inside).
        task: the model's task (``classification``, ``detection``).
        model: the model builder's name.
        model_options: the model builder's options it was trained with.
        dataset: the dataset folder it was trained on ("" when unrecorded).
        source: the source that dataset was converted from ("" when unknown).
        source_format: the source's kind, as the convert step detected it ("" when unknown).
        fingerprint: the fingerprint of the data it was trained on; None: not recorded.
        convert: the convert settings the dataset was made with (``limit_per_split``, ``split_by``).
        warm_start: the folder a retraining starts from (``model.keras``, a detector's ``preset/``):
            the copy published with the version, else its model folder; None: neither has them.
    """

    model_name: str
    stage: str
    version: int
    model_uri: str
    task: str
    model: str
    model_options: Mapping[str, Any]
    dataset: str
    source: str
    source_format: str
    fingerprint: Optional[str]
    convert: Mapping[str, Any]
    warm_start: Optional[str] = None

    @property
    def who(self) -> str:
        """``prod's classifier version 3``."""
        return f"{self.stage}'s {self.model_name} version {self.version}"


@dataclasses.dataclass(frozen=True)
class Drift:
    """The served model's latest drift record (``drift.json``): its alarm and the checks that raised it."""

    file: str
    alarm: bool
    checks: Sequence[Any]

    def alarmed(self) -> list[str]:
        """The names of the checks in alarm (all the checks' names when they say nothing per check)."""
        named = []
        for check in self.checks:
            if isinstance(check, Mapping):
                if check.get("alarm", True):
                    named.append(str(check.get("name") or check.get("check") or check.get("kind") or "?"))
            else:
                named.append(str(check))
        return named


@dataclasses.dataclass(frozen=True)
class Decision:
    """What a retraining run does, and why (``decision.json``).

    Attributes:
        action: ``retrain``, ``drift`` or ``nothing``.
        reason: the decision in one line.
        model_name: the served model name.
        stage, version: the served version the retraining compares with and starts from.
        task, model, model_options: the served model's task, builder and its options.
        source: the source to convert (the served model's when none was given).
        fingerprint: the source's fingerprint now.
        trained_fingerprint: the fingerprint of the data the served model was trained on; None: unrecorded.
        limit_per_split, split_by: the served dataset's convert settings, kept for the new one.
        time_budget, cost_budget: the train step's budget (``retrain_budget``).
        value_thresholds, change_thresholds: the gate's, the given ones or the task's defaults.
        train_config_yaml: the train step's further fields (``warm_start``); empty: none.
        parent: the dataset the conversion grows from (the served model's: only what it lacks is
            converted); empty: the whole source is converted.
        conversion: what the conversion converts, in one line (a delta of what, or why the whole source).
        warm: the warm start in one line (where from, or why it is a cold start).
        promote_to: how far a blessed candidate goes on its own (``demo``, ``staging``, ``prod``).
        drift: the drift record read (file, alarm, checks); None: none found.
    """

    action: str
    reason: str
    model_name: str
    stage: str
    version: int
    task: str
    model: str
    model_options: Mapping[str, Any]
    source: str
    fingerprint: str
    trained_fingerprint: Optional[str]
    limit_per_split: int
    split_by: str
    time_budget: str
    cost_budget: str
    value_thresholds: Mapping[str, float]
    change_thresholds: Mapping[str, float]
    train_config_yaml: str = ""
    warm: str = ""
    parent: str = ""
    conversion: str = ""
    promote_to: str = "demo"
    drift: Optional[Mapping[str, Any]] = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ``decision.json``."""
        return dataclasses.asdict(self)


def served_model(stages_root: str, model_name: str) -> Served:
    """What prod (else staging) serves under ``model_name``, and what it was trained on.

    Raises:
        RetrainError: neither stage serves that model (run the main pipeline first).
    """
    from components.serving.stages import StageRegistry

    registry = StageRegistry(stages_root)
    for stage in BASE_STAGES:
        entry = registry.read_current(stage, model_name)
        if entry is not None and entry.version is not None:
            served = _trained_on(model_name, stage, entry.version, entry.model_uri, entry.task)
            sources = (registry.warm_start_dir(stage, model_name, entry.version), entry.model_uri)
            return dataclasses.replace(served, warm_start=next((s for s in sources if _can_start(s)), None))
    raise RetrainError(
        f"no model {model_name!r} at prod or staging under {stages_root}: run the main pipeline first "
        "(make run), or give the served_model_name a stage serves"
    )


def _trained_on(model_name: str, stage: str, version: int, model_uri: str, task: Optional[str]) -> Served:
    """A served version's training record, its training config and its dataset's manifest
    (what is gone, such as a run's expired outputs, is read as unrecorded).
    """
    import yaml

    from trainer import model_folder
    from trainer.tfrecords import DatasetError, load_dataset_info

    training = (storage.read_json(model_folder.summary_path(model_uri)) if model_uri else None) or {}
    config_path = storage.join(model_uri, model_folder.CONFIG) if model_uri else ""
    config = yaml.safe_load(storage.read_text(config_path)) if config_path and storage.exists(config_path) else {}
    train = (config or {}).get("train") or config or {}
    dataset = str(training.get("dataset") or "")
    try:
        info = load_dataset_info(dataset) if dataset else None
    except DatasetError:
        info = None
    source = info.source if info is not None else None
    return Served(
        model_name=model_name,
        stage=stage,
        version=version,
        model_uri=model_uri,
        task=str(task or training.get("task") or (info.task if info else "")),
        model=str(training.get("model") or train.get("model") or ""),
        model_options=dict(train.get("model_options") or {}),
        dataset=dataset,
        source=source.uri if source else "",
        source_format=source.format if source else "",
        fingerprint=training.get("dataset_fingerprint") or (source.fingerprint if source else None) or None,
        convert=dict(info.config) if info else {},
    )


def _can_start(folder: str) -> bool:
    """Whether a folder holds what a training starts from (``model.keras``, or a detector's ``preset/``)."""
    from trainer import model_folder

    if not folder:
        return False
    return storage.exists(storage.join(folder, model_folder.KERAS_MODEL)) or storage.isdir(
        model_folder.preset_dir(folder)
    )


def warm_start_settings(served: Served) -> tuple[dict[str, Any], str, str]:
    """(model options, train config YAML, a line) for a training that starts from the served model.

    A detector starts from its ``preset/`` (its ``model_options.weights``); any other model from
    its ``model.keras`` (``TrainConfig.warm_start``). Neither there: the builder's initial weights.
    """
    from trainer import model_folder

    options = dict(served.model_options)
    if served.warm_start is None:
        return options, "", f"cold start: {served.who} left no model.keras or preset/ to start from"
    preset = model_folder.preset_dir(served.warm_start)
    if storage.isdir(preset):
        return {**options, "weights": preset}, "", f"warm start from {served.who} ({preset})"
    return options, f"warm_start: {served.warm_start}\n", f"warm start from {served.who} ({served.warm_start})"


def delta_parent(served: Served, source: str) -> tuple[str, str]:
    """(the dataset a retraining's conversion grows from, a line): the served model's dataset when
    it can be a parent (the same source, converted with the retraining's settings, its keys listed
    and its own parents there); else ("", why the whole source is converted).
    """
    from trainer.tfrecords import KEYS_NAME, DatasetError, load_dataset_info

    dataset = served.dataset
    whole = "convert the whole source"
    if not dataset or source != served.source:
        return "", f"{whole}: it is not the one {served.who} was trained on"
    if any(served.convert.get(name) for name in ("compression", "resize")):
        return "", f"{whole}: {dataset} was compressed or resized, which the retraining's conversion does not do"
    try:
        load_dataset_info(dataset)
    except DatasetError as err:
        return "", f"{whole}: {err}"
    if not storage.exists(storage.join(dataset, KEYS_NAME)):
        return "", f"{whole}: {dataset} lists no keys ({KEYS_NAME}; converted before datasets could grow by deltas)"
    return dataset, f"convert only what {dataset} lacks (a delta: its records are reused, not read)"


def source_fingerprint(uri: str, kind: Optional[str] = None) -> str:
    """The source's fingerprint as the convert step computes it (listed, no image read).

    Raises:
        RetrainError: the source cannot be read (nothing is converted).
    """
    from components.image_input.sources import SourceError, open_source

    try:
        return open_source(uri, kind).fingerprint
    except (SourceError, OSError) as err:
        raise RetrainError(
            f"source {uri} cannot be read ({' '.join(str(err).split())}); fix the path or its permissions "
            "(nothing was converted)"
        ) from None


def read_drift(where: str) -> Optional[Drift]:
    """The drift record at ``where`` (a ``drift.json``, or a folder: its newest ``*.json`` by name); None: none.

    Read defensively: an ``alarm`` boolean and a ``checks`` list; a record without them raises no alarm.

    Raises:
        RetrainError: the file is there but is not JSON.
    """
    import json

    path = where
    if not where.endswith(".json"):
        names = sorted(n for n in storage.list_files(where) if n.endswith(".json")) if storage.isdir(where) else []
        if not names:
            return None
        path = storage.join(where, names[-1])
    try:
        data = storage.read_json(path)
    except json.JSONDecodeError as err:
        raise RetrainError(f"drift record {path} is not JSON ({err}); fix or remove it") from None
    if not isinstance(data, Mapping):
        return None
    checks = data.get("checks") if isinstance(data.get("checks"), list) else []
    return Drift(path, data.get("alarm") is True, tuple(checks))


def default_drift(stages_root: str, model_name: str) -> str:
    """Where the served model's drift records are: ``<stages root>/prod/drift/<model name>/``."""
    return storage.join(stages_root, "prod", DRIFT_DIR, model_name)


def _new_data_reason(served: Served, source: str, fingerprint: str) -> Optional[str]:
    """Why the source is new data for the served model; None: it is the data it was trained on."""
    if served.fingerprint is None:
        return (
            f"{served.who} records no fingerprint of its training data (trained before fingerprints were "
            f"recorded): {source} is treated as new data"
        )
    if fingerprint != served.fingerprint:
        was = served.fingerprint[:12]
        return f"{source} changed since {served.who} was trained (fingerprint {fingerprint[:12]}, was {was})"
    return None


def _candidate_waiting(stages_root: str, model_name: str, fingerprint: str) -> Optional[str]:
    """Why demo's candidate already is the retraining of this data (it waits for its promotion); None: it is not."""
    from components.serving.stages import StageRegistry

    entry = StageRegistry(stages_root).read_current("demo", model_name)
    if entry is None or entry.version is None or not entry.model_uri:
        return None
    candidate = _trained_on(model_name, "demo", entry.version, entry.model_uri, entry.task)
    if candidate.fingerprint != fingerprint:
        return None
    return (
        f"{candidate.who} was trained on this data already and waits for its promotion (the promote "
        "pipeline moves it to staging and prod)"
    )


def _drift_reason(served: Served, drift: Optional[Drift]) -> Optional[str]:
    if drift is None or not drift.alarm:
        return None
    checks = ", ".join(drift.alarmed()) or "no check named"
    return (
        f"drift alarm on {served.who} ({checks}; {drift.file}) and no new data: retraining on the same data "
        "cannot fix drift; label new images (make select) and run again"
    )


def gate_thresholds(config: RetrainConfig, task: str) -> tuple[dict[str, float], dict[str, float]]:
    """The gate's value and change thresholds: the config's, else the task's run-form defaults."""
    from trainer.tasks import get_task  # the task table only: no TensorFlow

    the_task = get_task(task or None)
    values = dict(config.value_thresholds) or dict(the_task.default_value_thresholds)
    changes = dict(config.change_thresholds) or dict(the_task.run_defaults.form.get("change_thresholds") or {})
    return values, changes


def decide(config: RetrainConfig, pipeline_root: str = "") -> Decision:
    """Whether the retraining has anything to do (the module docstring), and why.

    Raises:
        RetrainError: no served model, or a source that cannot be read.
    """
    from components.serving.stages import resolve_stages_root

    stages_root = resolve_stages_root(config.stages_root, pipeline_root)
    served = served_model(stages_root, config.served_model_name)
    source = config.source or served.source
    if not source:
        raise RetrainError(
            f"{served.who} records no source ({served.dataset or 'no dataset'}): give the source to retrain "
            "from (DATA=)"
        )
    same_source = source == served.source
    fingerprint = source_fingerprint(source, served.source_format if same_source and served.source_format else None)
    drift = read_drift(config.drift or default_drift(stages_root, config.served_model_name))
    new = _new_data_reason(served, source, fingerprint)
    drifted = None if new else _drift_reason(served, drift)
    waiting = _candidate_waiting(stages_root, config.served_model_name, fingerprint) if new else None
    if waiting:
        action, reason = NOTHING, f"nothing to do: {waiting}"
    elif new:
        action, reason = RETRAIN, f"retrain: {new}"
    elif drifted:
        action, reason = DRIFT, drifted
    else:
        action, reason = NOTHING, f"nothing to do: {source} is the data {served.who} was trained on, and no drift alarm"
    time_budget, cost_budget = split_budget(config.retrain_budget)
    value_thresholds, change_thresholds = gate_thresholds(config, served.task)
    model_options, train_yaml, warm = warm_start_settings(served)
    parent, conversion = delta_parent(served, source) if action == RETRAIN else ("", "")
    read = None if drift is None else {"file": drift.file, "alarm": drift.alarm, "checks": list(drift.checks)}
    return Decision(
        action=action, reason=reason, model_name=config.served_model_name, stage=served.stage,
        version=served.version, task=served.task, model=served.model, model_options=model_options,
        source=source, fingerprint=fingerprint, trained_fingerprint=served.fingerprint,
        limit_per_split=int(served.convert.get("limit_per_split") or 0),
        split_by=str(served.convert.get("split_by") or "path"), time_budget=time_budget, cost_budget=cost_budget,
        value_thresholds=value_thresholds, change_thresholds=change_thresholds, train_config_yaml=train_yaml,
        warm=warm, promote_to=config.promote_to, drift=read, parent=parent, conversion=conversion,
    )  # fmt: skip


def describe(decision: Decision) -> list[str]:
    """The decision for the console and the report: the reason first."""
    lines = [decision.reason]
    if decision.action == RETRAIN:
        budget = decision.time_budget if decision.time_budget != "auto" else f"${decision.cost_budget}"
        lines.append(
            f"then: convert {decision.source}, train {decision.model or 'the task model'} within {budget}, "
            f"gate against {decision.stage}, promote to {_stages_up_to(decision.promote_to)}"
        )
        lines.append(decision.warm)
        lines.append(decision.conversion)
    else:
        lines.append("accelerator time: $0.00 (no step asked for one)")
    return lines


def _stages_up_to(last: str) -> str:
    """``demo``, ``demo -> staging`` or ``demo -> staging -> prod``."""
    from components.retrain.config import PROMOTE_TO

    return " -> ".join(PROMOTE_TO[: PROMOTE_TO.index(last) + 1])


def report_markdown(decision: Decision) -> str:
    """The decision as the step's Markdown output (the Kubeflow UI shows it)."""
    drift = decision.drift
    rows = [
        ("action", decision.action), ("served", f"{decision.model_name}: {decision.stage} version {decision.version}"),
        ("source", decision.source), ("fingerprint now", decision.fingerprint),
        ("trained on", decision.trained_fingerprint or "not recorded"),
        ("drift", "none found" if drift is None else f"alarm: {drift['alarm']} ({drift['file']})"),
    ]  # fmt: skip
    table = "\n".join(f"| {name} | {value} |" for name, value in rows)
    return f"# Retrain: {decision.action}\n\n{decision.reason}\n\n| | |\n|---|---|\n{table}\n"


def write_outputs(decision: Decision, **paths: str) -> None:
    """Writes the decision's values a retraining's steps take, each to its output parameter's file
    (``source``, ``model``, ``model_options``, ``limit_per_split``, ``split_by``, ``time_budget``,
    ``cost_budget``, ``value_thresholds``, ``change_thresholds``, ``train_config_yaml``, ``parent``,
    ``reason``):
    text as it is, the rest as JSON, as KFP reads them.
    """
    import json

    values = decision.to_dict()
    for name, path in paths.items():
        value = values[name]
        with open(path, "w", encoding="utf-8") as f:
            f.write(value if isinstance(value, str) else json.dumps(value))


def publish(decision: Decision, folder: str) -> str:
    """Writes ``decision.json`` under ``folder`` (whole, atomically); returns its path."""
    path = storage.join(folder, DECISION_FILE)
    storage.write_json(path, decision.to_dict())
    return path
