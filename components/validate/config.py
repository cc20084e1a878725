"""The validate step's configuration: the baseline, the policy, the allowlist and the thresholds.

Imports neither TensorFlow nor kfp: the command line's ``--help`` stays instant.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar, Optional

from components.validate.policy import PolicyError, check_policy
from trainer.config import ConfigBase

# The defaults of the thresholds, named so that the docs and the messages can quote them.
MIN_CLASS_SHARE = 0.01  # a class under 1 % of a split's images (or objects) is rare
MIN_BOX_PX = 2.0  # a box narrower or lower than 2 pixels is degenerate
FULL_BOX_SHARE = 0.98  # a box covering 98 % of its image or more is degenerate
SIZE_OUTLIER_FACTOR = 4.0  # an image side under median / 4 or over median * 4 is an outlier
MAX_SHARE_SHIFT = 0.10  # L-infinity distance between a split's class shares and the baseline's
MAX_SHARE_JS = 0.10  # Jensen-Shannon distance (base 2, 0..1) between the same shares
MAX_SIZE_SHIFT = 0.25  # relative change of a split's median image height or width
MAX_BOX_SHIFT = 0.25  # relative change of a split's median box side, as a share of the image side
MAX_RECORDS = 20  # record keys a finding lists (its count says how many there are in all)
MAX_COLUMN_VALUES = 20  # values per extra/ column the statistics list (the most frequent)
NEAR_DUPLICATE_BITS = 4  # of the 64 bits of two images' perceptual hashes that may differ


@dataclasses.dataclass(frozen=True)
class ValidateConfig(ConfigBase):
    """One validation of a converted dataset (docs/validation.md).

    Attributes:
        baseline: a ``stats.json`` of an earlier validation (or the folder holding it), or a
            converted dataset (such as the one a served model was trained on), to compare with:
            new and missing classes, shifts of class shares, image and box sizes, a changed test
            split. None skips the drift checks; an unreadable one is a finding.
        validation_policy: kind -> ``error``, ``warn`` or ``ignore``, over the defaults (leakage
            and label_conflict ``error``, every other kind ``warn``).
        allow: record keys (``image/source_key``) known and accepted: they are left out of every
            finding, and a finding left without records disappears.
        test_split: the split whose content must not change between versions.
        min_class_share: a class with images (or objects) under this share of a split's is rare.
        min_box_px: a box narrower or lower than this many pixels is degenerate.
        full_box_share: a box covering this share of its image's area or more is degenerate.
        size_outlier_factor: an image whose height or width is under the dataset's median / this
            or over median * this is an outlier.
        max_share_shift: the largest change of one class's share of a split (L-infinity distance)
            against the baseline.
        max_share_js: the largest Jensen-Shannon distance (base 2, 0..1) between a split's class
            shares and the baseline's.
        max_size_shift: the largest relative change of a split's median image height or width.
        max_box_shift: the largest relative change of a split's median box side (a share of
            the image's side).
        max_records: the record keys a finding lists; its count says how many there are in all.
        max_column_values: the values per ``extra/`` column the statistics list, most frequent first.
        near_duplicates: also look for near-duplicates across splits (the same photo re-encoded,
            resized or lightly edited) by a perceptual hash (``imagehash.phash``); every image is
            decoded, which takes far longer than the other checks. Off by default.
        near_duplicate_bits: two images are near-duplicates when at most this many of their
            hashes' 64 bits differ (0: equal hashes only).
    """

    _section: ClassVar[str] = "validate."

    baseline: Optional[str] = None
    validation_policy: Mapping[str, str] = dataclasses.field(default_factory=dict)
    allow: tuple[str, ...] = ()
    test_split: str = "test"
    min_class_share: float = MIN_CLASS_SHARE
    min_box_px: float = MIN_BOX_PX
    full_box_share: float = FULL_BOX_SHARE
    size_outlier_factor: float = SIZE_OUTLIER_FACTOR
    max_share_shift: float = MAX_SHARE_SHIFT
    max_share_js: float = MAX_SHARE_JS
    max_size_shift: float = MAX_SIZE_SHIFT
    max_box_shift: float = MAX_BOX_SHIFT
    max_records: int = MAX_RECORDS
    max_column_values: int = MAX_COLUMN_VALUES
    near_duplicates: bool = False
    near_duplicate_bits: int = NEAR_DUPLICATE_BITS

    def validate(self) -> None:
        try:
            check_policy(self.validation_policy)
        except PolicyError as err:
            self._fail("validation_policy", str(err))
        if self.baseline is not None and not self.baseline:
            self._fail("baseline", "is empty; give a stats.json (or its folder), or null for no drift checks")
        if not self.test_split:
            self._fail("test_split", "is empty; give the name of the split that must not change (e.g. test)")
        for name in ("min_class_share", "full_box_share", "max_share_shift", "max_share_js"):
            if not 0 <= getattr(self, name) <= 1:
                self._fail(name, f"must be a share in [0, 1], got {getattr(self, name)}")
        if self.min_box_px < 0:
            self._fail("min_box_px", f"must be >= 0 pixels, got {self.min_box_px}")
        if self.size_outlier_factor <= 1:
            self._fail(
                "size_outlier_factor", f"must be > 1 (4 flags sides under median/4), got {self.size_outlier_factor}"
            )
        for name in ("max_size_shift", "max_box_shift"):
            if getattr(self, name) <= 0:
                self._fail(name, f"must be > 0 (a relative change, 0.25 for 25 %), got {getattr(self, name)}")
        if not 0 <= self.near_duplicate_bits <= 16:
            self._fail("near_duplicate_bits", f"must be 0..16 of the hash's 64 bits, got {self.near_duplicate_bits}")
        for name in ("max_records", "max_column_values"):
            if getattr(self, name) < 1:
                self._fail(name, f"must be >= 1, got {getattr(self, name)}")
