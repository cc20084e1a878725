"""The convert step's settings (``convert:`` in a whole-run file): how a source becomes TFRecords.

No TensorFlow, no kfp.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import ClassVar, Optional

from trainer.configbase import ConfigBase

DEFAULT_SPLITS = {"train": 0.8, "validation": 0.1, "test": 0.1}


@dataclasses.dataclass(frozen=True)
class ConvertConfig(ConfigBase):
    """How a source of images becomes sharded TFRecords.

    Attributes:
        source: a path or gs:// URI (image folder, CSV/JSONL manifest, .npz, IDX folder or COCO
            JSON), or a built-in dataset name: ``fashion-mnist`` or ``digits`` (classification), or
            ``shapes`` (detection: 3000 generated images of squares, circles and triangles, made once
            into ``~/.cache/lean-tpu-pipelines``; ``shapes:<count>`` for another count).
        source_format: one of the source kinds; ``None`` detects it from the source.
        splits: split name -> share, used when the source does not give splits; must add up to 1.
        limit_per_split: keep at most this many examples per split (a quick subset), or all.
        stratify: assign splits per class so every split keeps the class balance.
        split_by: what a split is drawn from: ``path`` (each item's key: its path or its index) or
            ``content`` (each image's sha256, so that copies of one image under two names always
            land in one split: the way out of leakage between splits); ``content`` reads every
            file once while planning, and applies to items whose source gives no split.
        target_shard_mb: shard size to aim for.
        power_of_two_shards: round each split's shard count up to a power of two.
        compression: ``GZIP`` or ``None``.
        resize: ``[height, width]`` to resize (and re-encode) images to, or ``None`` to keep bytes.
        resize_mode: how resize keeps the aspect ratio: ``crop`` or ``pad``.
        workers: worker processes; ``None`` uses every core.
        seed: salt of the split hash and of any sampling.
        classes: the declared class names (manifest labels are names or indices into them);
            ``None`` takes them from the source.
        parent: a dataset folder (local or gs://) this conversion grows from: only the items it
            (and its own parents) lack are converted, into new shards, each split by its own hash
            (never stratified) and ``limit_per_split`` counting the parents' records;
            ``dataset.json`` lists the parents' shards too. ``None``: a whole conversion.
    """

    _section: ClassVar[str] = "convert."

    source: str = "fashion-mnist"
    source_format: Optional[str] = None
    splits: Mapping[str, float] = dataclasses.field(default_factory=lambda: dict(DEFAULT_SPLITS))
    limit_per_split: Optional[int] = None
    stratify: bool = False
    split_by: typing.Literal["path", "content"] = "path"
    target_shard_mb: float = 100.0
    power_of_two_shards: bool = False
    compression: Optional[typing.Literal["GZIP"]] = None
    resize: Optional[tuple[int, int]] = None
    resize_mode: typing.Literal["crop", "pad"] = "crop"
    workers: Optional[int] = None
    seed: int = 0
    classes: Optional[tuple[str, ...]] = None
    parent: Optional[str] = None

    def validate(self) -> None:
        if self.classes is not None and (not self.classes or len(set(self.classes)) != len(self.classes)):
            self._fail("classes", f"must be distinct names, at least one, or null; got {list(self.classes)}")
        if not self.source:
            self._fail("source", "is empty; give a path, a gs:// URI or 'fashion-mnist'")
        if not self.splits:
            self._fail("splits", "is empty; give e.g. {train: 0.8, validation: 0.1, test: 0.1}")
        if any(v < 0 for v in self.splits.values()):
            self._fail("splits", f"shares must be >= 0, got {dict(self.splits)}")
        total = sum(self.splits.values())
        if abs(total - 1.0) > 1e-6:
            self._fail("splits", f"shares must add up to 1, they add up to {total:g}: {dict(self.splits)}")
        if self.limit_per_split is not None and self.limit_per_split < 1:
            self._fail("limit_per_split", f"must be >= 1 or null, got {self.limit_per_split}")
        if self.target_shard_mb <= 0:
            self._fail("target_shard_mb", f"must be > 0, got {self.target_shard_mb}")
        if self.resize is not None and min(self.resize) < 1:
            self._fail("resize", f"must be two positive sizes [height, width], got {list(self.resize)}")
        if self.workers is not None and self.workers < 1:
            self._fail("workers", f"must be >= 1 or null, got {self.workers}")
