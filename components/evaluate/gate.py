"""The blessing decision, TFX-style, failing closed.

A model is blessed only when thresholds are configured and every one of them passes:

- value thresholds: ``{metric: bound}``; for metrics where higher is better (accuracy, ...)
  the value must be >= bound, for those where lower is better (``loss``) <= bound. Which is
  which comes from the task (``Task.directions()``): the gate assumes no metric.
- change thresholds: ``{metric: minimum improvement}`` against the baseline, the model prod
  serves now. Improvement is ``value - baseline`` for higher-is-better metrics and
  ``baseline - value`` for ``loss``, so ``{accuracy: -0.01}`` tolerates a drop of one point and
  ``{loss: 0.0}`` demands a loss no worse than prod's.

No baseline (nothing in prod yet) means the first model is judged by the value thresholds alone,
and the decision says so. No thresholds at all means not blessed. Plain Python, no TensorFlow.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Optional

from trainer.records import Record


class ThresholdError(ValueError):
    """A threshold names an unknown metric or has a value that is not a number."""


@dataclasses.dataclass(frozen=True)
class GateCheck(Record):
    """One threshold the gate judged; the blessing record's ``checks`` hold one each.

    Attributes:
        kind: ``value`` or ``change`` (against prod); ``slice`` or ``slice_change`` for a slice's.
        metric: the metric judged.
        threshold: the bound (``value``) or the least improvement (``change``).
        value: the candidate's figure; None when it has none (the check then fails).
        baseline: prod's figure for a change; None for a bound, or when prod has none.
        passed: whether it passed.
        slice: the slice judged (``column:value``); None for the whole split.
    """

    _omit_empty = ("slice",)

    kind: str
    metric: str
    threshold: float
    value: Optional[float]
    baseline: Optional[float]
    passed: bool
    slice: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Decision(Record):
    """The outcome of the gate; ``to_dict`` is the blessing artifact's content.

    Attributes:
        blessed: whether the model may be promoted.
        reasons: one line per check (passed or failed) or why nothing was checked.
        checks: one record per threshold judged.
        baseline: the baseline's metrics, or None when prod serves nothing yet.
    """

    blessed: bool
    reasons: list[str]
    checks: list[GateCheck]
    baseline: Optional[dict[str, float]]


def validate_thresholds(
    value_thresholds: Optional[Mapping[str, Any]],
    change_thresholds: Optional[Mapping[str, Any]],
    known: Mapping[str, bool],
) -> tuple[dict[str, float], dict[str, float]]:
    """Checks threshold names and values before any work is done.

    Args:
        value_thresholds: metric -> bound, or None.
        change_thresholds: metric -> minimum improvement against the baseline, or None.
        known: metric name -> higher is better.

    Returns:
        The two mappings as plain ``{str: float}`` dicts (empty when None).

    Raises:
        ThresholdError: an unknown metric name, or a value that is not a finite number.
    """
    result = []
    for kind, thresholds in (
        ("value_thresholds", value_thresholds),
        ("change_thresholds", change_thresholds),
    ):
        clean: dict[str, float] = {}
        for name, bound in dict(thresholds or {}).items():
            if name not in known:
                raise ThresholdError(f"{kind} names unknown metric {name!r}; known metrics: {', '.join(sorted(known))}")
            if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound):
                raise ThresholdError(f"{kind}[{name!r}] must be a finite number, got {bound!r}")
            clean[name] = float(bound)
        result.append(clean)
    return result[0], result[1]


def _value_checks(
    metrics: Mapping[str, float],
    values: Mapping[str, float],
    known: Mapping[str, bool],
    checks: list[GateCheck],
    reasons: list[str],
) -> None:
    """Appends a check and a reason per value threshold."""
    for name, bound in values.items():
        value = metrics.get(name)
        higher = known[name]
        passed = value is not None and (value >= bound if higher else value <= bound)
        op = ">=" if higher else "<="
        checks.append(GateCheck("value", name, bound, value, None, passed))
        shown = "missing" if value is None else f"{value:.4f}"
        reasons.append(f"{'PASS' if passed else 'FAIL'}: {name} = {shown}, required {op} {bound:g}")


def _change_checks(
    metrics: Mapping[str, float],
    changes: Mapping[str, float],
    baseline: Mapping[str, float],
    known: Mapping[str, bool],
    checks: list[GateCheck],
    reasons: list[str],
) -> None:
    """Appends a check and a reason per change threshold, against the baseline."""
    for name, minimum in changes.items():
        value, base = metrics.get(name), baseline.get(name)
        if value is None or base is None:
            # A comparison that cannot be made fails: fail closed, never silently pass.
            checks.append(GateCheck("change", name, minimum, value, base, False))
            missing = "the candidate" if value is None else "the baseline (prod)"
            reasons.append(f"FAIL: {name} change cannot be computed: {missing} has no {name}")
            continue
        improvement = value - base if known[name] else base - value
        passed = improvement >= minimum
        checks.append(GateCheck("change", name, minimum, value, float(base), passed))
        reasons.append(
            f"{'PASS' if passed else 'FAIL'}: {name} = {value:.4f} vs prod {base:.4f}, "
            f"improvement {improvement:+.4f}, required >= {minimum:+g}"
        )


def decide(
    metrics: Mapping[str, float],
    value_thresholds: Optional[Mapping[str, float]],
    change_thresholds: Optional[Mapping[str, float]],
    baseline: Optional[Mapping[str, float]],
    known: Mapping[str, bool],
) -> Decision:
    """Decides whether a model is blessed.

    Args:
        metrics: the candidate's scalar metrics.
        value_thresholds: metric -> bound (see the module docstring).
        change_thresholds: metric -> minimum improvement over the baseline.
        baseline: the metrics of the model prod serves now, or None when there is none.
        known: metric name -> higher is better (the task's ``directions()``).

    Returns:
        The decision with a reason per check.
    """
    values, changes = validate_thresholds(value_thresholds, change_thresholds, known)
    example = next(iter(known), "accuracy")
    if not values and not changes:
        return Decision(
            blessed=False,
            reasons=[
                "not blessed: no thresholds configured (fail closed); set value_thresholds, e.g. "
                f"{{{example}: 0.8}}, and/or change_thresholds, e.g. {{{example}: -0.01}}"
            ],
            checks=[],
            baseline=dict(baseline) if baseline is not None else None,
        )
    checks: list[GateCheck] = []
    reasons: list[str] = []
    _value_checks(metrics, values, known, checks, reasons)
    if changes and baseline is None:
        reasons.append(
            "no baseline: prod serves no model yet, so change thresholds "
            f"({', '.join(sorted(changes))}) are skipped and the value thresholds alone decide"
        )
    elif changes:
        _change_checks(metrics, changes, baseline, known, checks, reasons)
    baseline_copy = dict(baseline) if baseline is not None else None
    if not checks:
        # Only change thresholds were set and there is no baseline: nothing judged the model.
        reasons.append(
            "not blessed: no baseline and no value thresholds, so nothing judged this first model "
            f"(fail closed); add value_thresholds, e.g. {{{example}: 0.8}}"
        )
        return Decision(blessed=False, reasons=reasons, checks=checks, baseline=baseline_copy)
    blessed = all(c.passed for c in checks)
    headline = "blessed: every threshold passed" if blessed else "not blessed: at least one check failed"
    return Decision(blessed=blessed, reasons=[headline, *reasons], checks=checks, baseline=baseline_copy)
