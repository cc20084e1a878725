"""The detector's quality during training: COCO AP of the model in memory on a validation sample.

Scored through the export's own ``serving_default`` function (decode, letterbox, NMS, boxes in
the original pixels) and pycocotools, as the evaluate step scores the exported model, on a bounded
sample so that an evaluation stays cheap beside the training it watches.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Optional

import keras

if TYPE_CHECKING:
    from trainer.tasks.detection.options import DetectorOptions
    from trainer.tfrecords import DatasetInfo

log = logging.getLogger(__name__)

# Validation images scored per evaluation (the first ones of the split, the same every time).
VALIDATION_IMAGES = 256
BATCH = 64


class ValidationAP(keras.callbacks.Callback):
    """Adds ``val_ap`` and ``val_ap50`` to each epoch's logs (on a ``limit``-image sample).

    Args:
        info: the dataset's manifest.
        split: the validation split.
        opts: the detector's options (the fitted ones: image size, NMS settings).
        limit: images scored.
    """

    def __init__(self, info: DatasetInfo, split: str, opts: DetectorOptions, limit: int = VALIDATION_IMAGES) -> None:
        super().__init__()
        self.info, self.split, self.opts, self.limit = info, split, opts, limit
        self._records: Optional[list[dict[str, Any]]] = None
        self._serve: Any = None
        self.seconds: list[float] = []

    def score(self) -> dict[str, float]:
        """``{"val_ap", "val_ap50"}`` of the model as it is now."""
        from trainer.tasks.detection.evaluation import coco_evaluate
        from trainer.tasks.detection.export import predict_in_process, serving_functions
        from trainer.tasks.detection.input import read_detection_split

        started = time.perf_counter()
        if self._records is None:
            self._records = read_detection_split(self.info, self.split, self.limit)
        if self._serve is None:
            self._serve = serving_functions(self.model, list(self.info.classes), self.opts)[0]
        predictions = predict_in_process(self._serve, [r["encoded"] for r in self._records], BATCH)
        result = coco_evaluate(self._records, predictions, list(self.info.classes))
        self.seconds.append(time.perf_counter() - started)
        return {"val_ap": result.metrics["ap"], "val_ap50": result.metrics["ap50"]}

    def on_epoch_end(self, epoch: int, logs: Optional[dict[str, Any]] = None) -> None:
        if logs is not None and self._records != []:
            logs.update(self.score())
