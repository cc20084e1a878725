"""The detector's options (``TrainConfig.model_options``): a preset, then overrides of its fields; and
its settings of a batch prediction (``PredictConfig.prediction_options``).

Defaults suit the built-in ``shapes`` data on a CPU; ``tpu-512`` is a ResNet-50-class RetinaNet
at 512 px. Types are checked by :class:`trainer.configbase.ConfigBase` (kfp.local hands ints
over as floats: a whole float is an int).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar, Literal, Optional, Union

from trainer.configbase import ConfigBase, ConfigError
from trainer.tasks.base import TaskError

AUTO = "auto"
Auto = Literal["auto"]
BOX_LOSSES = ("l1", "huber", "giou", "l1+giou")
HEADS = ("dfl", "anchors")
# The options only one head reads: given to the other, a one-line error names what that head takes.
HEAD_ONLY = {
    "dfl": ("box_bins", "topk", "head_filters"),
    "anchors": ("box_loss", "anchor_size", "num_scales", "aspect_ratios"),
}
# The dfl head's frame: one square per location, of this many strides (only its centre and stride are read).
DFL_FRAME = {"anchor_size": 4.0, "num_scales": 1, "aspect_ratios": (1.0,)}
# Model presets: ``model_options: {preset: tpu-512}`` starts from one and overrides fields.
PRESETS: dict[str, dict[str, Any]] = {
    # A small ResNet of basic blocks and one head convolution, which suits a CPU; the input size,
    # levels, anchors, max_boxes and warm-up are fitted to the data (``fit.py``).
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
        "num_scales": 3,
        "aspect_ratios": [0.5, 1.0, 2.0],
        "head_convs": 4,
        "fpn_filters": 256,
        "head": "anchors",
    },
}


@dataclasses.dataclass(frozen=True)
class DetectorOptions(ConfigBase):
    """The detector's settings (``TrainConfig.model_options``); defaults suit the built-in data.

    Attributes:
        preset: ``small`` (the defaults) or ``tpu-512``; the other fields override it.
        image_size: the square input side images are letterboxed to; ``auto``: fitted to the object
            sizes (``trainer/tasks/detection/fit.py``), at most ``max_image_size``.
        max_image_size: the compute budget of the fit: the largest input size ``auto`` may choose.
        max_boxes: boxes kept per image (padded with -1 up to it); ``auto``: the most in a training image.
        stem_filters: filters of the ResNet's first convolution.
        stackwise_filters: filters per ResNet stack (the first must be 64: keras-hub's ResNet).
        stackwise_blocks: blocks per stack.
        stackwise_strides: stride per stack.
        block_type: ``basic_block`` or ``bottleneck_block``.
        min_level: the finest pyramid level (P3 = stride 8); ``auto``: fitted with the anchors.
        max_level: the coarsest pyramid level; ``auto``: fitted with the anchors.
        use_p5: build the levels past the backbone from P5; ``auto``: when they are needed.
        fpn_filters: the feature pyramid's width (keras-hub's RetinaNet fixes 256, which the
            ``tpu-512`` preset keeps; 128 here: on a CPU the narrower pyramid trained more steps and
            tighter boxes in the same minutes, ``docs/detection.md``).
        anchor_size: anchor side at a level, in units of the level's stride; ``auto``: fitted.
        num_scales: anchor scales per level; ``auto``: fitted.
        aspect_ratios: anchor aspect ratios (height / width); ``auto``: fitted (box clustering).
        head: ``dfl`` (the default): each location predicts its distances to the box's four edges as
            distributions over ``box_bins`` strides, trained with a task-aligned assigner, CIoU and
            distribution focal loss (YOLOv8's head recipe, ``edges.py``); ``anchors``: RetinaNet's
            offsets from anchors matched by IoU (``box_loss``, ``anchor_size``, ``num_scales``,
            ``aspect_ratios``), which the ``tpu-512`` preset keeps.
        box_bins: the ``dfl`` head's bins per edge: distances up to ``box_bins - 1`` strides.
        topk: the ``dfl`` head's positives per object: its locations with the best alignment.
        head_convs: convolutions in each prediction head before its output.
        head_filters: the ``dfl`` head's width: filters of each of its convolutions before the output
            (64, as YOLOv8n's heads; keras-hub's RetinaNet heads, which the ``anchors`` head keeps,
            have 256: on a CPU without bf16 units the two 256-filter heads were half the step, and
            64 trained more steps and tighter boxes in the same minutes, ``docs/detection.md``).
        warmup_steps: linear learning-rate warm-up, then cosine decay to 0; ``auto``: 3% of the steps.
        clipnorm: global gradient-norm clipping.
        mosaic: the share of training images replaced by a mosaic of four (``augment``): a window of
            the image's size cut at a random place from four images side by side, objects at their
            own size (``trainer/tasks/detection/input.py``); 0 turns it off.
        box_loss: the box-regression loss: ``l1+giou`` (the offsets' L1 plus 1 - GIoU of the
            decoded boxes, what the peer comparison chose: tighter boxes at the same steps), ``l1``
            (the mean absolute error on the encoded offsets, as torchvision's RetinaNet trains),
            ``giou`` alone (without the L1's pull it can shrink boxes it starts far from to points),
            or ``huber`` (keras-hub's default, Huber at delta 1: quadratic at the offsets' usual
            size, so its pull on the boxes fades as they get close, which costs AP at the strict IoUs).
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
    image_size: Union[int, Auto] = AUTO
    max_image_size: int = 512
    max_boxes: Union[int, Auto] = AUTO
    stem_filters: int = 64
    stackwise_filters: tuple[int, ...] = (64, 64, 128)
    stackwise_blocks: tuple[int, ...] = (1, 1, 1)
    stackwise_strides: tuple[int, ...] = (1, 2, 2)
    block_type: str = "basic_block"
    min_level: Union[int, Auto] = AUTO
    max_level: Union[int, Auto] = AUTO
    use_p5: Union[bool, Auto] = AUTO
    fpn_filters: int = 128
    anchor_size: Union[float, Auto] = AUTO
    num_scales: Union[int, Auto] = AUTO
    aspect_ratios: Union[tuple[float, ...], Auto] = AUTO
    head: str = "dfl"
    box_bins: int = 16
    topk: int = 3
    head_convs: int = 1
    head_filters: int = 64
    warmup_steps: Union[int, Auto] = AUTO
    clipnorm: float = 10.0
    mosaic: float = 0.5
    box_loss: str = "l1+giou"
    score_threshold: float = 0.05
    nms_iou: float = 0.5
    max_detections: int = 100
    weights: Optional[str] = None
    backbone_weights: Optional[str] = None

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> DetectorOptions:
        """Builds the options from a preset and overrides; an unknown key or bad value is a TaskError.

        An ``auto`` override of a value the preset sets keeps the preset's (the run form lists the
        fitted options as ``auto``, and choosing a preset there must not undo it).
        """
        options = dict(options or {})
        preset = options.pop("preset", "small")
        if preset not in PRESETS:
            raise TaskError(f"model_options.preset: unknown {preset!r}; presets: {', '.join(PRESETS)}")
        # The run form spells the fitted options out as "auto": a preset's own values win over those.
        chosen = {k: v for k, v in options.items() if not (v == AUTO and k in PRESETS[preset])}
        merged = {**PRESETS[preset], **chosen, "preset": preset}
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(merged) - set(names))
        if unknown:
            raise TaskError(f"model_options.{unknown[0]}: unknown detector option; known: {', '.join(sorted(names))}")
        _check_head_options(merged.get("head", cls.head), chosen)
        try:
            return cls(**merged)
        except ConfigError as err:
            raise TaskError(str(err)) from None

    def validate(self) -> None:
        """Relations keras-hub would otherwise fail on obscurely."""
        self.check()

    def auto_fields(self) -> list[str]:
        """The options left on ``auto`` (the fit to the data fills them in)."""
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name) == AUTO]

    def resolved(self, values: Mapping[str, Any]) -> DetectorOptions:
        """A copy with ``auto`` options set to ``values``; a value the user set is never changed.

        Raises:
            TaskError: ``values`` would change an option that is not ``auto``, or leaves one ``auto``.
        """
        fixed = sorted(k for k in values if getattr(self, k) != AUTO)
        if fixed:
            raise TaskError(f"model_options.{fixed[0]}: set by the user ({getattr(self, fixed[0])!r}); not refitted")
        done = dataclasses.replace(self, **dict(values))
        if done.auto_fields():
            raise TaskError(f"model_options: {', '.join(done.auto_fields())} still auto after the fit")
        return done

    def check(self) -> None:
        """Relations keras-hub would otherwise fail on obscurely (``auto`` options are checked once fitted)."""
        if not self.stackwise_filters or self.stackwise_filters[0] != 64:
            raise TaskError("model_options.stackwise_filters: keras-hub's ResNet wants 64 filters in its first stack")
        if not len(self.stackwise_filters) == len(self.stackwise_blocks) == len(self.stackwise_strides):
            raise TaskError("model_options: stackwise_filters, stackwise_blocks and stackwise_strides differ in length")
        if not 0.0 <= self.mosaic <= 1.0:
            raise TaskError(f"model_options.mosaic: the share of images made mosaics, in [0, 1]; got {self.mosaic}")
        if self.max_image_size < 32:
            raise TaskError(f"model_options.max_image_size: must be >= 32, got {self.max_image_size}")
        if self.max_detections < 1 or not 0 <= self.score_threshold < 1:
            raise TaskError("model_options: max_detections must be >= 1, score_threshold in [0, 1)")
        if self.head not in HEADS:
            raise TaskError(f"model_options.head: unknown {self.head!r}; choose one of {', '.join(HEADS)}")
        if self.head_filters < 1 or self.fpn_filters < 1:
            raise TaskError(
                f"model_options: head_filters and fpn_filters must be >= 1, got {self.head_filters} and "
                f"{self.fpn_filters}"
            )
        if self.box_bins < 2 or self.topk < 1:
            raise TaskError(f"model_options: box_bins must be >= 2 and topk >= 1, got {self.box_bins} and {self.topk}")
        if self.box_loss not in BOX_LOSSES:
            raise TaskError(f"model_options.box_loss: unknown {self.box_loss!r}; choose one of {', '.join(BOX_LOSSES)}")
        if self.max_boxes != AUTO and self.max_boxes < 1:
            raise TaskError(f"model_options.max_boxes: must be >= 1, got {self.max_boxes}")
        self._check_levels()

    def _check_levels(self) -> None:
        deepest = 1 + len(self.stackwise_filters)  # the stem reaches P2, each stack after the first one level more
        levels_fixed = AUTO not in (self.min_level, self.max_level, self.use_p5)
        if levels_fixed and (self.min_level > self.max_level or self.max_level > deepest + (3 if self.use_p5 else 0)):
            raise TaskError(
                f"model_options: levels P{self.min_level}-P{self.max_level} do not fit a backbone reaching "
                f"P{deepest} (use_p5 {self.use_p5})"
            )
        # Every level needs whole cells; with the levels still to fit, at least P3's stride of 8.
        coarsest = self.max_level if self.max_level != AUTO else 3
        size = self.image_size
        if size != AUTO and (size < 32 or size % (2**coarsest)):
            raise TaskError(
                f"model_options.image_size: {size} must be >= 32 and a multiple of 2**max_level "
                f"({2**coarsest}) so every pyramid level has whole cells; e.g. "
                f"{max(32, round(size / 2**coarsest) * 2**coarsest)}"
            )


def _plain(value: Any) -> Any:
    """A list as the tuple a field holds (``aspect_ratios: [1.0]`` is the frame's ``(1.0,)``)."""
    return tuple(value) if isinstance(value, list) else value


def _check_head_options(head: str, chosen: Mapping[str, Any]) -> None:
    """An option of the other head set to a value of its own is one line naming this head's options.

    A value that changes nothing passes (``auto``, the default, the dfl head's frame): a fitted
    run's options, handed back whole (a retraining), name them all.
    """
    defaults = {f.name: f.default for f in dataclasses.fields(DetectorOptions)}
    harmless = {**defaults, **DFL_FRAME} if head == "dfl" else defaults
    for other, names in HEAD_ONLY.items():
        given = sorted(k for k in names if k in chosen and _plain(chosen[k]) not in (AUTO, harmless[k]))
        if other != head and head in HEADS and given:
            own = ", ".join(HEAD_ONLY[head])
            raise TaskError(
                f"model_options.{given[0]}: the {head} head does not take it (it is the {other} head's); "
                f"the {head} head's own options are {own}; set head: {other} to use it"
            )


@dataclasses.dataclass(frozen=True)
class DetectorPredictionOptions(ConfigBase):
    """The detector's settings of a batch prediction (``PredictConfig.prediction_options``).

    Attributes:
        coco: also write ``coco_results.json`` (pycocotools' results format: one entry per kept
            box, with the input COCO file's image and category ids where it has them).
    """

    _section: ClassVar[str] = "prediction_options."
    _what: ClassVar[str] = "the detector's prediction options"

    coco: bool = True


@dataclasses.dataclass(frozen=True)
class DetectorSelectionOptions(ConfigBase):
    """The detector's settings of a selection (``SelectConfig.selection_options``, docs/labels.md).

    Attributes:
        threshold: the score at which a box is taken for an object: boxes scoring near it are the
            model's doubts (``threshold``, ``uncertainty``), boxes at or over it are what a reviewer
            is shown to correct, and boxes at or over half of it are compared under the flip.
        match_iou: a box and its mirror image's box (flipped back) are the same object when they
            overlap by at least this IoU (``flip``, ``uncertainty``).
    """

    _section: ClassVar[str] = "selection_options."
    _what: ClassVar[str] = "the detector's selection options"

    threshold: float = 0.5
    match_iou: float = 0.5

    def validate(self) -> None:
        for name in ("threshold", "match_iou"):
            value = getattr(self, name)
            if not 0.0 < value < 1.0:
                self._fail(name, f"must be in (0, 1), got {value}")
