"""The gate's checks per slice: floors on a slice's metrics, and no slice much worse than prod's.

``slice_thresholds`` maps a selector to ``{metric: bound}``; the selector is a column, which
applies the bound to every scored slice of it (``camera``, ``class``, ``size``, ``area``), or one
slice (``camera:night``). A bound is a floor where higher is better and a ceiling for ``loss``,
as the value thresholds are. A column rule passes over slices too small to be scored, saying so;
a rule on one slice that is too small fails (fail closed: nothing judged it).

``slice_change_thresholds`` maps a metric to the least change every scored slice must show
against the same slice of the model prod serves (``{accuracy: -0.05}``: no slice may lose more
than five points), read from prod's record (``slice/<slice>/<metric>``, ``trainer/slices.py``).
A slice prod had no score for is skipped, and a prod record without slices (a model evaluated
before slices existed) skips the comparison with a note. Each failing slice is one reason line.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Optional

from components.evaluate.gate import Decision, GateCheck, ThresholdError
from trainer import slices as slicing
from trainer.slices import SliceRow


def check_settings(
    thresholds: Mapping[str, Mapping[str, Any]],
    changes: Mapping[str, Any],
    task: str,
    metrics: Sequence[str],
    columns: Collection[str],
) -> None:
    """Checks the slice rules' metrics, columns and values before anything is scored.

    Args:
        thresholds: ``slice_thresholds``.
        changes: ``slice_change_thresholds``.
        task: the task's name (for the message when it scores no slices).
        metrics: the task's slice metrics.
        columns: the columns there are (the records' extra columns and the task's built-in ones).

    Raises:
        ThresholdError: one line naming the unknown metric or column and those there are.
    """
    if (thresholds or changes) and not metrics:
        raise ThresholdError(f"task {task!r} scores no slices; remove slice_thresholds and slice_change_thresholds")
    rules = [("slice_thresholds", key, rule) for key, rule in thresholds.items()]
    for kind, key, rule in [*rules, ("slice_change_thresholds", "", changes)]:
        where = f"{kind}[{key!r}]" if key else kind
        for metric, bound in rule.items():
            if metric not in metrics:
                raise ThresholdError(
                    f"{where} names unknown slice metric {metric!r}; slice metrics of {task}: {', '.join(metrics)}"
                )
            if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound):
                raise ThresholdError(f"{where}[{metric!r}] must be a finite number, got {bound!r}")
        if key and slicing.column_of(key) not in columns:
            raise ThresholdError(
                f"slice_thresholds names column {slicing.column_of(key)!r}, which no slice has; "
                f"columns: {', '.join(sorted(columns))} (a rule is a column, or column:value)"
            )


def check_values(thresholds: Mapping[str, Any], rows: Sequence[SliceRow]) -> None:
    """Checks that each one-slice rule (``column:value``) names a slice the evaluation has.

    Raises:
        ThresholdError: the slice does not exist; the message lists the column's slices.
    """
    keys = {r.key for r in rows}
    for key in thresholds:
        column, sep, _ = key.partition(":")
        if sep and key not in keys:
            have = sorted(k for k in keys if slicing.column_of(k) == column)
            raise ThresholdError(
                f"slice_thresholds names slice {key!r}, which the split has not; {column}: {', '.join(have)}"
            )


def _bound_ok(value: float, bound: float, higher: bool) -> bool:
    return value >= bound if higher else value <= bound


def _threshold_checks(
    rows: Sequence[SliceRow], thresholds: Mapping[str, Mapping[str, float]], directions: Mapping[str, bool]
) -> tuple[list[GateCheck], list[str]]:
    checks: list[GateCheck] = []
    reasons: list[str] = []
    for selector, rule in thresholds.items():
        one = ":" in selector
        chosen = [r for r in rows if (r.key == selector if one else r.column == selector)]
        skipped = [r.key for r in chosen if not r.scored]
        for row in chosen:
            for metric, bound in rule.items():
                higher, op = directions.get(metric, True), ">=" if directions.get(metric, True) else "<="
                if not row.scored and not one:
                    continue
                value = row.metrics.get(metric)
                passed = value is not None and _bound_ok(value, bound, higher)
                checks.append(GateCheck("slice", metric, bound, value, None, passed, slice=row.key))
                if value is None:
                    reasons.append(
                        f"FAIL: slice {row.key} has {row.count} examples, too few to be scored, "
                        f"required {metric} {op} {bound:g}"
                    )
                elif not passed:
                    reasons.append(
                        f"FAIL: slice {row.key} {metric} = {value:.4f} ({row.count} examples), required {op} {bound:g}"
                    )
        passed_here = [
            c for c in checks if c.passed and (c.slice == selector or slicing.column_of(c.slice) == selector)
        ]
        if passed_here:
            reasons.append(f"PASS: {len(passed_here)} slice check(s) of {selector} {_rule_text(rule, directions)}")
        if skipped:
            reasons.append(
                f"note: {len(skipped)} slice(s) of {selector} too small to be scored: {', '.join(skipped[:5])}"
            )
    return checks, reasons


def _rule_text(rule: Mapping[str, float], directions: Mapping[str, bool]) -> str:
    return ", ".join(f"{m} {'>=' if directions.get(m, True) else '<='} {b:g}" for m, b in rule.items())


def _change_checks(
    rows: Sequence[SliceRow],
    changes: Mapping[str, float],
    baseline: Mapping[str, Any],
    directions: Mapping[str, bool],
) -> tuple[list[GateCheck], list[str]]:
    prod = slicing.parse_recorded(baseline)
    if not prod:
        return [], [
            "note: prod's record has no per-slice metrics (evaluated before slices were); per-slice comparison skipped"
        ]
    checks: list[GateCheck] = []
    reasons: list[str] = []
    compared = 0
    for row in rows:
        for metric, minimum in changes.items():
            value, base = row.metrics.get(metric), prod.get(row.key, {}).get(metric)
            if value is None or base is None:
                continue
            compared += 1
            improvement = value - base if directions.get(metric, True) else base - value
            passed = improvement >= minimum
            checks.append(GateCheck("slice_change", metric, minimum, value, base, passed, slice=row.key))
            if not passed:
                reasons.append(
                    f"FAIL: slice {row.key} {metric} = {value:.4f} vs prod {base:.4f}, "
                    f"change {improvement:+.4f}, required >= {minimum:+g}"
                )
    if compared:
        failed = sum(1 for c in checks if not c.passed)
        reasons.append(
            f"{'FAIL' if failed else 'PASS'}: {compared - failed} of {compared} slice comparison(s) "
            f"with prod within {_change_text(changes)}"
        )
    else:
        reasons.append("note: no slice scored here was scored in prod's record; per-slice comparison skipped")
    return checks, reasons


def _change_text(changes: Mapping[str, float]) -> str:
    return ", ".join(f"{m} {c:+g}" for m, c in changes.items())


def slice_checks(
    rows: Sequence[SliceRow],
    thresholds: Mapping[str, Mapping[str, float]],
    changes: Mapping[str, float],
    baseline: Optional[Mapping[str, Any]],
    directions: Mapping[str, bool],
) -> tuple[list[GateCheck], list[str]]:
    """The checks and reason lines of the slice rules (:func:`check_settings` first)."""
    checks, reasons = _threshold_checks(rows, thresholds, directions)
    if changes and baseline is None:
        reasons.append("no baseline: prod serves no model yet, so slice_change_thresholds are skipped")
    elif changes:
        more_checks, more_reasons = _change_checks(rows, changes, baseline, directions)
        checks, reasons = checks + more_checks, reasons + more_reasons
    return checks, reasons


def with_slices(decision: Decision, checks: Sequence[GateCheck], reasons: Sequence[str]) -> Decision:
    """The decision with the slice checks added: a failing slice takes the blessing away.

    A decision that blessed nothing because no thresholds were configured stays as it is (the
    slice rules refine a gate; they do not make one on their own).
    """
    if not checks and not reasons:
        return decision
    blessed = decision.blessed and all(c.passed for c in checks)
    head = list(decision.reasons)
    if decision.checks and head and head[0].startswith(("blessed:", "not blessed:")):
        head[0] = "blessed: every threshold passed" if blessed else "not blessed: at least one check failed"
    return dataclasses.replace(decision, blessed=blessed, reasons=[*head, *reasons], checks=[*decision.checks, *checks])
