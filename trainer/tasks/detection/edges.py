"""YOLOv8's head recipe on RetinaNet's network: each location predicts its distances to the four
edges of a box as distributions, trained with a task-aligned assigner, CIoU and distribution focal loss.

keras-hub 0.32 has no such head (KerasCV's ``YOLOV8Detector`` had one, but KerasCV is unmaintained),
so it is written here over keras-hub's pieces: the same ``RetinaNetBackbone`` (ResNet + FPN) and
``PredictionHead`` convolutions, one location per cell of each level (an anchor generator with one
square anchor per location, of ``anchor_size`` strides: only its centre and stride are read). Per
location the box head gives ``4 x box_bins`` logits: for each edge (top, left, bottom, right) a
distribution over 0 .. ``box_bins - 1`` strides from the location's centre; the distance is its
expectation. Training (:meth:`EdgeDetector.compute_loss`):

- **Task-aligned assignment** (YOLOv8's, TOOD's): for each object, among the locations whose centre
  is inside its box, the ``topk`` with the best ``score ** 0.5 x IoU ** 6`` (the location's class
  score for the object's class and the IoU of the box it predicts now) are positive; a location
  claimed by several objects goes to the one it overlaps most. Computed in log space: in linear
  space a class score of 1e-15 after the first steps made every product underflow, no location was
  positive again and training collapsed.
- **Classes**: binary cross-entropy on every location and class against soft targets, the
  alignment scaled so each object's best location gets its IoU; summed, over the targets' sum.
- **Boxes**: 1 - CIoU and distribution focal loss (the two bins around each true distance, weighted
  by nearness), both weighted by the class target.

Measured against the anchor head in docs/detection.md.
"""

from __future__ import annotations

import math
from typing import Any

import keras
from keras import ops
from keras_hub.src.layers.modeling.non_max_supression import NonMaxSuppression
from keras_hub.src.models.object_detector import ObjectDetector
from keras_hub.src.models.retinanet.prediction_head import PredictionHead
from keras_hub.src.models.retinanet.retinanet_label_encoder import RetinaNetLabelEncoder
from keras_hub.src.models.retinanet.retinanet_object_detector import RetinaNetObjectDetector

from trainer.tasks.detection import pyramid  # noqa: F401  (registers the narrow pyramid's backbone class)

ALPHA, BETA = 0.5, 6.0  # the alignment: score ** ALPHA x IoU ** BETA (YOLOv8's)
GAINS = {"box": 7.5, "cls": 0.5, "dfl": 1.5}  # YOLOv8's loss gains
_EPS = 1e-7
_NONE = -1e9  # "no location": a log alignment below any real one


def centres_and_strides(anchors: Any, anchor_size: float) -> tuple[Any, Any]:
    """The locations' centres (``[N, 2]`` yx) and strides (``[N]``) of one-square-per-location anchors."""
    anchors = ops.cast(anchors, "float32")
    return (anchors[:, :2] + anchors[:, 2:]) / 2, (anchors[:, 2] - anchors[:, 0]) / anchor_size


def edge_logits(raw: Any, bins: int) -> Any:
    """``[B, N, 4 x bins]`` box-head output -> ``[B, N, 4, bins]`` logits (top, left, bottom, right)."""
    return ops.reshape(ops.cast(raw, "float32"), (ops.shape(raw)[0], -1, 4, bins))


def decode_edges(raw: Any, anchors: Any, anchor_size: float, bins: int) -> Any:
    """The boxes (absolute yxyx, ``[B, N, 4]``) the box head's distributions give."""
    centres, strides = centres_and_strides(anchors, anchor_size)
    probs = ops.softmax(edge_logits(raw, bins), axis=-1)
    d = ops.sum(probs * ops.arange(bins, dtype="float32"), axis=-1) * strides[None, :, None]
    return ops.concatenate([centres - d[..., :2], centres + d[..., 2:]], axis=-1)


def iou(a: Any, b: Any, complete: bool = False) -> Any:
    """IoU (or CIoU) of yxyx boxes, broadcast over the leading axes."""
    inter = ops.prod(ops.maximum(ops.minimum(a[..., 2:], b[..., 2:]) - ops.maximum(a[..., :2], b[..., :2]), 0.0), -1)
    size_a, size_b = a[..., 2:] - a[..., :2], b[..., 2:] - b[..., :2]
    union = ops.prod(size_a, -1) + ops.prod(size_b, -1) - inter + _EPS
    value = inter / union
    if not complete:
        return value
    hull = ops.maximum(a[..., 2:], b[..., 2:]) - ops.minimum(a[..., :2], b[..., :2])
    centre_gap = ops.sum(((a[..., :2] + a[..., 2:]) - (b[..., :2] + b[..., 2:])) ** 2, -1) / 4
    aspect = ops.arctan(size_b[..., 1] / (size_b[..., 0] + _EPS)) - ops.arctan(size_a[..., 1] / (size_a[..., 0] + _EPS))
    v = (4 / math.pi**2) * aspect**2
    weight = ops.stop_gradient(v / (v - value + 1 + _EPS))
    return value - centre_gap / (ops.sum(hull**2, -1) + _EPS) - v * weight


def _alignment(centres: Any, boxes: Any, scores: Any, gt_boxes: Any, gt_labels: Any) -> tuple[Any, Any]:
    """(log alignment ``[B, M, N]``, ``_NONE`` where the location is not inside the object; IoU ``[B, M, N]``)."""
    g = gt_boxes[:, :, None, :]
    c = centres[None, None]
    inside = ops.min(ops.concatenate([c - g[..., :2], g[..., 2:] - c], axis=-1), axis=-1) > 1e-9
    inside = inside & (gt_labels >= 0)[..., None]
    overlap = ops.where(inside, ops.maximum(iou(g, boxes[:, None]), 0.0), 0.0)
    onehot = ops.one_hot(ops.cast(ops.maximum(gt_labels, 0), "int32"), ops.shape(scores)[-1], dtype="float32")
    score = ops.einsum("bmc,bnc->bmn", onehot, scores)
    log_align = ALPHA * ops.log(ops.maximum(score, 1e-30)) + BETA * ops.log(ops.maximum(overlap, 1e-30))
    return ops.where(inside & (overlap > 0), log_align, _NONE), overlap


def assign(centres: Any, boxes: Any, scores: Any, gt_boxes: Any, gt_labels: Any, topk: int) -> tuple[Any, Any]:
    """Task-aligned targets: (boxes ``[B, N, 4]``, class targets ``[B, N, C]``, 0 where negative).

    ``boxes`` and ``scores`` are the model's current predictions (no gradient flows through them).
    """
    log_align, overlap = _alignment(centres, boxes, scores, gt_boxes, gt_labels)
    kth = ops.top_k(log_align, min(topk, int(centres.shape[0])))[0][..., -1:]
    chosen = (log_align >= kth) & (log_align > _NONE)
    # A location claimed by several objects goes to the one it overlaps most.
    best = ops.one_hot(ops.argmax(overlap, axis=1), ops.shape(overlap)[1], axis=1) > 0
    chosen = ops.where(ops.sum(ops.cast(chosen, "int32"), axis=1, keepdims=True) > 1, best & chosen, chosen)
    mask = ops.cast(chosen, "float32")
    positive = ops.sum(mask, axis=1) > 0
    owner = ops.argmax(mask, axis=1)
    target_boxes = ops.take_along_axis(gt_boxes, owner[..., None], axis=1)
    labels = ops.take_along_axis(ops.cast(ops.maximum(gt_labels, 0), "int32"), owner, axis=1)
    # Each object's best location gets its IoU; the others in proportion to their alignment.
    mine = ops.where(chosen, log_align, _NONE)
    scaled = ops.exp(mine - ops.max(mine, axis=2, keepdims=True)) * ops.max(overlap * mask, axis=2, keepdims=True)
    quality = ops.where(positive, ops.max(scaled * mask, axis=1), 0.0)
    return target_boxes, ops.one_hot(labels, ops.shape(scores)[-1], dtype="float32") * quality[..., None]


def distribution_focal_loss(logits: Any, distances: Any) -> Any:
    """DFL: cross-entropy on the two bins around each distance, weighted by nearness (``[B, N]``, mean over edges)."""
    bins = logits.shape[-1]
    distances = ops.clip(distances, 0.0, bins - 1 - 0.01)
    left = ops.floor(distances)
    log_p = ops.log_softmax(logits, axis=-1)
    index = ops.cast(left, "int32")[..., None]
    at_left = ops.take_along_axis(log_p, index, axis=-1)[..., 0]
    at_right = ops.take_along_axis(log_p, index + 1, axis=-1)[..., 0]
    return -ops.mean(at_left * (left + 1 - distances) + at_right * (distances - left), axis=-1)


@keras.saving.register_keras_serializable(package="lean_tpu")
class EdgeDetector(RetinaNetObjectDetector):
    """RetinaNet's backbone and head convolutions with YOLOv8's box representation and training.

    Outputs, like keras-hub's RetinaNet: ``bbox_regression`` (``[B, N, 4 x box_bins]``: the edge
    distributions) and ``cls_logits`` (``[B, N, num_classes]``), N the locations of every level.
    """

    def __init__(
        self,
        backbone: Any,
        num_classes: int,
        anchor_generator: Any,
        box_bins: int = 16,
        topk: int = 3,
        pre_logits_num_conv_layers: int = 1,
        head_filters: int = 256,
        preprocessor: Any = None,
        dtype: Any = None,
        **kwargs: Any,
    ):
        for name in (
            "bounding_box_format",
            "label_encoder",
            "prediction_decoder",
            "use_prediction_head_norm",
            "activation",
        ):
            kwargs.pop(name, None)  # RetinaNet's config keys, fixed here
        head_dtype = dtype or backbone.dtype_policy
        heads = {
            name: PredictionHead(
                output_filters=filters,
                num_conv_layers=pre_logits_num_conv_layers,
                num_filters=head_filters,
                use_prior_probability=name == "classification_head",
                dtype=head_dtype,
                name=name,
            )
            for name, filters in (("box_head", 4 * box_bins), ("classification_head", num_classes))
        }
        images = keras.layers.Input(backbone.image_shape, name="images")
        features = backbone(images)
        outputs = {}
        for key, head, width in (
            ("bbox_regression", "box_head", 4 * box_bins),
            ("cls_logits", "classification_head", num_classes),
        ):
            per_level = [
                keras.layers.Reshape((-1, width), name=f"{key}_{level}")(heads[head](features[level]))
                for level in features
            ]
            outputs[key] = keras.layers.Concatenate(axis=1, name=key)(per_level)
        ObjectDetector.__init__(self, inputs=images, outputs=outputs, **kwargs)
        self.bounding_box_format, self.use_prediction_head_norm, self.activation = "yxyx", False, None
        self.num_classes, self.backbone, self.preprocessor = num_classes, backbone, preprocessor
        self.pre_logits_num_conv_layers, self.box_bins, self.topk = pre_logits_num_conv_layers, box_bins, topk
        self.head_filters = head_filters
        self.box_head, self.classification_head = heads["box_head"], heads["classification_head"]
        self.anchor_generator = anchor_generator
        self.label_encoder = RetinaNetLabelEncoder(anchor_generator, bounding_box_format="yxyx")
        self._prediction_decoder = NonMaxSuppression(from_logits=True, bounding_box_format="yxyx")
        self.anchor_size = float(anchor_generator.anchor_size)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(box_bins=self.box_bins, topk=self.topk, head_filters=self.head_filters)
        return config

    def compile(self, *args: Any, box_loss: Any = None, **kwargs: Any) -> None:
        """keras-hub's compile; the box loss is this head's own (``compute_loss``)."""
        self.box_loss_tracker = keras.metrics.Mean(name="bbox_regression_loss")
        self.class_loss_tracker = keras.metrics.Mean(name="cls_logits_loss")
        ObjectDetector.compile(self, *args, **kwargs)

    def compute_loss(self, x: Any, y: Any, y_pred: Any, sample_weight: Any = None, **kwargs: Any) -> Any:
        """Task-aligned targets, then CIoU + DFL on the boxes and BCE on the classes (YOLOv8's gains)."""
        anchors = self.anchor_generator(x)
        anchors = ops.concatenate([anchors[k] for k in anchors], axis=0)
        centres, strides = centres_and_strides(anchors, self.anchor_size)
        raw, logits = y_pred["bbox_regression"], ops.cast(y_pred["cls_logits"], "float32")
        boxes = decode_edges(raw, anchors, self.anchor_size, self.box_bins)
        gt_boxes, gt_labels = ops.cast(y["boxes"], "float32"), ops.cast(y["labels"], "float32")
        target_boxes, targets = assign(
            centres, ops.stop_gradient(boxes), ops.stop_gradient(ops.sigmoid(logits)), gt_boxes, gt_labels, self.topk
        )
        target_boxes, targets = ops.stop_gradient(target_boxes), ops.stop_gradient(targets)
        total = ops.maximum(ops.sum(targets), 1.0)
        weight = ops.sum(targets, axis=-1)
        bce = ops.maximum(logits, 0.0) - logits * targets + ops.log1p(ops.exp(-ops.abs(logits)))
        class_loss = ops.sum(bce) / total
        box_loss = ops.sum((1.0 - iou(boxes, target_boxes, complete=True)) * weight) / total
        distances = ops.concatenate([centres - target_boxes[..., :2], target_boxes[..., 2:] - centres], -1)
        dfl = distribution_focal_loss(edge_logits(raw, self.box_bins), distances / strides[None, :, None])
        edge_loss = ops.sum(dfl * weight) / total
        self.box_loss_tracker.update_state(box_loss)
        self.class_loss_tracker.update_state(class_loss)
        return GAINS["box"] * box_loss + GAINS["cls"] * class_loss + GAINS["dfl"] * edge_loss
