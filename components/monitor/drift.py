"""Drift and input-quality checks of a stage's sampled traffic against its reference (docs/observability.md).

The **reference** (:func:`build_reference`) is what the model answered on its own test split at
evaluation, summarized as the served traffic is (``components.serving.traffic``): the shares of
each predicted class, the decode-failure and empty-answer rates, and for each watched figure
(score, margin, width, height, channels, brightness, contrast) the bin edges of its deciles and
the share in each bin. It is written as ``traffic_reference.json``.

A **window** of sampled summaries is compared with it (:func:`check_window`):

- ``class_shares``: the Jensen-Shannon divergence (base 2, in [0, 1]) of the predicted-class shares;
  ``class_change``: the largest change of one class's share;
- ``psi_<figure>``: the population stability index of each watched figure over the reference's bins;
- ``decode_failures`` and ``empty_answers``: their rates above the reference's.

Each check has a minimum sample count: below it the check says ``not_enough_traffic`` and does
not fire; with no reference every check says ``no_reference``. The result is a
:class:`DriftReport`, written as ``drift.json`` (docs/CONTRACTS.md).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Optional

import numpy as np

from components.serving import drift_history as history
from components.serving.drift_history import drift_folder
from components.serving.reference import (
    ANSWER_FIGURES,
    DRIFT_FORMAT,
    FLOOR,
    IMAGE_FIGURES,
    REFERENCE_FILE,
    answered_lines,
    class_shares,
    figure_values,
    quality_rates,
)
from components.serving.traffic import read_window, traffic_dir
from trainer import storage
from trainer.configbase import ConfigBase

STATES = ("ok", "alarm", "not_enough_traffic", "no_reference")


@dataclasses.dataclass(frozen=True)
class DriftConfig(ConfigBase):
    """The thresholds and minimum sample counts of the drift checks (docs/observability.md).

    Attributes:
        max_class_divergence: the highest Jensen-Shannon divergence of the class shares (base 2).
        max_class_change: the largest change of one class's share.
        min_class_samples: the fewest answered samples the class checks judge.
        max_psi: the highest population stability index of a watched figure.
        min_psi_samples: the fewest samples (with the figure) a PSI check judges.
        max_decode_failure_rate: the most the decode-failure rate may exceed the reference's.
        max_empty_answer_rate: the most the empty-answer rate may exceed the reference's.
        min_rate_samples: the fewest samples the rate checks judge.
    """

    _section: ClassVar[str] = "monitor.drift."

    max_class_divergence: float = 0.03
    max_class_change: float = 0.07
    min_class_samples: int = 400
    max_psi: float = 0.25
    min_psi_samples: int = 200
    max_decode_failure_rate: float = 0.05
    max_empty_answer_rate: float = 0.1
    min_rate_samples: int = 100

    def validate(self) -> None:
        for name in ("max_class_divergence", "max_class_change", "max_decode_failure_rate", "max_empty_answer_rate"):
            if not 0 < getattr(self, name) <= 1:
                self._fail(name, f"must be in (0, 1], got {getattr(self, name)}")
        if self.max_psi <= 0:
            self._fail("max_psi", f"must be > 0, got {self.max_psi}")
        for name in ("min_class_samples", "min_psi_samples", "min_rate_samples"):
            if getattr(self, name) < 1:
                self._fail(name, f"must be >= 1, got {getattr(self, name)}")


@dataclasses.dataclass(frozen=True)
class DriftCheck:
    """One check of one window.

    Attributes:
        name: ``class_shares``, ``class_change``, ``psi_<figure>``, ``decode_failures``, ``empty_answers``.
        figure: the measured value (None: not measured).
        threshold: the check fires above it.
        minimum: the fewest samples it judges.
        samples: the samples it had.
        state: ``ok``, ``alarm``, ``not_enough_traffic`` or ``no_reference``.
    """

    name: str
    figure: Optional[float]
    threshold: float
    minimum: int
    samples: int
    state: str


def js_divergence(p: Mapping[str, float], q: Mapping[str, float]) -> float:
    """Jensen-Shannon divergence of two share mappings, base 2 (0: the same, 1: disjoint)."""
    keys = sorted(set(p) | set(q))
    a = np.asarray([p.get(k, 0.0) for k in keys])
    b = np.asarray([q.get(k, 0.0) for k in keys])
    m = (a + b) / 2

    def kl(x: np.ndarray) -> float:
        mask = x > 0
        return float((x[mask] * np.log2(x[mask] / m[mask])).sum())

    return max(0.0, (kl(a) + kl(b)) / 2)


def psi(values: np.ndarray, reference: Mapping[str, Sequence[float]]) -> float:
    """Population stability index of ``values`` over the reference's bins (empty bins count as 1e-4)."""
    edges = np.asarray(reference["edges"], dtype=np.float64)
    expected = np.maximum(np.asarray(reference["shares"], dtype=np.float64), FLOOR)
    counts = np.bincount(np.searchsorted(edges, values, side="right"), minlength=edges.size + 1)
    actual = np.maximum(counts / max(values.size, 1), FLOOR)
    return float(((actual - expected) * np.log(actual / expected)).sum())


def _check(name: str, figure: float, threshold: float, minimum: int, samples: int) -> DriftCheck:
    if samples < minimum:
        return DriftCheck(name, None, threshold, minimum, samples, "not_enough_traffic")
    return DriftCheck(name, round(figure, 6), threshold, minimum, samples, "alarm" if figure > threshold else "ok")


def _class_checks(
    lines: Sequence[Mapping[str, Any]], reference: Mapping[str, Any], config: DriftConfig
) -> list[DriftCheck]:
    answered = answered_lines(lines)
    shares = class_shares(Counter(str(line["answer"]["class"]) for line in answered))
    ref = reference["classes"]
    divergence = js_divergence(shares, ref) if shares else 0.0
    change = max((abs(shares.get(k, 0.0) - ref.get(k, 0.0)) for k in set(shares) | set(ref)), default=0.0)
    n, minimum = len(answered), config.min_class_samples
    return [
        _check("class_shares", divergence, config.max_class_divergence, minimum, n),
        _check("class_change", change, config.max_class_change, minimum, n),
    ]


def check_window(
    lines: Sequence[Mapping[str, Any]], reference: Optional[Mapping[str, Any]], config: DriftConfig
) -> list[DriftCheck]:
    """Every check of a window's summaries against the reference (module docstring)."""
    names = ["class_shares", "class_change", *(f"psi_{f}" for f in ANSWER_FIGURES + IMAGE_FIGURES)]
    names += ["decode_failures", "empty_answers"]
    if reference is None:
        return [DriftCheck(name, None, 0.0, 0, len(lines), "no_reference") for name in names]
    checks = _class_checks(lines, reference, config)
    for name in ANSWER_FIGURES + IMAGE_FIGURES:
        values = figure_values(lines, name)
        figure = psi(values, reference["figures"][name]) if values.size else 0.0
        checks.append(_check(f"psi_{name}", figure, config.max_psi, config.min_psi_samples, int(values.size)))
    failures, empty = quality_rates(lines)
    excess_failures = failures - reference["decode_failure_rate"]
    excess_empty = empty - reference["empty_answer_rate"]
    minimum = config.min_rate_samples
    checks.append(_check("decode_failures", excess_failures, config.max_decode_failure_rate, minimum, len(lines)))
    checks.append(_check("empty_answers", excess_empty, config.max_empty_answer_rate, minimum, len(lines)))
    return checks


def _iso(seconds: float) -> str:
    return _dt.datetime.fromtimestamp(seconds, _dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


@dataclasses.dataclass(frozen=True)
class DriftReport:
    """One stage's drift checks over one window (``drift.json``, docs/CONTRACTS.md).

    Attributes:
        stage: the stage.
        model: the served model name.
        model_version: the version the stage served (None: nothing).
        start, end: the window, seconds since the epoch.
        samples: the summaries in the window.
        checks: each check.
        reference: where the reference was read (None: there is none).
        skipped_shards: ``name: why`` of each shard that could not be read.
        missing_shards: ``writer: sequence numbers`` missing between a writer's shards.
    """

    stage: str
    model: str
    model_version: Optional[int]
    start: float
    end: float
    samples: int
    checks: tuple[DriftCheck, ...]
    reference: Optional[str] = None
    skipped_shards: tuple[str, ...] = ()
    missing_shards: tuple[str, ...] = ()

    @property
    def alarm(self) -> bool:
        """Whether a check fired (``not_enough_traffic`` and ``no_reference`` never do)."""
        return any(c.state == "alarm" for c in self.checks)

    @property
    def fired(self) -> list[str]:
        """The names of the checks that fired."""
        return [c.name for c in self.checks if c.state == "alarm"]

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ``drift.json``."""
        return {
            "format": DRIFT_FORMAT,
            "stage": self.stage,
            "model": self.model,
            "model_version": self.model_version,
            "window": {"start": _iso(self.start), "end": _iso(self.end)},
            "samples": self.samples,
            "reference": self.reference,
            "skipped_shards": list(self.skipped_shards),
            "missing_shards": list(self.missing_shards),
            "checks": [{**dataclasses.asdict(c), "alarm": c.state == "alarm"} for c in self.checks],
            "alarm": self.alarm,
        }

    def line(self) -> str:
        """One line: what fired, or why nothing could (no reference, too little traffic), or ok."""
        head = f"{self.stage} {self.model} v{self.model_version}: {self.samples} samples"
        if self.skipped_shards:
            head += f" ({len(self.skipped_shards)} unreadable shards skipped: {'; '.join(self.skipped_shards)})"
        if self.missing_shards:
            head += f" (shards missing from the window, by writer: {'; '.join(self.missing_shards)})"
        if self.reference is None:
            return f"{head}; no reference (promoted before references were written): nothing compared"
        if self.alarm:
            return f"{head}; DRIFT: {', '.join(self.fired)}"
        waiting = [c.name for c in self.checks if c.state == "not_enough_traffic"]
        return f"{head}; ok" + (f" (not enough traffic for {len(waiting)} checks)" if waiting else "")


def write_drift(report: DriftReport, folder: str) -> str:
    """Writes ``<folder>/<end>.json`` and ``<folder>/latest.json`` (each whole); returns the first's path."""
    text = json.dumps(report.to_dict(), indent=1)
    stamp = _dt.datetime.fromtimestamp(report.end, _dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = storage.join(folder, f"{stamp}.json")
    storage.write_text(path, text)
    storage.write_text(storage.join(folder, "latest.json"), text)
    return path


def reference_paths(stages_root: str, stage: str, model: str, model_uri: str) -> list[str]:
    """Where a stage's reference may be: beside its records, then beside the model it was promoted from."""
    paths = [storage.join(stages_root, stage, "records", model, REFERENCE_FILE)]
    return paths + ([storage.join(model_uri, REFERENCE_FILE)] if model_uri else [])


def load_reference(paths: Sequence[str]) -> tuple[Optional[str], Optional[dict[str, Any]]]:
    """The first reference found among ``paths`` and where; ``(None, None)`` when there is none.

    Raises:
        ValueError: a reference that is not one (one line naming the file and the fix).
    """
    for path in paths:
        if not storage.exists(path):
            continue
        try:
            reference = json.loads(storage.read_text(path))
            if not isinstance(reference, dict) or not {"classes", "figures"} <= set(reference):
                raise ValueError("not a traffic reference")
        except (ValueError, UnicodeDecodeError) as err:
            raise ValueError(
                f"{path}: unreadable traffic reference ({err}); re-run the evaluation to rewrite it"
            ) from None
        return path, reference
    return None, None


def stage_drift(
    stages_root: str, stage: str, model: str, entry: Any, start: float, end: float, config: DriftConfig
) -> DriftReport:
    """Checks a stage's sampled traffic of ``[start, end)`` against its reference (module docstring).

    Args:
        stages_root: the stage registry (the traffic lies under ``<stage>/traffic/<model>``).
        stage: the stage.
        model: the served model name.
        entry: the stage's current entry (``version`` and ``model_uri`` are read).
        start: the window's start, seconds since the epoch.
        end: its end (excluded).
        config: the thresholds and minimum sample counts.

    Raises:
        ValueError: the reference is unreadable.
    """
    path, reference = load_reference(reference_paths(stages_root, stage, model, entry.model_uri))
    window = read_window(traffic_dir(stages_root, stage, model), start, end)
    checks = check_window(window.samples, reference, config)
    return DriftReport(
        stage, model, entry.version, start, end, len(window.samples), tuple(checks), path,
        window.skipped, window.missing,
    )  # fmt: skip


def window_seconds(window: str) -> float:
    """Seconds of a PromQL-style duration (``30m``, ``1h``, ``2d``), the monitor's window.

    Raises:
        ValueError: not such a duration.
    """
    match = re.fullmatch(r"([1-9][0-9]*)([smhd])", window)
    if match is None:
        raise ValueError(f"window must be a duration such as 30m or 1h, got {window!r}")
    return int(match[1]) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[match[2]]


GAUGE_PREFIX = "ltp_traffic_"


def gauges(reports: Sequence[DriftReport]) -> str:
    """The reports as Prometheus text (``ltp_traffic_drift_figure``, ``_drift_alarm``, ``_samples``).

    Labels: ``namespace`` (``ltp-<stage>``, as the stage's other series), ``model_name`` and,
    for a figure, ``check``; a check without a figure (too little traffic, no reference) is left out.
    """
    lines = [
        f"# TYPE {GAUGE_PREFIX}drift_figure gauge",
        f"# TYPE {GAUGE_PREFIX}drift_alarm gauge",
        f"# TYPE {GAUGE_PREFIX}samples gauge",
    ]
    for r in reports:
        labels = f'namespace="ltp-{r.stage}",model_name="{r.model}"'
        lines.append(f"{GAUGE_PREFIX}samples{{{labels}}} {r.samples}")
        lines.append(f"{GAUGE_PREFIX}drift_alarm{{{labels}}} {int(r.alarm)}")
        for c in r.checks:
            if c.figure is not None:
                lines.append(f'{GAUGE_PREFIX}drift_figure{{{labels},check="{c.name}"}} {c.figure:.6g}')
    return "\n".join(lines) + "\n"


def watch(stages_root: str, stages: Sequence[str], model: str, window: str, config: DriftConfig,
          now: Optional[float] = None) -> list[DriftReport]:  # fmt: skip
    """Checks the last ``window`` of each stage that serves ``model``, and writes its ``drift.json``.

    Each report is written under :func:`drift_folder`, with ``drift.prom`` (:func:`gauges`) and the
    page of its figures over the windows (``drift.html``, :mod:`components.serving.drift_history`) beside.
    A stage that serves nothing is left out.
    """
    from components.serving.stages import StageRegistry

    registry = StageRegistry(stages_root)
    end = time.time() if now is None else now
    reports = []
    for stage in stages:
        entry = registry.read_current(stage, model)
        if entry is None or entry.version is None:
            continue
        report = stage_drift(stages_root, stage, model, entry, end - window_seconds(window), end, config)
        folder = drift_folder(stages_root, stage, model)
        write_drift(report, folder)
        storage.write_text(storage.join(folder, history.GAUGES), gauges([report]))
        history.write_history_page(history.read_history(folder, stage, model), folder)
        reports.append(report)
    return reports


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``make monitor``: the drift checks of every serving stage over the last window, one line each."""
    import argparse
    import sys

    from components.serving.config import STAGES

    p = argparse.ArgumentParser(prog="python -m components.monitor.drift", description=main.__doc__)
    p.add_argument("--stages-root", default="local_outputs/stages", help="the stage registry")
    p.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    p.add_argument("--model", default="classifier", help="the served model name")
    p.add_argument("--window", default="1h", help="how far back the samples are read (30m, 1h, 1d)")
    args = p.parse_args(argv)
    try:
        window_seconds(args.window)
        reports = watch(args.stages_root, args.stages, args.model, args.window, DriftConfig())
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not reports:
        print(f"no stage serves {args.model} under {args.stages_root}: run `make run` first, then `make serve`")
        return 2
    for r in reports:
        print(r.line())
        folder = drift_folder(args.stages_root, r.stage, r.model)
        print(f"  drift.json: {folder}/latest.json; its figures over the windows: {folder}/{history.PAGE}")
    return 1 if any(r.alarm for r in reports) else 0


if __name__ == "__main__":
    raise SystemExit(main())
