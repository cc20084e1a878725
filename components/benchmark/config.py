"""The benchmark step's settings (``benchmark:`` in a whole-run file). No TensorFlow, no kfp."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

from trainer.configbase import ConfigBase


@dataclasses.dataclass(frozen=True)
class BenchmarkConfig(ConfigBase):
    """How inference is timed (the case study's 3,200 images in batches of 64).

    Attributes:
        num_images: images timed, warm-up excluded.
        batch_size: images per request/batch.
        warmup_batches: batches run before timing starts (graph tracing, caches).
        rounds: timed rounds over all images; the median round is reported (a short round alone is
            at the mercy of a noisy machine). With ``target_spread``, the most rounds.
        target_spread: stop timing once the rounds so far (at least two) agree within this share:
            (slowest - fastest) / median round <= ``target_spread`` (``0.05``: within 5%); None
            always runs ``rounds`` rounds (a cluster run's default; ``make run`` sets 0.05).
        accelerator: the label of the accelerator this runs on, a key of the price table.
        price_table: path to a YAML price table ($/hour per accelerator, the format of
            ``trainer/budget/prices.yaml``) whose entries replace or add to the defaults;
            ``None`` uses the defaults.
        http: also time the served path (the local model server over REST).
    """

    _section: ClassVar[str] = "benchmark."

    num_images: int = 3200
    batch_size: int = 64
    warmup_batches: int = 3
    rounds: int = 3
    target_spread: Optional[float] = None
    accelerator: str = "cpu-8"
    price_table: Optional[str] = None
    http: bool = True

    def validate(self) -> None:
        if self.num_images < 1:
            self._fail("num_images", f"must be >= 1, got {self.num_images}")
        if self.batch_size < 1:
            self._fail("batch_size", f"must be >= 1, got {self.batch_size}")
        if self.warmup_batches < 0:
            self._fail("warmup_batches", f"must be >= 0, got {self.warmup_batches}")
        if self.rounds < 1:
            self._fail("rounds", f"must be >= 1, got {self.rounds}")
        if self.target_spread is not None and not 0 < self.target_spread < 1:
            self._fail("target_spread", f"must be a share in (0, 1) such as 0.05, or null, got {self.target_spread}")
        if not self.accelerator:
            self._fail("accelerator", "is empty; give the price table key of the hardware, e.g. cpu-8 or tpu-v3-8")
