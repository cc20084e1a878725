"""The validate step: checks a converted dataset before training, and publishes what it found.

:func:`validate` reads every record once (its features, never its image bytes; no TensorFlow),
builds the dataset's statistics (:mod:`components.validate.stats`) and runs the checks
(:mod:`components.validate.checks`): leakage and label conflicts, empty and rare classes,
degenerate boxes, size outliers, and, given a baseline ``stats.json``, drift since it. The policy
gives each finding its severity; any ``error`` fails the validation. It writes nothing:
:func:`publish` writes ``stats.json`` (the next validation's baseline), ``report.md`` (a Markdown
table for the Kubeflow UI) and ``validation.json`` (the findings, the policy, the counts and the
verdict), the last one last.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Optional

from components import markdown
from components.validate import policy as kinds
from components.validate.checks import Finding, Findings, RecordChecks, drift_findings
from components.validate.config import MAX_COLUMN_VALUES, ValidateConfig
from components.validate.near import find_near_duplicates
from components.validate.stats import STATS_NAME, DatasetStats, StatsBuilder, StatsError, read_stats, view_of
from trainer import records, storage
from trainer.tfrecord_read import iter_split_features
from trainer.tfrecords import MANIFEST_NAME, DatasetError, DatasetInfo, load_dataset_info

VALIDATION_NAME = "validation.json"
REPORT_NAME = "report.md"
NO_BASELINE = "no baseline given: drift checks skipped"


@dataclasses.dataclass(frozen=True)
class ValidationResult(records.Record):
    """What a validation found: ``validation.json``.

    Attributes:
        dataset: the dataset folder.
        passed: no finding has severity ``error``.
        policy: every kind's severity, as applied.
        counts: severity -> findings.
        findings: the findings, errors first.
        notes: what was not checked, and why.
        baseline: the baseline ``stats.json`` compared with, None without one.
        allowlisted: record keys on the allowlist.
        stats: the dataset's statistics (``stats.json``; not part of ``validation.json``).
    """

    dataset: str
    passed: bool
    policy: dict[str, str]
    counts: dict[str, int]
    findings: tuple[Finding, ...]
    notes: tuple[str, ...]
    baseline: Optional[str]
    allowlisted: int
    stats: Optional[DatasetStats] = records.field(data=False, default=None, compare=False)

    def errors(self) -> list[Finding]:
        """The findings of severity ``error``."""
        return [f for f in self.findings if f.severity == kinds.ERROR]


def baseline_path(baseline: str) -> str:
    """The ``stats.json`` a baseline setting names: the file itself, or inside the folder given."""
    return baseline if baseline.endswith(".json") else storage.join(baseline, STATS_NAME)


def scan(info: DatasetInfo, config: ValidateConfig, findings: Findings) -> tuple[DatasetStats, RecordChecks]:
    """Reads every record of every split once: the statistics, and the record checks' state.

    Raises:
        DatasetError: a shard is missing, corrupt or malformed.
    """
    builder = StatsBuilder(info, config.max_column_values)
    checks = RecordChecks(config, info.classes, findings)
    for split in info.splits:
        for features in iter_split_features(info, split):
            view = view_of(features, split, info.classes)
            builder.add(view)
            checks.add(view)
    return builder.stats(), checks


def dataset_stats(dataset_dir: str, column_values: int = MAX_COLUMN_VALUES) -> DatasetStats:
    """A converted dataset's statistics alone (a baseline: the dataset a served model was trained on).

    Raises:
        DatasetError: the folder is not a dataset, or a shard is missing, corrupt or malformed.
    """
    info = load_dataset_info(dataset_dir)
    builder = StatsBuilder(info, column_values)
    for split in info.splits:
        for features in iter_split_features(info, split):
            builder.add(view_of(features, split, info.classes))
    return builder.stats()


def is_dataset(where: str) -> bool:
    """Whether a baseline names a converted dataset (``dataset.json`` inside) rather than a ``stats.json``."""
    return not where.endswith(".json") and storage.exists(storage.join(where, MANIFEST_NAME))


def read_baseline(where: str, column_values: int = MAX_COLUMN_VALUES) -> DatasetStats:
    """A baseline's statistics: an earlier validation's ``stats.json`` (or its folder), or a
    converted dataset (``dataset.json`` inside), whose statistics are computed here.

    Raises:
        StatsError: neither can be read (the message names the path).
    """
    if is_dataset(where):
        try:
            return dataset_stats(where, column_values)
        except DatasetError as err:
            raise StatsError(f"{where}: {err}") from None
    return read_stats(baseline_path(where))


def served_baseline(stages_root: str, model_name: str) -> tuple[Optional[str], str]:
    """The dataset prod (else staging) serves a model trained on, from its ``training.json``.

    Returns:
        (the dataset's URI, a note naming the stage and version), or (None, why there is none).
    """
    from components.serving.stages import StageRegistry

    registry = StageRegistry(stages_root)

    for stage in ("prod", "staging"):
        entry = registry.read_current(stage, model_name)
        if entry is None or entry.version is None:
            continue
        who = f"{stage}'s {model_name} version {entry.version}"
        training = storage.read_json(storage.join(entry.model_uri, "training.json")) if entry.model_uri else None
        dataset = (training or {}).get("dataset")
        if not dataset:
            return (
                None,
                f"{who} records no training dataset ({entry.model_uri or 'no model folder'}): drift checks skipped",
            )
        return dataset, f"baseline: the dataset {who} was trained on"
    return None, f"no prod or staging model {model_name!r} to compare with: drift checks skipped"


def validate(
    dataset_dir: str,
    config: Optional[ValidateConfig] = None,
    baseline_note: Optional[str] = None,
    on_progress: Optional[Callable[[int, int], None]] = None,
) -> ValidationResult:
    """Checks a converted dataset; writes nothing (see :func:`publish`).

    Args:
        dataset_dir: the dataset folder (``dataset.json`` inside), local or gs://.
        config: the baseline, policy, allowlist and thresholds; None for the defaults.
        baseline_note: where the baseline came from, or why there is none (:func:`served_baseline`);
            None: the config's baseline, or none given.
        on_progress: ``(images hashed, images)`` while the opt-in near-duplicate check decodes.

    Returns:
        The findings, the verdict and the statistics. An unreadable baseline is a
        ``baseline_unreadable`` finding, not an error.

    Raises:
        DatasetError: the folder is not a dataset, or a shard is missing, corrupt or malformed.
    """
    config = config or ValidateConfig()
    info = load_dataset_info(dataset_dir)
    policy = kinds.resolve_policy(config.validation_policy)
    findings = Findings(policy, config.allow, config.max_records)
    stats, checks = scan(info, config, findings)
    checks.finish(stats)
    if config.near_duplicates:
        find_near_duplicates(info, config.near_duplicate_bits, findings, on_progress)
    notes: list[str] = [baseline_note] if baseline_note else []
    where = config.baseline
    if where is not None and not is_dataset(where):
        where = baseline_path(where)
    if where is None:
        notes.extend([] if baseline_note else [NO_BASELINE])
    else:
        try:
            drift_findings(stats, read_baseline(where, config.max_column_values), where, checks, findings)
        except StatsError as err:
            findings.add(kinds.BASELINE_UNREADABLE, f"cannot read the baseline {where}: {err}; drift checks skipped")
            notes.append(f"baseline {where} unreadable: drift checks skipped")
    order = {level: i for i, level in enumerate(kinds.LEVELS)}
    found = tuple(sorted(findings.items, key=lambda f: order[f.severity]))
    return ValidationResult(
        dataset=info.where,
        passed=not any(f.severity == kinds.ERROR for f in found),
        policy=policy,
        counts={level: sum(f.severity == level for f in found) for level in kinds.LEVELS},
        findings=found,
        notes=tuple(notes),
        baseline=where,
        allowlisted=len(set(config.allow)),
        stats=stats,
    )


# --------------------------------------------------------------------------------------------
# Publishing
# --------------------------------------------------------------------------------------------


def _records_cell(finding: Finding) -> str:
    if not finding.count:
        return ""
    shown = ", ".join(finding.records[:3])
    more = finding.count - min(len(finding.records), 3)
    return shown + (f" (+{more:,})" if more > 0 else "")


def _split_rows(stats: DatasetStats) -> list[list[str]]:
    rows = []
    for name, split in stats.splits.items():
        size = "" if split.height.median is None else f"{split.height.median:g}x{split.width.median:g}"
        boxes = "" if split.boxes is None else f"{split.boxes.boxes:,}"
        present = sum(1 for n in split.class_counts.values() if n)
        rows.append([name, f"{split.count:,}", f"{present} of {len(split.class_counts)}", size, boxes])
    return rows


def report_markdown(result: ValidationResult) -> str:
    """The Markdown report: the verdict, a table of the findings, the splits at a glance."""
    verdict = "passed" if result.passed else "FAILED"
    counts = ", ".join(f"{n} {level}" for level, n in result.counts.items())
    lines = [f"# Dataset validation: {verdict}", "", f"Dataset `{result.dataset}`: {counts}.", ""]
    if result.baseline:
        lines += [f"Baseline: `{result.baseline}`.", ""]
    lines += [f"- {note}" for note in result.notes] + ([""] if result.notes else [])
    if result.findings:
        rows = [
            [f.severity, f.kind, f.split or "", f"{f.count:,}" if f.count else "", _records_cell(f), f.message]
            for f in result.findings
        ]
        lines += markdown.table(["severity", "kind", "split", "records", "examples", "finding"], rows, "lllrll")
    else:
        lines.append("No findings.")
    if result.stats is not None:
        rows = _split_rows(result.stats)
        lines += ["", "## Splits", ""]
        lines += markdown.table(["split", "images", "classes present", "median size", "boxes"], rows, "lrrrr")
    return "\n".join(lines) + "\n"


def publish(result: ValidationResult, output_dir: str) -> list[str]:
    """Writes ``stats.json``, ``report.md`` and, last, ``validation.json`` under ``output_dir``.

    Each file is written whole (local or gs://); an earlier ``validation.json`` is deleted first and
    the new one written last, so a folder that has it has the other two of the same validation.

    Args:
        result: what :func:`validate` returned.
        output_dir: the folder (created if needed).

    Returns:
        The paths written, in order.

    Raises:
        ValueError: ``result`` carries no statistics (it was read back from ``validation.json``).
    """
    if result.stats is None:
        raise ValueError("this result has no statistics; publish what validate() returned")
    paths = [storage.join(output_dir, name) for name in (STATS_NAME, REPORT_NAME, VALIDATION_NAME)]
    storage.makedirs(output_dir)
    storage.delete(paths[2])  # an earlier verdict must not stand beside new statistics
    storage.write_json(paths[0], result.stats.to_dict())
    storage.write_text(paths[1], report_markdown(result))
    storage.write_json(paths[2], result.to_dict())
    return paths


class ValidationFailed(ValueError):
    """A finding of severity ``error``: the step stops before any accelerator is paid for."""


def config_from_params(
    validation_policy: Any, allow: Any, baseline: str, near_duplicates: bool = False
) -> ValidateConfig:
    """The step's config from a component's parameters (``""`` and empty stand in for none).

    Raises:
        ConfigError: a policy naming an unknown kind or level, and what else the config refuses.
    """
    return ValidateConfig.from_dict(
        {
            "validation_policy": dict(validation_policy or {}),
            "allow": list(allow or []),
            "baseline": baseline or None,
            "near_duplicates": bool(near_duplicates),
        }
    )


def check_passed(result: ValidationResult) -> None:
    """Raises when a finding is an ``error``; its message has one line per such finding and the way out.

    Raises:
        ValidationFailed: the errors.
    """
    errors = result.errors()
    if not errors:
        return
    lines = [f"{f.kind}: {f.message}" for f in errors]
    raise ValidationFailed(
        f"the dataset failed validation ({len(errors)} error finding(s)):\n  " + "\n  ".join(lines) + "\nFix the "
        "data (convert with split_by=content, which keeps copies of an image in one split, or remove the copies), "
        "or set validation_policy (kind: warn) or allow the records' keys (docs/validation.md)"
    )
