"""The GPU-vs-TPU notebook's sweep: its records and its two tables, epoch time and step time per example.

One accelerator's sweep (:class:`SweepRun`) holds one :class:`SweepResult` per batch size; the
tables index them by accelerator and batch size. The records cross task boundaries as JSON
(``to_dict``/``from_dict``; ``dsl.Collected`` hands counts back as floats). Plain Python, no
TensorFlow: the Markdown tables and one self-contained HTML page (inline SVG charts).
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

from components import charts
from components.sweep import markdown
from trainer.benchmark import BenchmarkError, SweepResult


def _num(value: Optional[float], fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def _page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:16px}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}td:first-child,th:first-child"
        "{text-align:left}tr.best{font-weight:bold}</style></head><body>\n"
        f"<h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n"
    )


@dataclasses.dataclass(frozen=True)
class SweepRun:
    """One accelerator's training sweep: the name it is reported under and a result per batch size.

    Attributes:
        accelerator: the name in the tables (a preset: ``tpu-v2-8``, ``gpu-1``, ``cpu``, ...).
        results: one per batch size (``trainer.benchmark.training_sweep``).
    """

    accelerator: str
    results: tuple[SweepResult, ...]

    def to_dict(self) -> dict[str, Any]:
        """``{"accelerator": ..., "results": [...]}``: the training_sweep component's output."""
        return {"accelerator": self.accelerator, "results": [r.to_dict() for r in self.results]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepRun:
        """Reads :meth:`to_dict`'s JSON (or a ``dsl.Collected`` copy of it).

        Raises:
            BenchmarkError: a key is missing or unknown, or a result is malformed.
        """
        if not isinstance(data, Mapping) or set(data) != {"accelerator", "results"}:
            keys = sorted(data) if isinstance(data, Mapping) else type(data).__name__
            raise BenchmarkError(f"training sweep: expected the keys accelerator and results, got {keys}")
        return cls(
            accelerator=str(data["accelerator"]),
            results=tuple(SweepResult.from_dict(r) for r in data["results"]),
        )


def as_sweep(sweep: SweepRun | Mapping[str, Any]) -> SweepRun:
    """A sweep as a :class:`SweepRun`, from itself or from its JSON."""
    return sweep if isinstance(sweep, SweepRun) else SweepRun.from_dict(sweep)


Sweeps = Sequence[Union[SweepRun, Mapping[str, Any]]]


def sweep_tables(sweeps: Sweeps) -> tuple[list[int], list[str], dict[str, dict[int, SweepResult]]]:
    """Indexes sweep results by accelerator and batch size.

    Args:
        sweeps: one sweep per accelerator, typed or as JSON (``SweepRun.to_dict``, the
            training_sweep component's output, ``dsl.Collected`` copies included).

    Returns:
        (sorted batch sizes, accelerator names in order, name -> batch size -> result).
    """
    by_acc: dict[str, dict[int, SweepResult]] = {}
    for sweep in (as_sweep(s) for s in sweeps):
        by_acc[sweep.accelerator] = {r.batch_size: r for r in sweep.results}
    sizes = sorted({b for results in by_acc.values() for b in results})
    return sizes, list(by_acc), by_acc


def _figure(result: Optional[SweepResult], key: str) -> Optional[float]:
    return None if result is None else getattr(result, key)


def render_sweep_markdown(sweeps: Sweeps, title: str = "GPU vs TPU training sweep") -> str:
    """The notebook's two tables: epoch time (s) and step time per example (us), first epoch excluded."""
    sizes, names, by_acc = sweep_tables(sweeps)
    lines = [f"# {title}", "", "The first (compiling) epoch is excluded from every figure.", ""]
    for heading, key, fmt in (
        ("Epoch time (s)", "epoch_time_s", ".2f"),
        ("Step time per example (us)", "step_time_per_example_us", ".1f"),
    ):
        body = [[str(size), *(_num(_figure(by_acc[n].get(size), key), fmt) for n in names)] for size in sizes]
        lines += [f"## {heading}", "", *markdown.table(["batch size", *names], body, "r" * (len(names) + 1)), ""]
    details = []
    for n in names:
        for size in sizes:
            r = by_acc[n].get(size)
            if r:
                details.append(
                    f"- {n}, batch {size}: ran on {r.accelerator}, {r.steps_per_epoch} steps "
                    f"({r.examples_per_epoch:,} examples) per epoch, epoch times "
                    + ", ".join(f"{t:.2f}" for t in r.epoch_times_s)
                    + " s"
                )
    lines += ["## Runs", "", *details]
    return "\n".join(lines) + "\n"


def render_sweep_html(sweeps: Sweeps, title: str = "GPU vs TPU training sweep") -> str:
    """Both sweep charts (grouped by batch size, one colour per accelerator) as one page."""
    sizes, names, by_acc = sweep_tables(sweeps)
    groups = [f"batch {s}" for s in sizes]
    charts_ = []
    for heading, key, unit in (
        ("Epoch time (lower is faster)", "epoch_time_s", "s"),
        ("Step time per example (lower is faster)", "step_time_per_example_us", "us"),
    ):
        series = {n: [_figure(by_acc[n].get(s), key) for s in sizes] for n in names}
        charts_.append(charts.grouped_bars(heading, groups, series, unit))
    return _page(title, "<p>The first (compiling) epoch is excluded.</p>\n" + "\n<br/>\n".join(charts_))
