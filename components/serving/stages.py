"""The stage store: model versions, what each stage serves, and its history (docs/CONTRACTS.md).

A stage serves several models side by side, each under its own name, and keeps its records per
model name. Layout under the store's root (a local folder or gs://)::

    <stage>/models/<model_name>/<version>/              SavedModel in TensorFlow Serving's layout
    <stage>/models/<model_name>/<version>/portable/     the portable format it is served in, if not the
                                                        SavedModel (``components.serving.portable``)
    <stage>/records/<model_name>/current.json           what the stage serves of this model (an entry)
    <stage>/records/<model_name>/history.jsonl          one JSON line per promotion or rollback
    <stage>/records/<model_name>/smoke_examples.json    the known examples of its last promotion
    <stage>/published.json                              hash and source of each published version, by model
    <stage>/retired/<model_name>/<version>/             versions taken out of service by a rollback
    <stage>/warm_start/<model_name>/<version>/          what a later training starts from (model.keras,
                                                        preset/): a run's outputs may expire, these stay

:class:`StageRegistry` is the store under one root: a step builds it once from its stages root
and hands it to its serving target. The models a stage serves are those with a ``current.json``
that serves a version (:meth:`StageRegistry.served_models`): the local model server and
TensorFlow Serving's model config list are built from them. TensorFlow Serving serves the newest
version under ``models/<model_name>``, so a rollback moves the version it leaves to ``retired/``;
version numbers only grow (a later promotion never reuses a retired number). Each record is one
whole-file write (one GCS object).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
from collections.abc import Mapping
from typing import Any, Optional

from components.params import none_if_empty
from components.serving.checks import CheckResult, KnownExample, checks_from_dict, checks_to_dict
from components.serving.config import STAGES
from components.serving.contract import ServingContract
from components.serving.load import LoadTestRecord
from trainer import records, storage
from trainer.tasks import get_task

ACTIONS = ("promote", "rollback")
READY_MARKER = "saved_model.pb"
EXAMPLES_FILE = "smoke_examples.json"
CURRENT_FILE = "current.json"
HISTORY_FILE = "history.jsonl"
PUBLISHED_FILE = "published.json"
RECORDS_DIR = "records"
WARM_START_DIR = "warm_start"


def resolve_stages_root(stages_root: Optional[str], pipeline_root: str) -> str:
    """Return the stages root: ``stages_root`` if given, else ``<pipeline_root>/stages``.

    Args:
        stages_root: a folder or gs:// URI; None (or a pipeline's "") derives it from the pipeline root.
        pipeline_root: the pipeline's root (``dsl.PIPELINE_ROOT_PLACEHOLDER`` at run time).

    Raises:
        ValueError: both are empty.
    """
    stages_root = none_if_empty(stages_root)
    if stages_root is not None:
        return stages_root
    if not pipeline_root:
        raise ValueError(
            "no stages root: stages_root is empty and so is pipeline_root; pass stages_root "
            "(a folder or gs:// URI) or the pipeline root it defaults under"
        )
    return storage.join(pipeline_root, "stages")


def _check_stage(stage: str) -> None:
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}: expected one of {list(STAGES)}")


def _check_model_name(model_name: str) -> None:
    # The name becomes a folder and a URL part (/v1/models/<name>).
    if not isinstance(model_name, str) or not model_name or "/" in model_name or ":" in model_name:
        raise ValueError(f"model_name must be a non-empty name without '/' or ':', got {model_name!r}")


def _numeric(names: list[str]) -> list[int]:
    return sorted(int(n) for n in names if n.isdigit())


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


@dataclasses.dataclass(frozen=True)
class StageEntry(records.Record):
    """One line of a model's ``history.jsonl`` at a stage; the latest one serving a version is ``current.json``.

    On disk it is the JSON object of :meth:`to_dict` (docs/CONTRACTS.md): a forward-compatible
    record, whose keys written by a newer version are kept in ``extra`` and written back. The
    keys ``version``, ``model_uri``, ``model_name``, ``run``, ``time``, ``action``, ``checks`` and
    ``metrics`` are always there; the others only when set.

    Attributes:
        action: ``promote`` or ``rollback``.
        version: the version the stage serves after the action; None when it serves nothing
            (the first promotion failed and was rolled back).
        model_uri: the model folder the version came from ("" when unknown).
        run: the pipeline run (job name) that acted.
        time: when, ISO 8601 in UTC.
        model_name: the served model name.
        checks: the serving checks and their results.
        metrics: the model's evaluation metrics (prod's are the gate's baseline).
        sha256: the content hash of the version's SavedModel.
        previous_version: what the stage served before a promotion.
        accuracy: the share of known examples the prediction check got right.
        target: the serving target's name (``components.serving.targets``).
        task: the model's task (``trainer.tasks``), whose serving checks ran; None in entries
            written before the task was recorded.
        source_stage, source_version: where a version promoted from another stage came from.
        reason: why a rollback happened.
        failed_version: the version a rollback took out of service.
        verified: whether the version rolled back to passed its checks again.
        load_test: the load test the served version ran at this action (p50/p95/p99, rate,
            errors, and the stage's objectives); on a rollback, the restored version's.
        failed_load_test: on a rollback after a failed promotion, the failed version's load
            test when it ran (a missed objective is such a failure).
        contract: what clients of the served version rely on: its signatures' inputs and output
            keys, its class names in order (``components.serving.contract``); a promotion keeps
            it. None in entries written before it was recorded (the served version's SavedModel
            says it then) and where nothing is served.
        contract_change: on a promotion that replaced the contract (``allow_contract_change``),
            the line that names the change; None otherwise.
        formats: the portable formats the version's export passed (``export/export.json``'s
            ``passed``, best images per dollar first), empty where it has no export.
        serving_format: the form the version is served in (``saved_model`` or one of ``formats``:
            ``components.serving.portable``); None in entries written before it was recorded, read
            as ``saved_model``. A rollback entry carries the form of the version it returns to.
        extra: keys this code does not know (written by a newer version), kept as they were.
    """

    _mode = records.FORWARD_COMPATIBLE
    _what = "stage history entry"
    _omit_empty = (
        "sha256", "previous_version", "accuracy", "target", "task", "source_stage", "source_version", "reason",
        "failed_version", "verified", "load_test", "failed_load_test", "contract", "contract_change", "formats",
        "serving_format",
    )  # fmt: skip

    action: str
    version: Optional[int]
    model_uri: str
    run: str
    time: str = dataclasses.field(default_factory=lambda: _now())
    model_name: Optional[str] = None
    checks: tuple[CheckResult, ...] = records.field(default=(), dump=checks_to_dict, load=checks_from_dict)
    metrics: Mapping[str, float] = dataclasses.field(default_factory=dict)
    sha256: Optional[str] = None
    previous_version: Optional[int] = None
    accuracy: Optional[float] = None
    target: Optional[str] = None
    task: Optional[str] = None
    source_stage: Optional[str] = None
    source_version: Optional[int] = None
    reason: Optional[str] = None
    failed_version: Optional[int] = None
    verified: Optional[bool] = None
    load_test: Optional[LoadTestRecord] = None
    failed_load_test: Optional[LoadTestRecord] = None
    contract: Optional[ServingContract] = None
    contract_change: Optional[str] = None
    formats: tuple[str, ...] = ()
    serving_format: Optional[str] = None
    extra: Mapping[str, Any] = records.extra_field()

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"unknown action {self.action!r}: expected one of {list(ACTIONS)}")

    @property
    def checks_passed(self) -> bool:
        """The entry has checks and every one passed."""
        return bool(self.checks) and all(c.passed for c in self.checks)

    @classmethod
    def from_dict(cls, data: Optional[Mapping[str, Any]], _prefix: str = "") -> StageEntry:
        """Reads an entry of any version (the first ones could leave ``model_uri`` out: read as "").

        Raises:
            RecordError: a required key (action, version, run) is missing, or a value is malformed.
        """
        if isinstance(data, Mapping) and not data.get("model_uri"):
            data = {**data, "model_uri": ""}
        return super().from_dict(data, _prefix)

    def to_json(self, indent: Optional[int] = None) -> str:
        """:meth:`to_dict` as JSON, keys sorted (one line without ``indent``)."""
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> StageEntry:
        """The inverse of :meth:`to_json`."""
        return cls.from_dict(json.loads(text))


@dataclasses.dataclass(frozen=True)
class StageExamples(records.Record):
    """The known examples a model was last promoted to a stage with (``records/<model_name>/smoke_examples.json``).

    Kept with the stage so that a rollback or a move to the next stage, which have no dataset,
    run the same prediction check. On disk: ``{"task": ..., "examples": [{"b64": ..., "expected":
    ...}]}``, each answer as the task writes it (``Task.expected_to_json``).

    Attributes:
        task: the task whose answers ``examples`` hold.
        examples: the known examples.
    """

    _what = "known examples"

    task: str
    examples: tuple[KnownExample, ...]

    def to_dict(self) -> dict[str, Any]:
        """The file's JSON: the answers as the task writes them."""
        task = get_task(self.task)
        answers = tuple(dataclasses.replace(e, expected=task.expected_to_json(e.expected)) for e in self.examples)
        return records.Record.to_dict(dataclasses.replace(self, examples=answers))

    @classmethod
    def from_dict(cls, data: Optional[Mapping[str, Any]], _prefix: str = "") -> StageExamples:
        """The inverse of :meth:`to_dict`: the answers as the task reads them."""
        read = super().from_dict(data, _prefix)
        task = get_task(read.task)
        answers = tuple(dataclasses.replace(e, expected=task.expected_from_json(e.expected)) for e in read.examples)
        return cls(task=task.name, examples=answers)


@dataclasses.dataclass(frozen=True)
class StageRegistry:
    """The stage store under one root: its folders, versions and records.

    Attributes:
        root: the store's root, a local folder or gs:// URI (``PromoteConfig.stages_root``).

    Raises:
        ValueError: ``root`` is empty.
    """

    root: str

    def __post_init__(self) -> None:
        if not isinstance(self.root, str) or not self.root:
            raise ValueError(f"a stage registry needs a root (a folder or gs:// URI), got {self.root!r}")

    # ------------------------------------------------------------------ where things are

    def stage_dir(self, stage: str) -> str:
        """Return ``<root>/<stage>``."""
        _check_stage(stage)
        return storage.join(self.root, stage)

    def records_dir(self, stage: str, model_name: str) -> str:
        """Return ``<stage>/records/<model_name>``: the model's current.json, history and known examples."""
        _check_model_name(model_name)
        return storage.join(self.stage_dir(stage), RECORDS_DIR, model_name)

    def models_dir(self, stage: str) -> str:
        """Return ``<stage>/models``: one base path per served model inside."""
        return storage.join(self.stage_dir(stage), "models")

    def model_base_path(self, stage: str, model_name: str) -> str:
        """Return the folder a model server serves for a stage: ``<stage>/models/<model_name>``."""
        return storage.join(self.models_dir(stage), model_name)

    def version_path(self, stage: str, model_name: str, version: int) -> str:
        """Return ``<stage>/models/<model_name>/<version>``."""
        return storage.join(self.model_base_path(stage, model_name), str(version))

    def list_versions(self, stage: str, model_name: str) -> list[int]:
        """Return the complete versions (with ``saved_model.pb``) in service at a stage, ascending."""
        base = self.model_base_path(stage, model_name)
        names = _numeric(storage.list_dirs(base))
        return [v for v in names if storage.exists(storage.join(base, str(v), READY_MARKER))]

    # ------------------------------------------------------------------ versions

    def publish(self, saved_model_dir: str, stage: str, model_name: str, serving_format: str = "saved_model") -> int:
        """Publish a SavedModel to a stage as a new numbered version; idempotent for the same content.

        The files are copied with ``saved_model.pb`` last, because a model server treats a version
        folder as ready once that file is there. If the newest version in service already has the
        same content (sha256 over paths and bytes) to be served in the same form, its number is
        returned and nothing is copied; another form is another version (a rollback returns to the
        form served before).

        Args:
            saved_model_dir: the SavedModel folder (local or gs://).
            stage: ``demo``, ``staging`` or ``prod``.
            model_name: the served model name.
            serving_format: the form the version is to be served in (``components.serving.portable``
                writes a portable one into the version folder after this).

        Returns:
            The version number now newest at the stage for this content.

        Raises:
            FileNotFoundError: ``saved_model_dir`` holds no ``saved_model.pb``.
        """
        _check_stage(stage)
        if not storage.exists(storage.join(saved_model_dir, READY_MARKER)):
            raise FileNotFoundError(
                f"{saved_model_dir} holds no {READY_MARKER}: pass a SavedModel folder (the model "
                "artifact's saved_model/ written by trainer.tasks.classification.export.export_saved_model)"
            )
        sha = storage.tree_sha256(saved_model_dir)
        base = self.model_base_path(stage, model_name)
        published = storage.read_json(storage.join(self.stage_dir(stage), PUBLISHED_FILE)) or {}
        known = published.setdefault(model_name, {})
        in_service = self.list_versions(stage, model_name)
        newest = known.get(str(in_service[-1]), {}) if in_service else {}
        if newest.get("sha256") == sha and newest.get("serving_format", "saved_model") == serving_format:
            return in_service[-1]
        # A folder without the ready marker is a copy that was interrupted: nothing serves it.
        for name in _numeric(storage.list_dirs(base)):
            if name not in in_service:
                storage.delete_tree(storage.join(base, str(name)))
        retired = _numeric(storage.list_dirs(storage.join(self.stage_dir(stage), "retired", model_name)))
        version = max([0, *in_service, *retired, *(int(v) for v in known)]) + 1
        storage.publish_tree(saved_model_dir, storage.join(base, str(version)), marker=READY_MARKER)
        known[str(version)] = {"sha256": sha, "source": saved_model_dir, "time": _now()}
        if serving_format != "saved_model":
            known[str(version)]["serving_format"] = serving_format
        text = json.dumps(published, indent=1, sort_keys=True)
        storage.write_text(storage.join(self.stage_dir(stage), PUBLISHED_FILE), text)
        return version

    def warm_start_dir(self, stage: str, model_name: str, version: int) -> str:
        """Return ``<stage>/warm_start/<model_name>/<version>``: what a training can start from."""
        _check_model_name(model_name)
        return storage.join(self.stage_dir(stage), WARM_START_DIR, model_name, str(version))

    def publish_warm_start(self, sources: list[str], stage: str, model_name: str, version: int) -> Optional[str]:
        """Copy what a later training starts from (``model.keras``, a detector's ``preset/``) beside a version.

        Args:
            sources: model folders (or earlier warm-start folders) to copy from: the first that
                has any of those files; the others are not looked at.
            stage: the version's stage.
            model_name: its served model name.
            version: the version they go with.

        Returns:
            The folder they were copied to, or None when no source has them (nothing is copied).
        """
        from trainer import model_folder

        for source in sources:
            keras_file = storage.join(source, model_folder.KERAS_MODEL)
            preset = storage.join(source, model_folder.PRESET)
            has_keras, has_preset = storage.exists(keras_file), storage.isdir(preset)
            if not (has_keras or has_preset):
                continue
            target = self.warm_start_dir(stage, model_name, version)
            if has_preset:
                storage.copy_tree(preset, storage.join(target, model_folder.PRESET))
            if has_keras:  # last: a folder with model.keras is whole
                storage.copy_file(keras_file, storage.join(target, model_folder.KERAS_MODEL))
            return target
        return None

    def retire(self, stage: str, model_name: str, version: int) -> None:
        """Take a version out of service (move it to ``<stage>/retired/``), so the one before is newest.

        Raises:
            FileNotFoundError: the version is not in service at the stage.
        """
        src = self.version_path(stage, model_name, version)
        in_service = self.list_versions(stage, model_name)
        if version not in in_service:
            raise FileNotFoundError(
                f"version {version} of {model_name!r} is not in service at {stage} ({src}); in service: {in_service}"
            )
        dst = storage.join(self.stage_dir(stage), "retired", model_name, str(version))
        storage.delete_tree(dst)
        storage.move_tree(src, dst)

    # ------------------------------------------------------------------ records

    def read_current(self, stage: str, model_name: str) -> Optional[StageEntry]:
        """Return what a stage serves of a model now (its latest entry that serves a version), or None.

        The evaluation gate reads prod's entry for the model name it gates: its ``metrics`` are the
        baseline.
        """
        data = storage.read_json(storage.join(self.records_dir(stage, model_name), CURRENT_FILE))
        return None if data is None else StageEntry.from_dict(data)

    def _history_lines(self, stage: str, model_name: str) -> list[str]:
        try:
            text = storage.read_text(storage.join(self.records_dir(stage, model_name), HISTORY_FILE))
        except FileNotFoundError:
            return []
        return [line for line in text.splitlines() if line.strip()]

    def read_history(self, stage: str, model_name: str) -> list[StageEntry]:
        """Return a model's history entries at a stage, oldest first (empty if it has none)."""
        return [StageEntry.from_json(line) for line in self._history_lines(stage, model_name)]

    def record(self, stage: str, entry: StageEntry) -> StageEntry:
        """Append an entry to its model's history at a stage and, if it serves a version, make it current.

        Args:
            stage: the stage.
            entry: what happened; ``entry.model_name`` says whose records it goes to.

        Returns:
            ``entry``.

        Raises:
            ValueError: the entry names no model.
        """
        if entry.model_name is None:
            raise ValueError(
                f"a stage record needs model_name (records are kept per served model); got an entry of run "
                f"{entry.run!r} without one: pass StageEntry(..., model_name=<the served name>)"
            )
        folder = self.records_dir(stage, entry.model_name)
        lines = self._history_lines(stage, entry.model_name)
        # GCS objects cannot be appended to: rewrite whole (one writer per stage at a time).
        text = "".join(line + "\n" for line in [*lines, entry.to_json()])
        storage.write_text(storage.join(folder, HISTORY_FILE), text)
        if entry.version is not None:
            storage.write_text(storage.join(folder, CURRENT_FILE), entry.to_json(indent=1))
        return entry

    def served_models(self, stage: str) -> dict[str, StageEntry]:
        """Return every model a stage serves, by name (sorted): its current entry, which serves a version.

        This is the stage's registry: the local model server of a stage and TensorFlow Serving's
        model config list serve exactly these models, each at its entry's version.
        """
        names = storage.list_dirs(storage.join(self.stage_dir(stage), RECORDS_DIR))
        served = {}
        for name in sorted(names):
            current = self.read_current(stage, name)
            if current is not None and current.version is not None:
                served[name] = current
        return served

    def served_versions(self, stage: str) -> dict[str, int]:
        """Return what a stage serves by its records: model name -> version (sorted by name)."""
        return {name: entry.version for name, entry in self.served_models(stage).items() if entry.version is not None}

    def last_entry_for_version(self, stage: str, model_name: str, version: int) -> Optional[StageEntry]:
        """Return the latest history entry that put ``version`` of a model in service at a stage, or None."""
        for entry in reversed(self.read_history(stage, model_name)):
            if entry.version == version:
                return entry
        return None

    def save_examples(self, stage: str, model_name: str, examples: StageExamples) -> None:
        """Writes ``<stage>/records/<model_name>/smoke_examples.json``."""
        path = storage.join(self.records_dir(stage, model_name), EXAMPLES_FILE)
        storage.write_bytes(path, json.dumps(examples.to_dict()).encode())

    def load_examples(self, stage: str, model_name: str) -> StageExamples:
        """Reads a model's known examples at a stage.

        Raises:
            FileNotFoundError: the model has never been promoted to the stage.
        """
        path = storage.join(self.records_dir(stage, model_name), EXAMPLES_FILE)
        try:
            data = json.loads(storage.read_bytes(path))
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{path} not found: {model_name!r} has never been promoted to {stage}, so there is nothing to "
                "verify a rollback with"
            ) from None
        return StageExamples.from_dict(data)
