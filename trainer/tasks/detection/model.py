"""Detection's model: keras-hub's RetinaNet network over a ResNet, and a check of its anchors against the data.

A ``RetinaNetBackbone`` (ResNet + FPN) whose ResNet depth and width and FPN width are options
(``pyramid.PyramidBackbone`` where the FPN is not keras-hub's fixed 256 filters), randomly
initialised, loaded from a weights file, or taken from a keras-hub preset (``trainer.presets``: a
hub handle, or a local or gs:// preset directory); every encoder takes any input size. Over it,
the options' head: ``dfl`` (``edges.EdgeDetector``: YOLOv8's edge distributions and training) or
``anchors`` (``keras_hub.models.RetinaNetObjectDetector``'s anchor offsets). keras-hub 0.32.0
puts the focal-loss prior bias on the box head and leaves the class head at p = 0.5; fresh heads
are corrected (class bias -log(99), box bias 0): it roughly doubled AP at equal training time here.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any, Optional

from trainer.tasks.detection.input import read_detection_split
from trainer.tasks.detection.options import DetectorOptions
from trainer.tfrecords import DatasetInfo

log = logging.getLogger(__name__)
MODEL_NAME = "retinanet"


KERAS_HUB_FPN_FILTERS = 256  # RetinaNetBackbone's feature pyramid width (not an argument of it)
FREE_SHAPE = (None, None, 3)  # any input size, so a saved preset can be fine-tuned at another one
WEIGHTS, BACKBONE_WEIGHTS = "model_options.weights", "model_options.backbone_weights"
PRESETS = ("retinanet_resnet50_fpn_coco", "retinanet_resnet50_fpn_v2_coco")
_DETECTOR_FIX = (
    "give a RetinaNet preset (retinanet_resnet50_fpn_coco, or the preset/ folder of a detection run); "
    "a preset of an image encoder (e.g. a ResNet) goes in model_options.backbone_weights"
)


def build_detector(opts: DetectorOptions, num_classes: int) -> Any:
    """keras-hub's RetinaNet for ``opts``: randomly initialised, or from weights or a preset.

    ``weights`` naming a preset takes its backbone and FPN, and its heads too when they fit the
    dataset's classes and these anchors; otherwise the detector is re-headed (said in the log).
    """
    from trainer import presets

    if opts.weights:
        source = presets.resolve_weights(opts.weights, WEIGHTS, PRESETS)
        if source.kind == "preset":
            if opts.backbone_weights:
                log.warning("%s is not used: %s brings the whole detector", BACKBONE_WEIGHTS, WEIGHTS)
            return _detector_from_preset(opts, num_classes, source)
    backbone, pixels = _backbone(opts)
    model = _assemble(opts, backbone, num_classes, pixels)
    if opts.weights:
        presets.load_weights_file(model, source, WEIGHTS)
        log.info("detector weights from %s", source.describe())
    else:
        _prior_bias(model)
    return model


def _fresh_encoder(opts: DetectorOptions) -> Any:
    import keras_hub

    return keras_hub.models.ResNetBackbone(
        input_conv_filters=[opts.stem_filters],
        input_conv_kernel_sizes=[7],
        stackwise_num_filters=list(opts.stackwise_filters),
        stackwise_num_blocks=list(opts.stackwise_blocks),
        stackwise_num_strides=list(opts.stackwise_strides),
        block_type=opts.block_type,
        image_shape=FREE_SHAPE,
    )


def _free_shapes(config: Any) -> Any:
    """A serialized config with every ``image_shape`` set to any size (a fixed one refuses others)."""
    if isinstance(config, dict):
        return {k: (list(FREE_SHAPE) if k == "image_shape" else _free_shapes(v)) for k, v in config.items()}
    if isinstance(config, list):
        return [_free_shapes(v) for v in config]
    return config


def _preset_backbone(cls: type, loader: Any) -> Any:
    """A backbone from a preset at any input size, its nested encoder's shape freed too."""
    kwargs: dict[str, Any] = {"image_shape": FREE_SHAPE}
    if "image_encoder" in loader.config.get("config", {}):
        kwargs["image_encoder"] = _free_shapes(loader.config["config"]["image_encoder"])
    return cls.from_preset(loader.preset, **kwargs)


def _encoder(opts: DetectorOptions) -> tuple[Any, Any]:
    """The image encoder (fresh, from a weights file or from a preset) and a preset's pixel scaling."""
    import keras_hub

    from trainer import presets

    if not opts.backbone_weights:
        return _fresh_encoder(opts), None
    source = presets.resolve_weights(opts.backbone_weights, BACKBONE_WEIGHTS, PRESETS)
    if source.kind == "file":
        encoder = _fresh_encoder(opts)
        presets.load_weights_file(encoder, source, BACKBONE_WEIGHTS)
        log.info("image encoder weights from %s", source.describe())
        return encoder, None
    from trainer.tasks.detection import edges  # noqa: F401  (registers a run's classes: its heads, its pyramid)

    loader = presets.preset_loader(source, BACKBONE_WEIGHTS)
    fix = "give a preset of an image encoder with feature pyramid outputs (a ResNet) or of a RetinaNet"
    cls = presets.check_class(loader, keras_hub.models.Backbone, BACKBONE_WEIGHTS, fix)
    backbone = _preset_backbone(cls, loader)
    encoder = getattr(backbone, "image_encoder", backbone)
    if not getattr(encoder, "pyramid_outputs", None):
        raise presets.PresetError(f"{BACKBONE_WEIGHTS}: {cls.__name__} has no pyramid outputs; {fix}")
    log.info("image encoder %s from %s (the FPN and heads start fresh)", encoder.name, source.describe())
    return encoder, presets.pixel_scale_of(loader)


def _backbone(opts: DetectorOptions) -> tuple[Any, Any]:
    """The RetinaNet backbone (encoder + FPN) for ``opts`` and its pixel scaling."""
    import keras_hub

    from trainer.tasks.detection.pyramid import PyramidBackbone

    encoder, pixels = _encoder(opts)
    levels = {"min_level": opts.min_level, "max_level": opts.max_level, "use_p5": opts.use_p5}
    if opts.fpn_filters == KERAS_HUB_FPN_FILTERS:  # keras-hub's own class: its files load without this package
        return keras_hub.models.RetinaNetBackbone(image_encoder=encoder, image_shape=FREE_SHAPE, **levels), pixels
    backbone = PyramidBackbone(image_encoder=encoder, fpn_filters=opts.fpn_filters, image_shape=FREE_SHAPE, **levels)
    return backbone, pixels


def _assemble(opts: DetectorOptions, backbone: Any, num_classes: int, pixels: Any) -> Any:
    """The detector over ``backbone``: the options' head, fresh, and its anchors at the backbone's levels."""
    import keras_hub

    from trainer import presets

    anchors = keras_hub.layers.AnchorGenerator(
        "yxyx",
        min_level=backbone.min_level,
        max_level=backbone.max_level,
        num_scales=opts.num_scales,
        aspect_ratios=list(opts.aspect_ratios),
        anchor_size=opts.anchor_size,
    )
    # A preset's pixel scaling: fit applies it in the input pipeline, the export before the model.
    preprocessor = presets.unit_rescaling(pixels)
    if opts.head == "dfl":
        from trainer.tasks.detection.edges import EdgeDetector

        return EdgeDetector(
            backbone=backbone,
            num_classes=num_classes,
            anchor_generator=anchors,
            box_bins=opts.box_bins,
            topk=opts.topk,
            pre_logits_num_conv_layers=opts.head_convs,
            head_filters=opts.head_filters,
            preprocessor=preprocessor,
        )
    return keras_hub.models.RetinaNetObjectDetector(
        backbone=backbone,
        num_classes=num_classes,
        bounding_box_format="yxyx",
        anchor_generator=anchors,
        pre_logits_num_conv_layers=opts.head_convs,
        preprocessor=preprocessor,
    )


def box_loss(name: str) -> Any:
    """The box-regression loss ``name`` (``DetectorOptions.box_loss``), summed like keras-hub's.

    keras-hub encodes a box as offsets from its anchor (centre / anchor size, log size ratio) with
    a box variance of 1, so the offsets of a roughly placed box are about 0.1. Its default Huber
    loss (delta 1) is quadratic there: the gradient shrinks with the error and the boxes stop
    tightening. L1 keeps a constant pull: on the built-in shapes, at the same schedule and time,
    test AP@[.5:.95] went from 0.48-0.58 to 0.59-0.64 (docs/detection.md, "Model and training").
    ``giou`` scores the decoded boxes themselves (1 - generalised IoU, as YOLO's and DETR's box
    losses do), the measure AP@[.5:.95] rewards; ``l1+giou`` adds the two.
    """
    import keras

    if name == "l1":
        return keras.losses.MeanAbsoluteError(reduction="sum")
    if name == "huber":
        return keras.losses.Huber(reduction="sum")
    return _iou_box_loss(l1=name == "l1+giou")


def _iou_box_loss(l1: bool) -> Any:
    """1 - GIoU of the boxes the offsets decode to (plus the offsets' L1 when ``l1``), per anchor.

    IoU and GIoU are unchanged by scaling both boxes by the anchor's width and height, so the boxes
    are compared in units of their anchor: centre = the offsets' first two values, size = exp of
    the last two. The log sizes go through the same soft bound on both sides (the targets of
    unmatched anchors are arbitrary, and weighted 0), so exact offsets score 0; it keeps a gradient
    where a hard clip left boxes grown past it with none.
    """
    import keras
    from keras import ops

    def corners(deltas: Any) -> tuple[Any, Any]:
        size = ops.exp(4.0 * ops.tanh(deltas[..., 2:] / 4.0))
        return deltas[..., :2] - size / 2, deltas[..., :2] + size / 2

    class GIoUBoxLoss(keras.losses.Loss):
        def call(self, y_true: Any, y_pred: Any) -> Any:
            return loss(y_true, y_pred)

    def loss(y_true: Any, y_pred: Any) -> Any:
        y_true, y_pred = ops.cast(y_true, "float32"), ops.cast(y_pred, "float32")
        (t0, t1), (p0, p1) = corners(y_true), corners(y_pred)
        overlap = ops.maximum(ops.minimum(t1, p1) - ops.maximum(t0, p0), 0.0)
        inter = overlap[..., 0] * overlap[..., 1]
        union = ops.prod(t1 - t0, axis=-1) + ops.prod(p1 - p0, axis=-1) - inter
        hull = ops.prod(ops.maximum(t1, p1) - ops.minimum(t0, p0), axis=-1)
        giou = inter / ops.maximum(union, 1e-7) - (hull - union) / ops.maximum(hull, 1e-7)
        value = 1.0 - giou
        return value + ops.mean(ops.abs(y_true - y_pred), axis=-1) if l1 else value

    return GIoUBoxLoss(reduction="sum", name="giou_box_loss")


def _prior_bias(model: Any) -> None:
    """The focal-loss prior on the class head (p = 0.01), none on the box head."""
    import numpy as np

    # keras-hub 0.32.0 initialises the *box* head with the focal-loss prior and the class head
    # at p = 0.5 (read in its source), also when it re-heads a preset: put the prior where it belongs.
    cls_bias = model.classification_head.prediction_layer.bias
    cls_bias.assign(np.full(cls_bias.shape, -math.log(99.0), dtype="float32"))
    box_bias = model.box_head.prediction_layer.bias
    box_bias.assign(np.zeros(box_bias.shape, dtype="float32"))
    # Every box starts at its anchor (offsets about 0, as torchvision draws the head's kernel at
    # std 0.01): a matched anchor already overlaps its object by IoU >= 0.5, where an IoU loss pulls
    # the box in. keras-hub's own draw put the first boxes at up to 4x their anchor's size, and an
    # IoU loss then shrank them to points with no gradient left.
    box_kernel = model.box_head.prediction_layer.kernel
    rng = np.random.default_rng(0)
    box_kernel.assign(rng.normal(0.0, 0.01, box_kernel.shape).astype("float32"))


def _detector_from_preset(opts: DetectorOptions, num_classes: int, source: Any) -> Any:
    """A detector whose backbone and FPN come from a RetinaNet preset; its heads when they fit."""
    import keras_hub

    from trainer import presets
    from trainer.tasks.detection import edges  # noqa: F401  (registers a run's classes: its heads, its pyramid)

    loader = presets.preset_loader(source, WEIGHTS)
    presets.check_class(loader, keras_hub.models.RetinaNetBackbone, WEIGHTS, _DETECTOR_FIX)
    backbone = _preset_backbone(keras_hub.models.RetinaNetBackbone, loader)
    if (backbone.min_level, backbone.max_level) != (opts.min_level, opts.max_level):
        log.warning(
            "the preset's pyramid is P%d-P%d (the options say P%d-P%d): its levels are used",
            backbone.min_level, backbone.max_level, opts.min_level, opts.max_level,
        )  # fmt: skip
    if opts.image_size % 2**backbone.max_level:
        raise presets.PresetError(
            f"model_options.image_size: {opts.image_size} is not a multiple of {2**backbone.max_level}, which "
            f"the preset's pyramid (P{backbone.min_level}-P{backbone.max_level}) needs; e.g. "
            f"{max(1, round(opts.image_size / 2**backbone.max_level)) * 2**backbone.max_level}"
        )
    pixels = presets.pixel_scale_of(loader)
    opts = _preset_head_width(opts, loader, num_classes)
    model = _assemble(opts, backbone, num_classes, pixels)
    reason = _keep_heads(model, loader, num_classes)
    if reason is not None:
        model = _assemble(opts, backbone, num_classes, pixels)  # a failed load may have set some head weights
        _prior_bias(model)
        log.warning("re-headed the detector from %s: %s; its backbone and FPN are kept", source.describe(), reason)
    else:
        log.info("detector from %s, heads included", source.describe())
    return model


def _preset_head_width(opts: DetectorOptions, loader: Any, num_classes: int) -> DetectorOptions:
    """The options with the width of the preset's dfl heads where they can be kept (the same classes).

    A detection run's preset brings its heads; one saved before the width was an option has
    keras-hub's 256 filters (its config names none), which fresh heads of another width could not
    load: a retraining of such a model keeps its heads instead of starting them again.
    """
    from trainer import presets

    config = (presets.preset_json(loader, presets.PRESET_TASK) or {}).get("config") or {}
    if opts.head != "dfl" or "box_bins" not in config or int(config.get("num_classes", -1)) != num_classes:
        return opts
    width = int(config.get("head_filters", 256))
    if width != opts.head_filters:
        log.info("the preset's heads are %d filters wide (head_filters %d): kept", width, opts.head_filters)
    return dataclasses.replace(opts, head_filters=width)


def _keep_heads(model: Any, loader: Any, num_classes: int) -> Optional[str]:
    """Loads the preset's heads into ``model`` when they fit; else says why not (None: loaded)."""
    from keras_hub.src.utils import preset_utils

    from trainer import presets

    task = presets.preset_json(loader, presets.PRESET_TASK)
    if task is None or not preset_utils.check_file_exists(loader.preset, preset_utils.TASK_WEIGHTS_FILE):
        return "the preset has no detection heads"
    theirs = int(task.get("config", {}).get("num_classes", -1))
    if theirs != num_classes:
        return f"the preset's class head has {theirs} classes, the dataset {num_classes}"
    try:
        model.load_task_weights(preset_utils.get_file(loader.preset, preset_utils.TASK_WEIGHTS_FILE))
    except ValueError as err:
        return f"its heads do not fit these anchors or head convolutions ({presets.brief(err, 160)})"
    return None


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


def report_anchor_coverage(model: Any, info: DatasetInfo, opts: DetectorOptions) -> Optional[float]:
    """Logs the share of training boxes with an anchor at IoU >= 0.5; warns and suggests a size when low.

    Too small or too large anchors are the usual reason a detector's mAP stays near 0: no anchor
    is ever matched to the objects, so nothing learns to find them. The dfl head matches no anchor
    (its frames are only where it reads distances from): None.
    """
    import keras_hub

    if opts.head == "dfl":
        return None

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
