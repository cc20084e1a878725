"""The select step's configuration: which pool, scored with which model, how many picks and how.

Imports neither TensorFlow nor kfp: the command line's ``--help`` stays instant.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Optional

from components.serving.config import STAGES
from trainer.config import ConfigBase, ConfigError

# The diversity steps: greedy on perceptual hashes, k-center on them, or none.
DIVERSITY = ("hash", "kcenter", "none")
# Of the 64 bits of two images' perceptual hashes, at most this many differ for near-copies
# (the validate step's near-duplicates too).
NEAR_BITS = 4


@dataclasses.dataclass(frozen=True)
class SelectConfig(ConfigBase):
    """One selection of images to label (docs/labels.md, "Select the next images to label").

    Attributes:
        data: the pool of unlabelled images: a folder or ``gs://`` prefix (every image under it),
            a CSV or JSONL list, a COCO file, an array file or any other source kind batch
            prediction reads (a converted dataset is labelled already: give its source instead).
        output_uri: where the pick goes: ``selection.json``, ``images/`` (the picked images),
            ``label_studio.json``, ``cvat_coco.zip``, ``yolo/``, ``report.html``, ``report.md``.
        stage: score with what this stage serves (``demo``, ``staging``, ``prod``); None: ``model_dir``.
        model_name: the served model name at ``stage``; None: the one it serves. Only with ``stage``.
        model_dir: a model folder (``saved_model/`` inside) or a SavedModel folder, instead of a stage's.
        stages_root: the stage store (only with ``stage``); None: ``<pipeline root>/stages``.
        dataset: the labelled dataset (a converted dataset folder): an image of the pool whose
            sha256 one of its records has is never picked; None: none left out.
        count: how many images to pick.
        strategy: how images are ranked: ``auto`` (the task's first), ``random`` (a seeded
            random order: the baseline), or one the model's task offers (classification:
            ``least_confidence``, ``margin``, ``entropy``; detection: ``uncertainty``,
            ``threshold``, ``flip``).
        selection_options: the model's task's own settings of a selection, which it reads into
            its typed options (detection: ``threshold``, ``match_iou``); empty: its defaults.
        diversity: how the picks are kept apart: ``hash`` (in rank order, an image within
            ``near_bits`` of a pick's perceptual hash is passed over), ``kcenter`` (among the
            ``4 x count`` best ranked, each next pick the farthest from the picks, in hash bits,
            near-copies never), or ``none``.
        near_bits: two images whose 64-bit perceptual hashes differ in at most this many bits are
            near-copies: never both picked (``hash``, ``kcenter``).
        seed: the random order's seed (``random``, and ties).
        batch_size: images per model call.
        read_threads: threads reading image bytes.
    """

    _section: ClassVar[str] = "select."

    data: str = ""
    output_uri: str = ""
    stage: Optional[str] = None
    model_name: Optional[str] = None
    model_dir: Optional[str] = None
    stages_root: Optional[str] = None
    dataset: Optional[str] = None
    count: int = 100
    strategy: str = "auto"
    selection_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    diversity: str = "hash"
    near_bits: int = NEAR_BITS
    seed: int = 0
    batch_size: int = 64
    read_threads: int = 8

    def validate(self) -> None:
        if not self.data:
            self._fail(
                "data", "is empty; give the pool: a folder, gs:// prefix, list or any source batch prediction reads"
            )
        if not self.output_uri:
            self._fail("output_uri", "is empty; give the folder or gs:// URI the pick is written under")
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
        if self.count < 1:
            self._fail("count", f"must be >= 1, got {self.count}")
        if not self.strategy:
            self._fail("strategy", "is empty; give auto, random or one of the model's task's strategies")
        if self.diversity not in DIVERSITY:
            self._fail("diversity", f"expected one of {list(DIVERSITY)}, got {self.diversity!r}")
        if not 0 <= self.near_bits <= 32:
            self._fail("near_bits", f"must be 0..32 of the hash's 64 bits, got {self.near_bits}")
        for name in ("batch_size", "read_threads"):
            if getattr(self, name) < 1:
                self._fail(name, f"must be >= 1, got {getattr(self, name)}")
        from trainer.tasks import TaskError, check_step_options  # no TensorFlow: the task table only

        try:
            check_step_options("selection_options", self.selection_options)
        except TaskError as err:
            raise ConfigError(f"{self._section}{err}") from None
