"""The inference benchmark's typed records: one result row and its timed paths.

They cross task boundaries as JSON (a component's return value, ``dsl.Collected`` over a
fan-out, a CLI's output file), so each has ``to_dict``/``from_dict`` and the JSON keeps the keys
the pipelines carry today (docs/CONTRACTS.md). ``from_dict`` turns counts back into ints:
``dsl.Collected`` hands them over as floats. Plain Python, no TensorFlow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Optional

from trainer.benchmark import BenchmarkError, TimingStats
from trainer.configbase import whole_int

# The http_ prefix of the served path's figures in a row's JSON.
HTTP = "http_"


def _int(name: str, value: Any) -> int:
    number = whole_int(value)
    if number is None:
        raise BenchmarkError(f"benchmark row: {name} must be an integer, got {value!r}")
    return number


def _float(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BenchmarkError(f"benchmark row: {name} must be a number, got {value!r}")
    return float(value)


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise BenchmarkError(f"benchmark row: {name} must be a non-empty string, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class Timing:
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

    def to_dict(self, prefix: str = "") -> dict[str, Any]:
        """The row's keys for this path (``prefix`` is ``http_`` for the served path)."""
        return {prefix + f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], prefix: str = "") -> Timing:
        """Reads the keys :meth:`to_dict` writes; a missing key is an error naming it."""
        missing = [prefix + f.name for f in dataclasses.fields(cls) if prefix + f.name not in data]
        if missing:
            raise BenchmarkError(
                f"benchmark row: missing {', '.join(missing)}; got the keys {', '.join(map(str, data))}. "
                "Rows come from components.benchmark.run.run_benchmark (BenchmarkRow.to_dict)."
            )
        return cls(
            num_images=_int(prefix + "num_images", data[prefix + "num_images"]),
            batch_size=_int(prefix + "batch_size", data[prefix + "batch_size"]),
            **{
                name: _float(prefix + name, data[prefix + name])
                for name in (
                    "time_s",
                    "images_per_sec",
                    "latency_p50_ms",
                    "latency_p95_ms",
                    "latency_p99_ms",
                    "latency_spread",
                )
            },
        )


# Keys of a row's JSON that are not fields of Timing.
_ROW_KEYS = ("accelerator", "label", "kind", "cores", "price_per_hour", "price_source", "images_per_dollar")
_TIMING_KEYS = tuple(f.name for f in dataclasses.fields(Timing))
_KNOWN_KEYS = frozenset(
    (*_ROW_KEYS, *_TIMING_KEYS, *(HTTP + k for k in _TIMING_KEYS), "http_overhead", "http_server", "in_process", "http")
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
class BenchmarkRow:
    """One accelerator's inference benchmark: its price, its timings, images per dollar.

    Attributes:
        accelerator: the price table key (``cpu-8``, ``tpu-v3-8``, ...).
        label: a readable name for tables.
        kind: ``cpu``, ``gpu`` or ``tpu``.
        cores: vCPUs, GPUs or TPU cores.
        price_per_hour: US dollars per hour.
        price_source: where the price comes from (``case study``, ``estimate ...``, ``user``).
        timing: the in-process path (the exported SavedModel called directly).
        images_per_dollar: images for one dollar; None on free hardware (unbounded).
        http: the served path (REST through the model server), or None when it was not timed.
        http_overhead: served time / in-process time; set exactly when ``http`` is.
        http_server: the server that answered the served path's requests, as tables name it
            (``local Python server``: ``components.serving.server``, not TensorFlow Serving); set
            exactly when ``http`` is.
        timing_stats: the in-process path's full statistics; None in a summary row.
        http_stats: the served path's full statistics; None in a summary row or without ``http``.
    """

    accelerator: str
    label: str
    kind: str
    cores: int
    price_per_hour: float
    price_source: str
    timing: Timing
    images_per_dollar: Optional[float]
    http: Optional[Timing] = None
    http_overhead: Optional[float] = None
    http_server: Optional[str] = None
    timing_stats: Optional[TimingStats] = None
    http_stats: Optional[TimingStats] = None

    def __post_init__(self) -> None:
        if not (self.http is None) == (self.http_overhead is None) == (self.http_server is None):
            raise BenchmarkError(
                f"benchmark row {self.accelerator}: http, http_overhead and http_server come together, got "
                f"http={self.http!r}, http_overhead={self.http_overhead!r} and http_server={self.http_server!r}"
            )
        if self.http_stats is not None and self.http is None:
            raise BenchmarkError(f"benchmark row {self.accelerator}: http_stats without http timings")

    def summary(self) -> BenchmarkRow:
        """The row without the full statistics: what the join step needs (small)."""
        return dataclasses.replace(self, timing_stats=None, http_stats=None)

    def to_dict(self) -> dict[str, Any]:
        """The row's JSON: flat keys (``http_`` prefixed for the served path), the statistics nested.

        The keys are those the pipelines pass between tasks: ``accelerator``, ``label``, ``kind``,
        ``cores``, ``price_per_hour``, ``price_source``, the :class:`Timing` fields,
        ``images_per_dollar``, ``in_process`` (when the statistics are kept), and with the served
        path the ``http_`` prefixed fields, ``http_overhead``, ``http_server`` and ``http``.
        """
        out: dict[str, Any] = {
            "accelerator": self.accelerator,
            "label": self.label,
            "kind": self.kind,
            "cores": self.cores,
            "price_per_hour": self.price_per_hour,
            "price_source": self.price_source,
            **self.timing.to_dict(),
            "images_per_dollar": self.images_per_dollar,
        }
        if self.timing_stats is not None:
            out["in_process"] = self.timing_stats.to_dict()
        if self.http is not None:
            out.update(self.http.to_dict(HTTP))
            out["http_overhead"] = self.http_overhead
            out["http_server"] = self.http_server
        if self.http_stats is not None:
            out["http"] = self.http_stats.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BenchmarkRow:
        """Reads :meth:`to_dict`'s JSON (or a ``dsl.Collected`` copy of it, ints turned floats).

        Raises:
            BenchmarkError: a key is missing or unknown, or a value has the wrong type.
        """
        if not isinstance(data, Mapping):
            raise BenchmarkError(f"benchmark row: expected a mapping, got {type(data).__name__}: {str(data)[:200]}")
        unknown = sorted(set(data) - _KNOWN_KEYS)
        missing = [k for k in _ROW_KEYS if k not in data]
        if unknown or missing:
            raise BenchmarkError(
                f"benchmark row: unknown keys {unknown}, missing keys {missing}; a row has "
                f"{', '.join(sorted(_KNOWN_KEYS))} (BenchmarkRow.to_dict)"
            )
        served = HTTP + "images_per_sec" in data
        ipd = data["images_per_dollar"]
        return cls(
            accelerator=str(data["accelerator"]),
            label=str(data["label"]),
            kind=str(data["kind"]),
            cores=_int("cores", data["cores"]),
            price_per_hour=_float("price_per_hour", data["price_per_hour"]),
            price_source=str(data["price_source"]),
            timing=Timing.from_dict(data),
            images_per_dollar=None if ipd is None else _float("images_per_dollar", ipd),
            http=Timing.from_dict(data, HTTP) if served else None,
            http_overhead=_float("http_overhead", data.get("http_overhead")) if served else None,
            http_server=_text("http_server", data.get("http_server")) if served else None,
            timing_stats=TimingStats.from_dict(data["in_process"]) if data.get("in_process") is not None else None,
            http_stats=TimingStats.from_dict(data["http"]) if data.get("http") is not None else None,
        )

    def scalar_metrics(self) -> dict[str, float]:
        """The numeric metrics for a ``Metrics`` artifact (absent and None values left out)."""
        flat = self.to_dict()
        return {k: float(flat[k]) for k in METRIC_KEYS if flat.get(k) is not None}


def as_row(row: BenchmarkRow | Mapping[str, Any]) -> BenchmarkRow:
    """A row as a :class:`BenchmarkRow`, from itself or from its JSON."""
    return row if isinstance(row, BenchmarkRow) else BenchmarkRow.from_dict(row)
