"""The batch prediction step's configuration: what is scored, with which model, where it goes.

Imports neither TensorFlow nor kfp: the command line's ``--help`` stays instant.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Optional

from components.serving.config import STAGES
from trainer.config import ConfigBase, ConfigError


@dataclasses.dataclass(frozen=True)
class PredictConfig(ConfigBase):
    """One batch prediction (docs/batch_prediction.md).

    Attributes:
        data: the images: a folder or ``gs://`` prefix (every image file under it), a CSV or JSONL
            list of paths (column ``path``, optional ``label``; relative paths are relative to the
            list's folder), a COCO file (``.json`` with ``images``; its ids and, where it has
            them, its boxes as labels), or a converted dataset folder (``dataset.json`` inside;
            ``split``'s records, their labels included).
        split: the split scored when ``data`` is a converted dataset.
        stage: score what this stage serves (``demo``, ``staging``, ``prod``), resolved when the
            shards are planned and pinned to that version; None: ``model_dir``.
        model_name: the served model name at ``stage``; None: the task's (``classifier``,
            ``detector``). Only with ``stage``.
        model_dir: a model folder (``saved_model/`` inside) or a SavedModel folder, scored
            instead of a stage's model.
        stages_root: the stage store (only with ``stage``).
        output_uri: where the predictions go (local folder or ``gs://``): ``manifest.json``,
            ``shard-NNNNN.jsonl`` and their summaries, ``summary.json``; a re-run on the same
            input and model reuses the shards already written there.
        batch_size: images per model call (the case study's 64).
        score_threshold: predictions scoring below it are left out; 0 keeps all the model returns
            (a detector's export already leaves out boxes below its own ``score_threshold``, 0.05).
        top_k: the most predictions per image (classes or boxes); 0: the task's (5 classes, 100
            boxes).
        prediction_options: the model's task's own settings of a batch prediction, which it reads
            into its typed options (a key no task takes, or a wrong value, fails, naming the keys
            it takes); detection: ``{coco: true}``, also write ``coco_results.json`` (pycocotools'
            results format).
        images_per_shard: images one shard scores; the shards are fanned out over pods.
        images_per_sec: the rate the cost estimate assumes (the inference benchmark's images/s
            for this model and accelerator); None: the rate recorded with the stage's version, or
            of an earlier run of this output, else no estimate.
        read_threads: threads reading image bytes per shard (they overlap gs:// latency).
        price_table: a YAML price table over the defaults (``trainer/budget/prices.yaml``'s format).
        serving_format: the form scored: ``saved_model`` or a portable format of the model's export
            (``litert``, ``litert_int8``, ``onnx``, ``onnx_int8``, ``openvino``, ``openvino_int8``,
            docs/export.md); None: what the stage serves it in (a model folder: its SavedModel).
    """

    _section: ClassVar[str] = "predict."
    _renamed: ClassVar[Mapping[str, str]] = {"coco": "prediction_options.coco"}

    data: str = ""
    split: str = "test"
    stage: Optional[str] = None
    model_name: Optional[str] = None
    model_dir: Optional[str] = None
    stages_root: Optional[str] = None
    output_uri: str = ""
    batch_size: int = 64
    score_threshold: float = 0.0
    top_k: int = 0
    prediction_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    images_per_shard: int = 5000
    images_per_sec: Optional[float] = None
    read_threads: int = 8
    price_table: Optional[str] = None
    serving_format: Optional[str] = None

    def validate(self) -> None:
        if not self.data:
            self._fail("data", "is empty; give a folder, gs:// prefix, CSV/JSONL list, COCO file or dataset folder")
        if not self.output_uri:
            self._fail("output_uri", "is empty; give the folder or gs:// URI the predictions are written under")
        if (self.stage is None) == (self.model_dir is None):
            self._fail(
                "stage",
                "give either a stage (with model_name, the model that stage serves) or model_dir (a model "
                f"folder), not {'both' if self.stage else 'neither'}",
            )
        if self.stage is not None and self.stage not in STAGES:
            self._fail("stage", f"expected one of {list(STAGES)}, got {self.stage!r}")
        if self.model_name is not None and self.stage is None:
            self._fail("model_name", "names a model served at a stage; give stage as well, or only model_dir")
        if self.batch_size < 1:
            self._fail("batch_size", f"must be >= 1, got {self.batch_size}")
        if not 0 <= self.score_threshold <= 1:
            self._fail("score_threshold", f"must be a score in [0, 1], got {self.score_threshold}")
        if self.top_k < 0:
            self._fail("top_k", f"must be >= 0 (0: the task's), got {self.top_k}")
        from trainer.tasks import TaskError, check_step_options  # no TensorFlow: the task table only

        try:
            check_step_options("prediction_options", self.prediction_options)
        except TaskError as err:
            raise ConfigError(f"{self._section}{err}") from None
        if self.images_per_shard < 1:
            self._fail("images_per_shard", f"must be >= 1, got {self.images_per_shard}")
        if self.images_per_sec is not None and self.images_per_sec <= 0:
            self._fail("images_per_sec", f"must be > 0 (or null for the recorded rate), got {self.images_per_sec}")
        if self.read_threads < 1:
            self._fail("read_threads", f"must be >= 1, got {self.read_threads}")
        self._check_format()

    def _check_format(self) -> None:
        from trainer.export import serving  # no TensorFlow: the names only

        try:
            name = serving.check_name(self.serving_format or serving.SERVED)
        except serving.ServingFormatError as err:
            raise ConfigError(f"{self._section}{err}") from None
        if name == serving.AUTO:
            choices = ", ".join(c for c in serving.CHOICES if c != serving.AUTO)
            self._fail("serving_format", f"scores one form: choose one of {choices} (empty: what the stage serves)")
