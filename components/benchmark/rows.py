"""The inference benchmark's typed records: one result row and its timed paths.

They cross task boundaries as JSON (a component's return value, ``dsl.Collected`` over a
fan-out, a CLI's output file): strict records (``trainer.records``) whose JSON keeps the keys the
pipelines carry today (docs/CONTRACTS.md), counts read back as ints (``dsl.Collected`` hands them
over as floats). Plain Python, no TensorFlow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Optional

from trainer import records
from trainer.benchmark import BenchmarkError, TimingStats

# The http_ prefix of the served path's figures in a row's JSON.
HTTP = "http_"


@dataclasses.dataclass(frozen=True)
class Timing(records.Record):
    """The figures of one timed path (in process or served) that a result row carries flat.

    Attributes:
        num_images: images timed per round.
        batch_size: images per batch.
        time_s: wall time of the median round, seconds.
        images_per_sec: throughput.
        latency_p50_ms: median per-batch latency.
        latency_p95_ms: 95th percentile.
        latency_p99_ms: 99th percentile.
        latency_spread: std / mean of the per-batch latency.
    """

    _what = "benchmark row"
    _error = BenchmarkError

    num_images: int
    batch_size: int
    time_s: float
    images_per_sec: float
    latency_p50_ms: float
    latency_p95_ms: float
    latency_p99_ms: float
    latency_spread: float

    @classmethod
    def from_stats(cls, stats: TimingStats) -> Timing:
        """The flat figures of a timing run."""
        return cls(
            num_images=stats.num_images,
            batch_size=stats.batch_size,
            time_s=stats.total_s,
            images_per_sec=stats.images_per_sec,
            latency_p50_ms=stats.latency_ms["p50"],
            latency_p95_ms=stats.latency_ms["p95"],
            latency_p99_ms=stats.latency_ms["p99"],
            latency_spread=stats.spread,
        )


# The scalar metrics a Metrics artifact gets (numbers only), in this order.
METRIC_KEYS = (
    "images_per_sec",
    "time_s",
    "latency_p50_ms",
    "latency_p95_ms",
    "latency_p99_ms",
    "latency_spread",
    "price_per_hour",
    "images_per_dollar",
    "http_images_per_sec",
    "http_time_s",
    "http_latency_p50_ms",
    "http_latency_p95_ms",
    "http_latency_p99_ms",
    "http_latency_spread",
    "http_overhead",
)


@dataclasses.dataclass(frozen=True)
class BenchmarkRow(records.Record):
    """One accelerator's inference benchmark: its price, its timings, images per dollar.

    Its JSON is flat: the :class:`Timing` fields, the served path's with the ``http_`` prefix, and
    the full statistics nested under ``in_process`` and ``http`` (left out of a summary row).

    Attributes:
        accelerator: the price table key (``cpu-8``, ``tpu-v3-8``, ...).
        label: a readable name for tables.
        kind: ``cpu``, ``gpu`` or ``tpu``.
        cores: vCPUs, GPUs or TPU cores.
        price_per_hour: US dollars per hour.
        price_source: where the price comes from (``case study``, ``estimate ...``, ``user``).
        timing: the in-process path (the exported SavedModel called directly).
        images_per_dollar: images for one dollar; None on free hardware (unbounded).
        timing_stats: the in-process path's full statistics (``in_process``); None in a summary row.
        http: the served path (REST through the model server), or None when it was not timed.
        http_overhead: served time / in-process time; set exactly when ``http`` is.
        http_server: the server that answered the served path's requests, as tables name it
            (``local Python server``: ``components.serving.server``, not TensorFlow Serving); set
            exactly when ``http`` is.
        http_stats: the served path's full statistics (``http``); None in a summary row or without
            ``http``.
    """

    _what = "benchmark row"
    _error = BenchmarkError
    _omit_empty = ("http_overhead", "http_server", "timing_stats", "http_stats")

    accelerator: str
    label: str
    kind: str
    cores: int
    price_per_hour: float
    price_source: str
    timing: Timing = records.field(flat="")
    images_per_dollar: Optional[float]
    timing_stats: Optional[TimingStats] = records.field(key="in_process", default=None)
    http: Optional[Timing] = records.field(flat=HTTP, default=None)
    http_overhead: Optional[float] = None
    http_server: Optional[str] = None
    http_stats: Optional[TimingStats] = records.field(key="http", default=None)

    def __post_init__(self) -> None:
        if not (self.http is None) == (self.http_overhead is None) == (not self.http_server):
            raise BenchmarkError(
                f"benchmark row {self.accelerator}: http, http_overhead and http_server come together, got "
                f"http={self.http!r}, http_overhead={self.http_overhead!r} and http_server={self.http_server!r}"
            )
        if self.http_stats is not None and self.http is None:
            raise BenchmarkError(f"benchmark row {self.accelerator}: http_stats without http timings")

    def summary(self) -> BenchmarkRow:
        """The row without the full statistics: what the join step needs (small)."""
        return dataclasses.replace(self, timing_stats=None, http_stats=None)

    def scalar_metrics(self) -> dict[str, float]:
        """The numeric metrics for a ``Metrics`` artifact (absent and None values left out)."""
        flat = self.to_dict()
        return {k: float(flat[k]) for k in METRIC_KEYS if flat.get(k) is not None}


def as_row(row: BenchmarkRow | Mapping[str, Any]) -> BenchmarkRow:
    """A row as a :class:`BenchmarkRow`, from itself or from its JSON."""
    return row if isinstance(row, BenchmarkRow) else BenchmarkRow.from_dict(row)
