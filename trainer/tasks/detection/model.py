"""Detection's model: keras-hub's RetinaNet over a ResNet, and a check of its anchors against the data.

``keras_hub.models.RetinaNetObjectDetector`` over a ``RetinaNetBackbone`` whose ResNet depth and
width are options, randomly initialised (nothing is downloaded) or loaded from local/gs://
weights. keras-hub 0.32.0 puts the focal-loss prior bias on the box head and leaves the class
head at p = 0.5; from random initialisation that is corrected (class bias -log(99), box bias 0):
it roughly doubled AP at equal training time here.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from trainer.tasks.detection.input import read_detection_split
from trainer.tasks.detection.options import DetectorOptions
from trainer.tfrecords import DatasetInfo

log = logging.getLogger(__name__)
MODEL_NAME = "retinanet"


def build_detector(opts: DetectorOptions, num_classes: int) -> Any:
    """keras-hub's RetinaNet for ``opts``, randomly initialised or from the given weights."""
    import keras_hub
    import numpy as np

    shape = (opts.image_size, opts.image_size, 3)
    encoder = keras_hub.models.ResNetBackbone(
        input_conv_filters=[opts.stem_filters],
        input_conv_kernel_sizes=[7],
        stackwise_num_filters=list(opts.stackwise_filters),
        stackwise_num_blocks=list(opts.stackwise_blocks),
        stackwise_num_strides=list(opts.stackwise_strides),
        block_type=opts.block_type,
        image_shape=shape,
    )
    if opts.backbone_weights:
        encoder.load_weights(opts.backbone_weights)
    backbone = keras_hub.models.RetinaNetBackbone(
        image_encoder=encoder,
        min_level=opts.min_level,
        max_level=opts.max_level,
        use_p5=opts.use_p5,
        image_shape=shape,
    )
    anchors = keras_hub.layers.AnchorGenerator(
        "yxyx",
        min_level=opts.min_level,
        max_level=opts.max_level,
        num_scales=opts.num_scales,
        aspect_ratios=list(opts.aspect_ratios),
        anchor_size=opts.anchor_size,
    )
    model = keras_hub.models.RetinaNetObjectDetector(
        backbone=backbone,
        num_classes=num_classes,
        bounding_box_format="yxyx",
        anchor_generator=anchors,
        pre_logits_num_conv_layers=opts.head_convs,
    )
    if opts.weights:
        model.load_weights(opts.weights)
    else:
        # keras-hub 0.32.0 initialises the *box* head with the focal-loss prior and the class
        # head at p = 0.5 (read in its source): put the prior where it belongs.
        cls_bias = model.classification_head.prediction_layer.bias
        cls_bias.assign(np.full(cls_bias.shape, -math.log(99.0), dtype="float32"))
        box_bias = model.box_head.prediction_layer.bias
        box_bias.assign(np.zeros(box_bias.shape, dtype="float32"))
    return model


def anchors_of(generator: Any, size: int) -> Any:
    """An anchor generator's anchors (absolute yxyx, [A, 4] NumPy) for a ``size`` x ``size`` input."""
    import numpy as np

    levels = generator(np.zeros((1, size, size, 3), "float32"))
    return np.concatenate([np.asarray(v) for v in levels.values()], axis=0)


def anchor_coverage(boxes: Any, anchors: Any) -> Any:
    """Each box's best IoU with any anchor (NumPy; boxes and anchors absolute yxyx)."""
    import numpy as np

    boxes, anchors = np.asarray(boxes, "float32"), np.asarray(anchors, "float32")
    if not len(boxes):
        return np.zeros(0, "float32")
    best = np.zeros(len(boxes), "float32")
    for start in range(0, len(boxes), 2048):
        b = boxes[start : start + 2048, None, :]
        ih = np.clip(np.minimum(b[..., 2], anchors[:, 2]) - np.maximum(b[..., 0], anchors[:, 0]), 0, None)
        iw = np.clip(np.minimum(b[..., 3], anchors[:, 3]) - np.maximum(b[..., 1], anchors[:, 1]), 0, None)
        inter = ih * iw
        area_b = (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
        area_a = (anchors[:, 2] - anchors[:, 0]) * (anchors[:, 3] - anchors[:, 1])
        best[start : start + 2048] = (inter / np.maximum(area_b + area_a - inter, 1e-9)).max(axis=1)
    return best


def training_boxes(info: DatasetInfo, split: str, size: int, limit: int = 5000) -> Any:
    """Up to ``limit`` records' non-crowd boxes, letterboxed to ``size`` (absolute yxyx, NumPy)."""
    import numpy as np

    rows = []
    for r in read_detection_split(info, split, limit):
        scale = size / max(r["height"], r["width"])
        factors = np.array([r["height"], r["width"], r["height"], r["width"]], "float32") * scale
        rows += [np.asarray(b, "float32") * factors for b, c in zip(r["boxes"], r["crowd"], strict=True) if not c]
    return np.stack(rows) if rows else np.zeros((0, 4), "float32")


def report_anchor_coverage(model: Any, info: DatasetInfo, opts: DetectorOptions) -> float:
    """Logs the share of training boxes with an anchor at IoU >= 0.5; warns and suggests a size when low.

    Too small or too large anchors are the usual reason a detector's mAP stays near 0: no anchor
    is ever matched to the objects, so nothing learns to find them.
    """
    import keras_hub

    boxes = training_boxes(info, "train", opts.image_size)
    if not len(boxes):
        log.warning("no boxes in the training split: the detector can only learn that there is nothing")
        return 0.0
    share = float((anchor_coverage(boxes, anchors_of(model.anchor_generator, opts.image_size)) >= 0.5).mean())
    if share >= 0.95:
        log.info("anchors: %.1f%% of %d training boxes have an anchor at IoU >= 0.5", 100 * share, len(boxes))
        return share
    best_size, best_share = opts.anchor_size, share
    for candidate in (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0):
        generator = keras_hub.layers.AnchorGenerator(
            "yxyx", opts.min_level, opts.max_level, opts.num_scales, list(opts.aspect_ratios), candidate
        )
        covered = float((anchor_coverage(boxes, anchors_of(generator, opts.image_size)) >= 0.5).mean())
        if covered > best_share:
            best_size, best_share = candidate, covered
    log.warning(
        "anchors: only %.1f%% of %d training boxes have an anchor at IoU >= 0.5 (anchor_size %g); the rest "
        "cannot be learned. anchor_size %g covers %.1f%%: set model_options.anchor_size (and aspect_ratios "
        "for elongated objects)",
        100 * share,
        len(boxes),
        opts.anchor_size,
        best_size,
        100 * best_share,
    )
    return share
