"""The export step's settings (``export:`` in a whole-run file). No TensorFlow, no kfp."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar, Optional

from trainer.configbase import ConfigBase
from trainer.export import formats


@dataclasses.dataclass(frozen=True)
class ExportConfig(ConfigBase):
    """Which portable formats a blessed model gets, how each is checked, timed and priced.

    Attributes:
        export_formats: the formats converted, checked and priced (``litert``, ``litert_int8``,
            ``onnx``, ``onnx_int8``, ``openvino``, ``openvino_int8``: converted from the ONNX files,
            which the export then writes too); empty: no export.
        export_tolerances: per format, the points of the task's headline metric (accuracy,
            AP@0.5) it may lose against the float32 rebuild through its own runtime; a format
            without one is refused (fail closed).
        eval_images: test images each format is scored and compared on (the first of the split).
        calibration_images: training images an int8 format is calibrated on (seeded draw).
        batch_size: the batch timed for images/s and images per dollar (the benchmark's).
        timed_batches: timed calls per batch size (batch 1 and ``batch_size``), after one warm-up.
        onnx_scheme: onnxruntime's int8 format: ``qdq`` (kept the detector's AP), or ``qoperator``
            (faster, and lost a fifth of it: for comparison).
        seed: the calibration draw's seed.
        accelerator: the price key of what this runs on (the price table's).
        price_table: a YAML price table over the defaults; None: the defaults.
    """

    _section: ClassVar[str] = "export."

    export_formats: tuple[str, ...] = ("litert", "litert_int8", "onnx", "onnx_int8")
    export_tolerances: Mapping[str, float] = dataclasses.field(default_factory=lambda: dict(formats.DEFAULT_TOLERANCES))
    eval_images: int = 300
    calibration_images: int = 200
    batch_size: int = 64
    timed_batches: int = 5
    onnx_scheme: str = "qdq"
    seed: int = 0
    accelerator: str = "cpu-8"
    price_table: Optional[str] = None

    def validate(self) -> None:
        try:
            formats.check_formats(self.export_formats)
            formats.check_tolerances(self.export_tolerances)
        except formats.ExportError as err:
            raise self._error(str(err)) from None
        for name in ("eval_images", "calibration_images", "batch_size", "timed_batches"):
            if getattr(self, name) < 1:
                self._fail(name, f"must be >= 1, got {getattr(self, name)}")
        if self.onnx_scheme not in ("qdq", "qoperator"):
            self._fail("onnx_scheme", f"must be qdq or qoperator, got {self.onnx_scheme!r}")
