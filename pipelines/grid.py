"""The fan-out of a grid, shared by the ``sweep`` and ``gpu_vs_tpu`` pipelines.

``dsl.ParallelFor(parallelism=...)`` takes a literal only in kfp 2.17.3 (a pipeline parameter is
refused), so how many cells run at once, and so how many accelerators a grid asks for at once, is
a compile-time setting: ``make compile SWEEP_PARALLELISM=4`` (``pipelines.tools.compile
--sweep-parallelism``, or the ``SWEEP_PARALLELISM`` environment variable read by
``pipelines.tools.compile`` when it runs). Pipeline modules with a grid define ``build(parallelism)``;
their ``pipeline`` is ``build(DEFAULT_PARALLELISM)``. Nothing reads the environment at import time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kfp import dsl

# At most this many cells at once by default: four accelerators (one TPU v3-8 each, say).
DEFAULT_PARALLELISM = 4
PARALLELISM_ENV = "SWEEP_PARALLELISM"


def parallelism_from(value: Any) -> int:
    """A parallelism setting from a flag or the environment: an integer >= 0 (0: no limit).

    Raises:
        ValueError: not a whole number >= 0.
    """
    text = str(value).strip()
    if not text.isdigit():
        raise ValueError(
            f"{PARALLELISM_ENV}: expected a whole number >= 0 (cells run at once; 0 for no limit), got {value!r}"
        )
    return int(text)


def parallelism_of(environ: Mapping[str, str]) -> int:
    """The compile-time parallelism: ``SWEEP_PARALLELISM`` when set, else the default."""
    value = environ.get(PARALLELISM_ENV, "")
    return parallelism_from(value) if value.strip() else DEFAULT_PARALLELISM


def fan_out(items: Any, parallelism: int, name: str | None = None) -> dsl.ParallelFor:
    """``dsl.ParallelFor`` over a grid's cells with the compile-time concurrency limit."""
    return dsl.ParallelFor(items, parallelism=parallelism or None, name=name)
