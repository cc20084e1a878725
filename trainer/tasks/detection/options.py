"""The detector's options (``TrainConfig.model_options``): a preset, then overrides of its fields.

Defaults suit the built-in ``shapes`` data on a CPU; ``tpu-512`` is a ResNet-50-class RetinaNet
at 512 px. Types are checked by :class:`trainer.configbase.ConfigBase` (kfp.local hands ints
over as floats: a whole float is an int).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Optional

from trainer.configbase import ConfigBase, ConfigError
from trainer.tasks.base import TaskError

# Model presets: ``model_options: {preset: tpu-512}`` starts from one and overrides fields.
PRESETS: dict[str, dict[str, Any]] = {
    # Suits the built-in ``shapes`` data (64 px, 16-32 px objects) and a CPU: a small ResNet of
    # basic blocks, P3-P4, square anchors sized to the objects, one head convolution.
    "small": {},
    # A TPU v2-8/v3-8 run on real data at 512 px: ResNet-50-class bottleneck stacks, P3-P7,
    # the classic 9 anchors per location, four head convolutions. Batch 8 per core.
    "tpu-512": {
        "image_size": 512,
        "max_boxes": 100,
        "stackwise_filters": [64, 128, 256, 512],
        "stackwise_blocks": [3, 4, 6, 3],
        "stackwise_strides": [1, 2, 2, 2],
        "block_type": "bottleneck_block",
        "min_level": 3,
        "max_level": 7,
        "use_p5": True,
        "anchor_size": 4.0,
        "aspect_ratios": [0.5, 1.0, 2.0],
        "head_convs": 4,
    },
}


@dataclasses.dataclass(frozen=True)
class DetectorOptions(ConfigBase):
    """The detector's settings (``TrainConfig.model_options``); defaults suit the built-in data.

    Attributes:
        preset: ``small`` (the defaults) or ``tpu-512``; the other fields override it.
        image_size: the square input side images are letterboxed to.
        max_boxes: boxes kept per image (padded with -1 up to it).
        stem_filters: filters of the ResNet's first convolution.
        stackwise_filters: filters per ResNet stack (the first must be 64: keras-hub's ResNet).
        stackwise_blocks: blocks per stack.
        stackwise_strides: stride per stack.
        block_type: ``basic_block`` or ``bottleneck_block``.
        min_level: the finest pyramid level (P3 = stride 8).
        max_level: the coarsest pyramid level.
        use_p5: build P6/P7 from P5 (needs a backbone reaching P5).
        anchor_size: anchor side at a level, in units of the level's stride.
        num_scales: anchor scales per level.
        aspect_ratios: anchor aspect ratios.
        head_convs: convolutions in each prediction head before its output.
        warmup_steps: linear learning-rate warm-up, then cosine decay to 0.
        clipnorm: global gradient-norm clipping.
        score_threshold: the lowest score exported (the precision-recall curve needs low ones).
        nms_iou: per-class NMS overlap.
        max_detections: detections per image.
        weights: the whole detector to start from: a keras-hub RetinaNet preset (a name such as
            ``retinanet_resnet50_fpn_coco``, a ``kaggle://`` or ``hf://`` handle: downloaded, or a
            local or gs:// preset directory such as a detection run's ``preset/``), whose
            architecture and pixel scaling it brings and whose heads it keeps when the classes and
            anchors fit (else re-headed); or a ``.weights.h5`` of the detector these options build.
        backbone_weights: the image encoder to start from: a keras-hub preset of a ResNet (or of a
            RetinaNet, whose encoder is taken), or a ``.weights.h5`` of the encoder these options build.
    """

    _section: ClassVar[str] = "model_options."

    preset: str = "small"
    image_size: int = 64
    max_boxes: int = 32
    stem_filters: int = 64
    stackwise_filters: tuple[int, ...] = (64, 64, 128)
    stackwise_blocks: tuple[int, ...] = (1, 1, 1)
    stackwise_strides: tuple[int, ...] = (1, 2, 2)
    block_type: str = "basic_block"
    min_level: int = 3
    max_level: int = 4
    use_p5: bool = False
    anchor_size: float = 2.5
    num_scales: int = 3
    aspect_ratios: tuple[float, ...] = (1.0,)
    head_convs: int = 1
    warmup_steps: int = 30
    clipnorm: float = 10.0
    score_threshold: float = 0.05
    nms_iou: float = 0.5
    max_detections: int = 100
    weights: Optional[str] = None
    backbone_weights: Optional[str] = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> DetectorOptions:
        """Builds the options from a preset and overrides; an unknown key or bad value is a TaskError."""
        options = dict(options or {})
        preset = options.pop("preset", "small")
        if preset not in PRESETS:
            raise TaskError(f"model_options.preset: unknown {preset!r}; presets: {', '.join(PRESETS)}")
        merged = {**PRESETS[preset], **options, "preset": preset}
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(merged) - set(names))
        if unknown:
            raise TaskError(f"model_options.{unknown[0]}: unknown detector option; known: {', '.join(sorted(names))}")
        try:
            return cls(**merged)
        except ConfigError as err:
            raise TaskError(str(err)) from None

    def validate(self) -> None:
        """Relations keras-hub would otherwise fail on obscurely."""
        self.check()

    def check(self) -> None:
        """Relations keras-hub would otherwise fail on obscurely."""
        if self.image_size < 32 or self.image_size % (2**self.max_level):
            raise TaskError(
                f"model_options.image_size: {self.image_size} must be >= 32 and a multiple of 2**max_level "
                f"({2**self.max_level}) so every pyramid level has whole cells; e.g. "
                f"{max(32, round(self.image_size / 2**self.max_level) * 2**self.max_level)}"
            )
        if not self.stackwise_filters or self.stackwise_filters[0] != 64:
            raise TaskError("model_options.stackwise_filters: keras-hub's ResNet wants 64 filters in its first stack")
        if not len(self.stackwise_filters) == len(self.stackwise_blocks) == len(self.stackwise_strides):
            raise TaskError("model_options: stackwise_filters, stackwise_blocks and stackwise_strides differ in length")
        deepest = 1 + len(self.stackwise_filters)  # the stem reaches P2, each stack after the first one level more
        if self.min_level > self.max_level or self.max_level > deepest + (3 if self.use_p5 else 0):
            raise TaskError(
                f"model_options: levels P{self.min_level}-P{self.max_level} do not fit a backbone reaching "
                f"P{deepest} (use_p5 {self.use_p5})"
            )
        if self.max_boxes < 1 or self.max_detections < 1 or not 0 <= self.score_threshold < 1:
            raise TaskError("model_options: max_boxes and max_detections must be >= 1, score_threshold in [0, 1)")
