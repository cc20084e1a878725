"""The classifier's input shape for a dataset whose images differ in size (a folder of photos).

A folder converted without ``resize`` keeps every photo as it was, so its ``dataset.json`` has no
single image size. The classifier then takes square images whose side is fitted to the photos:

- the median image's short side, rounded down to a multiple of 32, in 32..224
  (:func:`~trainer.tasks.classification.model.fitted_side`), what a transfer classifier sees;
- small images (the median at most ``SMALL_SIDE`` px a side) keep their median long side, for
  the notebook's CNN;
- ``model_options.image_size`` when the user sets it;
- three channels when any sampled image has colour, else one (grayscale).

Training resizes every decoded image to that shape (bilinear, antialiased), as the exported
``serving_default`` does with any image it is sent, so what is served matches what was trained.
The sizes come from the records' ``image/height``, ``image/width`` and ``image/channels`` features
(:func:`read_size_sample`; no image is decoded). :func:`mixed_input_shape` is pure.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional

import numpy as np

if TYPE_CHECKING:
    from trainer.tfrecords import DatasetInfo

SMALL_SIDE = 64  # images up to this side go to the notebook's CNN
SAMPLE = 2000  # records whose sizes are read, spread over every shard


@dataclasses.dataclass(frozen=True)
class SizeSample:
    """The sizes of a sample of a dataset's images: one row per image."""

    heights: np.ndarray
    widths: np.ndarray
    channels: np.ndarray


def mixed_input_shape(sample: SizeSample, image_size: Optional[int]) -> tuple[tuple[int, int, int], str]:
    """``((side, side, channels), why)`` for images of mixed sizes (see the module)."""
    from trainer.tasks.classification.model import fitted_side

    if len(sample.heights) == 0:
        raise ValueError("no image sizes to fit: the dataset's splits are empty")
    height, width = int(np.median(sample.heights)), int(np.median(sample.widths))
    channels = 3 if int(np.max(sample.channels)) >= 3 else 1
    if image_size is not None:
        side, rule = int(image_size), "model_options.image_size"
    elif max(height, width) <= SMALL_SIDE:
        side, rule = max(height, width), f"the median's long side (at most {SMALL_SIDE} px)"
    else:
        side, rule = fitted_side(height, width), "the median's short side, to a multiple of 32 in 32..224"
    sides = np.concatenate([sample.heights, sample.widths])
    why = (
        f"images of mixed sizes ({int(sides.min())}..{int(sides.max())} px a side, median {height}x{width}, "
        f"{len(sample.heights)} sampled), each resized to {side}x{side}x{channels} ({rule})"
    )
    return (side, side, channels), why


def read_size_sample(info: DatasetInfo, limit: int = SAMPLE) -> SizeSample:
    """The stored sizes of up to ``limit`` records spread over every shard of every split.

    Raises:
        DatasetError: a split's shards are missing.
    """
    from trainer import data

    keys = ("image/height", "image/width", "image/channels")
    rows: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    for batch in data.sample_features(info, list(info.splits), keys, limit):
        for k in keys:
            rows[k].append(batch[k].numpy().reshape(-1))
    column = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in rows.items()}
    return SizeSample(column["image/height"], column["image/width"], column["image/channels"])
