"""The accelerator price table ($/hour) and images per dollar.

The defaults ship as ``prices.yaml`` next to this module (the case study's prices, plus estimates
marked as such). A user's table, in the same format, replaces or adds entries. Plain Python.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

import yaml

DEFAULT_PRICE_TABLE = Path(__file__).with_name("prices.yaml")
KINDS = ("cpu", "gpu", "tpu")
_FIELDS = ("price_per_hour", "kind", "cores", "label", "source", "host")


class PriceTableError(ValueError):
    """The price table is malformed, or names no price for the accelerator asked for."""


@dataclasses.dataclass(frozen=True)
class AcceleratorPrice:
    """One row of the price table.

    Attributes:
        name: the key (``cpu-8``, ``tpu-v3-8``, ...).
        price_per_hour: US dollars per hour, >= 0.
        kind: ``cpu``, ``gpu`` or ``tpu``.
        cores: vCPUs, GPUs or TPU cores.
        label: a readable name for tables.
        source: where the price comes from (``case study``, ``estimate ...``, ``user``).
        host: the entry whose price is added for the machine the accelerator needs besides itself
            (a legacy Cloud TPU is attached to a GKE node that is billed too); None when the
            price already includes it.
    """

    name: str
    price_per_hour: float
    kind: str
    cores: int
    label: str
    source: str
    host: Optional[str] = None


def _entry(name: str, data: Any, origin: str) -> AcceleratorPrice:
    if not isinstance(data, Mapping):
        raise PriceTableError(f"{origin}: accelerator {name!r} must be a mapping with price_per_hour, got {data!r}")
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise PriceTableError(
            f"{origin}: accelerator {name!r} has unknown field(s) {', '.join(unknown)}; known: {', '.join(_FIELDS)}"
        )
    price = data.get("price_per_hour")
    if isinstance(price, bool) or not isinstance(price, (int, float)) or not math.isfinite(price):
        raise PriceTableError(f"{origin}: accelerator {name!r} needs a numeric price_per_hour, got {price!r}")
    if price < 0:
        raise PriceTableError(
            f"{origin}: accelerator {name!r} has a negative price_per_hour ({price}); prices are $/hour >= 0"
        )
    kind = data.get("kind")
    if kind not in KINDS:
        raise PriceTableError(f"{origin}: accelerator {name!r} kind must be one of {', '.join(KINDS)}, got {kind!r}")
    cores = data.get("cores", 1)
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise PriceTableError(f"{origin}: accelerator {name!r} cores must be an integer >= 1, got {cores!r}")
    return AcceleratorPrice(
        name=name,
        price_per_hour=float(price),
        kind=kind,
        cores=cores,
        label=str(data.get("label", name)),
        source=str(data.get("source", origin)),
        host=None if data.get("host") is None else str(data["host"]),
    )


def parse_price_table(data: Any, origin: str = "price table") -> dict[str, AcceleratorPrice]:
    """Validates a parsed price table (``{accelerators: {name: {...}}}``).

    Args:
        data: the YAML's content.
        origin: where it came from, for error messages.

    Returns:
        name -> price entry.

    Raises:
        PriceTableError: a malformed table or entry, a negative or missing price, an unknown kind.
    """
    if not isinstance(data, Mapping) or set(data) != {"accelerators"} or not isinstance(data["accelerators"], Mapping):
        raise PriceTableError(
            f"{origin}: expected a mapping with one key 'accelerators' (name -> {{price_per_hour, kind, "
            f"cores, label, source}}), got {str(data)[:200]!r}"
        )
    return {str(name): _entry(str(name), entry, origin) for name, entry in data["accelerators"].items()}


def load_price_table(path: Optional[str] = None) -> dict[str, AcceleratorPrice]:
    """Loads the default price table, with the entries of a user's table on top.

    Args:
        path: a YAML file in the format of ``prices.yaml``; None for the defaults alone.

    Returns:
        name -> price entry.

    Raises:
        PriceTableError: the file is missing or malformed.
    """
    table = parse_price_table(yaml.safe_load(DEFAULT_PRICE_TABLE.read_text()), str(DEFAULT_PRICE_TABLE))
    if path:
        file = Path(path)
        if not file.is_file():
            raise PriceTableError(f"price table {path} does not exist; give a YAML file like {DEFAULT_PRICE_TABLE}")
        table.update(parse_price_table(yaml.safe_load(file.read_text()), str(path)))
    return table


def lookup(table: Mapping[str, AcceleratorPrice], accelerator: str) -> AcceleratorPrice:
    """The price entry of an accelerator; an unknown name is an error listing the known ones."""
    if accelerator not in table:
        raise PriceTableError(
            f"no price for accelerator {accelerator!r}; the price table knows {', '.join(sorted(table))}. "
            "Use one of those names or add it to your price table (BenchmarkConfig.price_table)."
        )
    return table[accelerator]


def hourly_cost(table: Mapping[str, AcceleratorPrice], accelerator: str) -> tuple[float, float]:
    """The accelerator's price and its host's (0 when none is needed), $/hour.

    Raises:
        PriceTableError: no entry for the accelerator, or its ``host`` names no entry.
    """
    entry = lookup(table, accelerator)
    if entry.host is None:
        return entry.price_per_hour, 0.0
    if entry.host not in table:
        raise PriceTableError(
            f"price table: {accelerator!r} names the host {entry.host!r}, which has no entry; add it or drop host"
        )
    return entry.price_per_hour, table[entry.host].price_per_hour


def images_per_dollar(images_per_sec: float, price_per_hour: float) -> Optional[float]:
    """Images processed for one dollar at a throughput and an hourly price; None when free."""
    if price_per_hour < 0 or images_per_sec < 0:
        raise ValueError(f"expected non-negative values, got {images_per_sec} images/s at ${price_per_hour}/h")
    if price_per_hour == 0:
        return None  # free hardware (a laptop): images per dollar is unbounded, not a number
    return images_per_sec * 3600.0 / price_per_hour


# ---------------------------------------------------------------------------------------------
# The price key: what a step runs on, as the price table names it.
# ---------------------------------------------------------------------------------------------

LEGACY_TPU_PREFIX = "cloud-tpus.google.com/"
GKE_TPU_RESOURCE = "google.com/tpu"
GPU_RESOURCE = "nvidia.com/gpu"


def price_key(accelerator_type: str, accelerator_count: int, cpus: Optional[int] = None) -> str:
    """The price table's key for a pod's accelerator request: the one mapping every step uses.

    - no accelerator (``""`` or a count of 0): ``cpu-<cpus>``, the CPUs the step has (this
      machine's where ``cpus`` is None);
    - the legacy TPU Node resource ``cloud-tpus.google.com/<v>`` x N: ``tpu-<v>-<N>``
      (``preemptible-v2`` x 8: ``preemptible-tpu-v2-8``);
    - ``nvidia.com/gpu`` x N: ``gpu-<N>``;
    - a compile-time preset's name (no ``/``: ``gke-tpu-v5e-2x4``, ``tpu-v3-8``, ``gpu-1``), which
      a pipeline compiled for one passes as the type: :func:`preset_price_key`;
    - anything else, ``google.com/tpu`` included (its generation is in node selectors, not in the
      request: use :func:`preset_price_key`): the type's last path part and the count.

    Args:
        accelerator_type: the resource limit's name, ``""`` for none.
        accelerator_count: how many of it.
        cpus: the step's CPUs, for a CPU-only step.
    """
    if not accelerator_type or accelerator_count <= 0:
        return f"cpu-{cpus or step_cpus()}"
    if accelerator_type.startswith(LEGACY_TPU_PREFIX):
        version = accelerator_type[len(LEGACY_TPU_PREFIX) :]
        if version.startswith("preemptible-"):
            return f"preemptible-tpu-{version[len('preemptible-') :]}-{accelerator_count}"
        return f"tpu-{version}-{accelerator_count}"
    if accelerator_type == GPU_RESOURCE:
        return f"gpu-{accelerator_count}"
    if "/" not in accelerator_type:
        return preset_price_key(accelerator_type)
    return f"{accelerator_type.rsplit('/', 1)[-1]}-{accelerator_count}"


def step_cpus() -> int:
    """The CPUs this process may use: its cgroup's CPU limit (a pod's ``limits.cpu``), rounded up,
    else the machine's cores.
    """
    import os

    try:
        with open("/sys/fs/cgroup/cpu.max") as f:  # cgroup v2: "<quota> <period>" or "max <period>"
            quota, period = f.read().split()[:2]
        if quota != "max":
            return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError):
        pass
    return os.cpu_count() or 1


def preset_price_key(preset: str) -> str:
    """The price table's key of a compile-time accelerator preset (``pipelines/accelerators.py``).

    A preset is named for what it runs on (``tpu-v3-8``, ``gke-tpu-v5e-2x4``, ``cpu``), so its
    name is its key; ``preemptible-v2-8`` is ``preemptible-tpu-v2-8``; a GPU preset
    ``gpu-<n>[-<gpu type>]`` is priced as ``gpu-<n>`` (as the train step prices ``nvidia.com/gpu`` x n).
    """
    gpus = re.fullmatch(r"gpu-(\d+)(?:-.+)?", preset)
    if gpus:
        return f"gpu-{gpus[1]}"
    if preset.startswith("preemptible-v"):  # preemptible-v2-8: the table's preemptible-tpu-v2-8
        return "preemptible-tpu-" + preset[len("preemptible-") :]
    return preset


def price_in(table: Mapping[str, AcceleratorPrice], key: str) -> Optional[float]:
    """$/hour with the host's share of a price key in a loaded table; None when the table has none.

    A ``cpu-<n>`` key the table lacks is priced as n times its ``cpu-1``.
    """
    cores = re.fullmatch(r"cpu-(\d+)", key)
    if key not in table and cores and "cpu-1" in table:
        # CPUs the table does not list are priced per core, at its one-core price.
        return int(cores[1]) * sum(hourly_cost(table, "cpu-1"))
    return sum(hourly_cost(table, key)) if key in table else None


def price_of(
    accelerator_type: str, accelerator_count: int, price_table: Optional[str] = None, cpus: Optional[int] = None
) -> tuple[str, float]:
    """(price key, $/hour with the host's share) of a pod's accelerator request.

    A ``cpu-<n>`` key the table lacks is priced as n times its ``cpu-1``.

    Raises:
        PriceTableError: the table has no entry for the key; the message names the table and the
            keys it has.
    """
    key = price_key(accelerator_type, accelerator_count, cpus)
    table = load_price_table(price_table)
    per_hour = price_in(table, key)
    if per_hour is not None:
        return key, per_hour
    if key not in table:
        where = f"{price_table} over {DEFAULT_PRICE_TABLE}" if price_table else str(DEFAULT_PRICE_TABLE)
        raise PriceTableError(
            f"no price for {key!r} ({accelerator_type or 'no accelerator'} x {accelerator_count}) in the price table "
            f"{where}; it knows {', '.join(sorted(table))}. Add {key!r} to a price table of your own "
            "(train.price_table), or drop cost_budget"
        )
    own, host = hourly_cost(table, key)
    return key, own + host
