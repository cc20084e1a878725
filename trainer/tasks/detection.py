"""Object detection: RetinaNet (keras-hub) from COCO-style TFRecords, COCO mAP, TF-OD-API-style serving.

The pieces, each in one place below:

- **Input**: every image is letterboxed to ``image_size`` x ``image_size`` (aspect ratio kept,
  resized, padded at the bottom and right) and its boxes go with it, as absolute-pixel ``yxyx``
  (keras-hub's relative formats fail in its anchor generator and its NMS); boxes and labels are
  padded with -1 to ``max_boxes``: static shapes throughout, as a TPU needs. Crowd boxes are not
  trained on (dropped from the targets; the COCO evaluation still sees them as ``iscrowd``).
- **Model**: ``keras_hub.models.RetinaNetObjectDetector`` over a ``RetinaNetBackbone`` whose
  ResNet depth and width are options, randomly initialised (nothing is downloaded) or loaded
  from local/gs:// weights. keras-hub 0.32.0 puts the focal-loss prior bias on the box head and
  leaves the class head at p = 0.5; from random initialisation that is corrected (class bias
  -log(99), box bias 0): it roughly doubled AP at equal training time here.
- **Export**: ``serving_default`` takes encoded images and returns, like the TensorFlow Object
  Detection API's exported models, ``detection_boxes`` (normalised ``[ymin, xmin, ymax, xmax]``
  of the *original* image), ``detection_scores``, ``detection_classes`` (float32 label-map ids:
  class index + 1, 0 for padding), ``detection_class_names`` and ``num_detections``: up to 100
  detections sorted by score, down to a score of 0.05 (clients filter by score). NMS is per
  class (COCO practice), with ``tf.image.combined_non_max_suppression``, which takes any batch
  size (keras-hub's own NMS is class-agnostic and needs a static batch in a SavedModel).
- **Evaluation**: COCO metrics with pycocotools (the reference implementation) on the test split,
  computed through the exported ``serving_default``: what is served is what is scored.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Optional

from trainer.tasks.base import Metric, ServingSchema, Task, TaskError

log = logging.getLogger(__name__)

_ENCODED = "image/encoded"
_HEIGHT, _WIDTH = "image/height", "image/width"
_BOX_KEYS = ("image/object/bbox/ymin", "image/object/bbox/xmin", "image/object/bbox/ymax", "image/object/bbox/xmax")
_LABELS = "image/object/class/label"
_CROWD = "image/object/is_crowd"
MODEL_NAME = "retinanet"
OUTPUTS = ("detection_boxes", "detection_scores", "detection_classes", "detection_class_names", "num_detections")
# A served detection of a known example counts when it overlaps the true box this much, with
# at least this score, and a negative image (no objects) must have no detection above it.
MATCH_IOU = 0.5
MATCH_SCORE = 0.3

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
class DetectorOptions:
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
        weights: a ``.weights.h5`` of the whole detector (local or gs://) to start from.
        backbone_weights: a ``.weights.h5`` of the ResNet image encoder to start from.
    """

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
    def from_options(cls, options: Mapping[str, Any]) -> DetectorOptions:
        """Builds the options from a preset and overrides; an unknown key or bad value is a TaskError."""
        options = dict(options or {})
        preset = str(options.pop("preset", "small"))
        if preset not in PRESETS:
            raise TaskError(f"model_options.preset: unknown {preset!r}; presets: {', '.join(PRESETS)}")
        merged = {**PRESETS[preset], **options}
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(merged) - names)
        if unknown:
            raise TaskError(f"model_options.{unknown[0]}: unknown detector option; known: {', '.join(sorted(names))}")
        kinds = {f.name: f.type for f in dataclasses.fields(cls)}
        clean: dict[str, Any] = {"preset": preset}
        for key, value in merged.items():
            kind = kinds[key]
            try:
                if kind.startswith("tuple[int"):
                    value = tuple(int(v) for v in value)
                elif kind.startswith("tuple[float"):
                    value = tuple(float(v) for v in value)
                elif kind == "int":
                    value = int(value)  # kfp.local hands dict contents over as floats
                elif kind == "float":
                    value = float(value)
                elif kind == "bool":
                    value = bool(value)
            except (TypeError, ValueError):
                raise TaskError(f"model_options.{key}: expected {kind}, got {value!r}") from None
            clean[key] = value
        opts = cls(**clean)
        opts.check()
        return opts

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


@dataclasses.dataclass(frozen=True)
class DetectionEvaluation:
    """What a detection evaluation produces.

    Attributes:
        metrics: ``ap``, ``ap50``, ``ap75``, ``ar100`` and ``num_examples``.
        class_names: class names, index = label.
        per_class: one dict per class: ``name``, ``ap``, ``ap50``, ``instances``.
        pr_curves: per class, precision at the 101 COCO recall points at IoU 0.5 (-1: undefined).
        examples: a few scored test images for a person to look at: ``image`` (base64 of the
            encoded bytes), ``truth`` (``[box, label]`` pairs) and ``predicted`` (``[box, label,
            score]``, score >= 0.3), boxes normalised ``[ymin, xmin, ymax, xmax]``.
    """

    metrics: dict[str, float]
    class_names: list[str]
    per_class: list[dict[str, Any]]
    pr_curves: dict[str, list[float]]
    examples: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data."""
        return dataclasses.asdict(self)


def box_iou(a: Sequence[float], b: Sequence[float]) -> float:
    """IoU of two ``[ymin, xmin, ymax, xmax]`` boxes (any common unit)."""
    ih = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iw = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ih * iw
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


class Detection(Task):
    """Boxes and classes per image; RetinaNet; COCO mAP."""

    name: ClassVar[str] = "detection"
    metrics: ClassVar[tuple[Metric, ...]] = (
        Metric("ap", True, "COCO AP averaged over IoU 0.50:0.95"),
        Metric("ap50", True, "COCO AP at IoU 0.50"),
        Metric("ap75", True, "COCO AP at IoU 0.75"),
        Metric("ar100", True, "COCO recall with 100 detections per image"),
    )
    headline_metric: ClassVar[str] = "ap50"
    serving: ClassVar[ServingSchema] = ServingSchema(outputs=OUTPUTS)
    default_value_thresholds: ClassVar[Mapping[str, float]] = {"ap50": 0.5}

    # ----------------------------------------------------------------- no TensorFlow needed

    def check_prediction(self, prediction: Mapping[str, Any], num_outputs: int | None = None) -> None:
        """Boxes in [0, 1] with ymin <= ymax and xmin <= xmax, scores sorted, ids and names aligned."""
        if set(prediction) != set(OUTPUTS):
            raise TaskError(f"prediction keys {sorted(prediction)}, expected {sorted(OUTPUTS)}")
        boxes, scores = prediction["detection_boxes"], prediction["detection_scores"]
        classes, names = prediction["detection_classes"], prediction["detection_class_names"]
        n = prediction["num_detections"]
        if not isinstance(n, (int, float)) or int(n) != n or not 0 <= n <= len(scores):
            raise TaskError(f"num_detections {n!r} is not a count of at most {len(scores)}")
        if not len(boxes) == len(scores) == len(classes) == len(names):
            raise TaskError(f"{len(boxes)} boxes, {len(scores)} scores, {len(classes)} classes, {len(names)} names")
        n = int(n)
        for box in boxes[:n]:
            if len(box) != 4 or not all(0.0 <= v <= 1.0 for v in box) or box[0] > box[2] or box[1] > box[3]:
                raise TaskError(f"box {box} is not a normalised [ymin, xmin, ymax, xmax]")
        if any(a < b for a, b in zip(scores[:n], scores[1:n], strict=False)) or not all(0 <= s <= 1 for s in scores):
            raise TaskError("detection_scores must be in [0, 1] and sorted, highest first")
        if any(c < 1 or int(c) != c for c in classes[:n]):
            raise TaskError(f"detection_classes must be label-map ids >= 1, got {classes[:n]}")

    def matches(self, prediction: Mapping[str, Any], expected: Any) -> bool:
        """Every true box found (same class, IoU >= 0.5, score >= 0.3); a negative image stays empty."""
        n = int(prediction["num_detections"])
        found = [
            (box, int(cls) - 1)
            for box, score, cls in zip(
                prediction["detection_boxes"][:n],
                prediction["detection_scores"][:n],
                prediction["detection_classes"][:n],
                strict=True,
            )
            if score >= MATCH_SCORE
        ]
        if not expected:
            return not found
        return all(
            any(label == obj["label"] and box_iou(box, obj["box"]) >= MATCH_IOU for box, label in found)
            for obj in expected
        )

    def expected_from_json(self, data: Any) -> Any:
        """A list of ``{"box": [ymin, xmin, ymax, xmax], "label": int}`` (normalised boxes)."""
        return [{"box": [float(v) for v in o["box"]], "label": int(o["label"])} for o in data]

    def output_signature(self, num_classes: int) -> dict[str, str]:
        """The Object Detection API's output names."""
        return {
            "detection_boxes": "float32 [None, max_detections, 4] normalised ymin, xmin, ymax, xmax of the input image",
            "detection_scores": "float32 [None, max_detections], sorted",
            "detection_classes": f"float32 [None, max_detections], label-map ids 1..{num_classes} (0: padding)",
            "detection_class_names": "string [None, max_detections]",
            "num_detections": "float32 [None]",
        }

    # ----------------------------------------------------------------- TensorFlow inside

    def feature_keys(self) -> tuple[str, ...]:
        """The image, its true size, its boxes, their classes and crowd flags."""
        return (_ENCODED, _HEIGHT, _WIDTH, *_BOX_KEYS, _LABELS, _CROWD)

    def input_shape(self, manifest: Mapping[str, Any], options: Mapping[str, Any]) -> tuple[int, int, int]:
        """``image_size`` square, RGB: images of any size are letterboxed to it."""
        size = DetectorOptions.from_options(options).image_size
        return (size, size, 3)

    def check_dataset(self, manifest: Mapping[str, Any]) -> None:
        """A detection dataset has classes and box features (dataset.json ``task: detection``)."""
        from trainer.tfrecords import DatasetError

        if not manifest.get("classes"):
            raise DatasetError(f"{manifest.get('dir', 'the dataset')}: no classes; convert a COCO file with categories")

    def decode(
        self, features: Mapping[str, Any], shape: tuple[int, int, int], options: Mapping[str, Any]
    ) -> tuple[Any, Any]:
        """Letterboxed uint8 images and ``{"boxes": [B, M, 4] absolute yxyx, "labels": [B, M]}``, -1 padded."""
        import tensorflow as tf

        size = shape[0]
        max_boxes = DetectorOptions.from_options(options).max_boxes

        def one(data):
            image, _scale = letterbox(tf.io.decode_image(data, channels=3, expand_animations=False), size)
            return tf.cast(tf.round(image * 255.0), tf.uint8)

        images = tf.map_fn(
            one, features[_ENCODED], fn_output_signature=tf.TensorSpec(shape, tf.uint8), parallel_iterations=16
        )
        return images, targets_of(features, size, max_boxes)

    def augment(self, images: Any, targets: Any, shape: tuple[int, int, int], seed: int | None) -> tuple[Any, Any]:
        """Random horizontal flips, boxes flipped with the images (padding stays -1)."""
        import tensorflow as tf

        width = float(shape[1])
        flip = tf.random.uniform([tf.shape(images)[0]], seed=seed) < 0.5
        images = tf.where(flip[:, None, None, None], tf.reverse(images, axis=[2]), images)
        boxes, labels = targets["boxes"], targets["labels"]
        flipped = tf.stack([boxes[..., 0], width - boxes[..., 3], boxes[..., 2], width - boxes[..., 1]], axis=-1)
        keep = flip[:, None, None] & (labels[..., None] >= 0)
        return images, {"boxes": tf.where(keep, flipped, boxes), "labels": labels}

    def optimizer(self, learning_rate: float, total_steps: int, options: Mapping[str, Any]) -> Any:
        """Adam with a linear warm-up then cosine decay, and global gradient clipping."""
        import keras

        opts = DetectorOptions.from_options(options)
        warmup = min(opts.warmup_steps, max(1, total_steps // 4))
        schedule = keras.optimizers.schedules.CosineDecay(
            0.0, max(1, total_steps - warmup), alpha=0.0, warmup_target=learning_rate, warmup_steps=warmup
        )
        return keras.optimizers.Adam(schedule, global_clipnorm=opts.clipnorm)

    def build_model(self, config: Any, manifest: Mapping[str, Any]) -> Any:
        """The RetinaNet detector for the dataset's classes; its anchors checked against the boxes."""
        if config.model != MODEL_NAME:
            raise TaskError(f"train.model: the detection task trains {MODEL_NAME!r}, got {config.model!r}")
        opts = DetectorOptions.from_options(config.model_options)
        model = build_detector(opts, len(manifest["classes"]))
        report_anchor_coverage(model, manifest, opts)
        return model

    def compile(self, model: Any, optimizer: Any, *, steps_per_execution: int, jit_compile: Any) -> None:
        """keras-hub's losses (Huber boxes, focal classes); no compiled metrics (keras-hub refuses them)."""
        model.compile(optimizer=optimizer, steps_per_execution=steps_per_execution, jit_compile=jit_compile)

    def export(self, model: Any, export_dir: str, manifest: Mapping[str, Any], options: Mapping[str, Any]) -> str:
        """The TF-OD-API-style signatures (module docstring)."""
        export_detector(model, export_dir, list(manifest["classes"]), DetectorOptions.from_options(options))
        return export_dir

    def serving_function(self, saved_model_dir: str, manifest: Mapping[str, Any]) -> tuple[Any, Any]:
        """``serving_default``, checked to return the detection outputs."""
        import os

        import tensorflow as tf

        if not tf.io.gfile.exists(os.path.join(saved_model_dir, "saved_model.pb")):
            raise TaskError(f"no SavedModel at {saved_model_dir} (saved_model.pb missing)")
        loaded = tf.saved_model.load(saved_model_dir)
        fn = loaded.signatures.get("serving_default")
        if fn is None or set(fn.structured_outputs) != set(OUTPUTS):
            got = sorted(fn.structured_outputs) if fn is not None else sorted(loaded.signatures)
            raise TaskError(f"{saved_model_dir}: serving_default must return {sorted(OUTPUTS)}, returns {got}")
        return loaded, fn

    def evaluate(self, saved_model_dir: str, dataset_dir: str, config: Any, limit: int | None = None) -> Any:
        """COCO metrics of the exported model on ``config.split`` (pycocotools)."""
        from trainer import tfrecords

        manifest = tfrecords.load_manifest(dataset_dir)
        tfrecords.split_count(manifest, config.split)
        _loaded, fn = self.serving_function(saved_model_dir, manifest)
        records = read_detection_split(dataset_dir, config.split, limit)
        predictions = predict_in_process(fn, [r["encoded"] for r in records], config.batch_size)
        result = coco_evaluate(records, predictions, list(manifest["classes"]))
        return dataclasses.replace(result, examples=scored_examples(records, predictions))

    def known_examples(self, dataset_dir: str, split: str, count: int) -> list[tuple[bytes, Any]]:
        """The split's first ``count`` images with their true (non-crowd) boxes."""
        records = read_detection_split(dataset_dir, split, count)
        return [
            (
                r["encoded"],
                [
                    {"box": box, "label": label}
                    for box, label, crowd in zip(r["boxes"], r["labels"], r["crowd"], strict=True)
                    if not crowd
                ],
            )  # fmt: skip
            for r in records
        ]

    def describe(self, summary: Mapping[str, Any]) -> Sequence[str]:
        """The losses, train and validation."""

        def fmt(value: Any) -> str:
            return "n/a" if value is None else format(value, ".4f")

        last = (summary.get("history") or [{}])[-1]
        return [
            "| | loss | box loss | class loss |",
            "|---|---|---|---|",
            f"| train | {fmt(last.get('loss'))} | {fmt(last.get('bbox_regression_loss'))} | "
            f"{fmt(last.get('cls_logits_loss'))} |",
            f"| validation | {fmt(last.get('val_loss'))} | {fmt(last.get('val_bbox_regression_loss'))} | "
            f"{fmt(last.get('val_cls_logits_loss'))} |",
        ]


# --------------------------------------------------------------------------------------------
# Input


def letterbox(image: Any, size: int) -> tuple[Any, Any]:
    """Resizes an image to fit ``size`` x ``size`` keeping its aspect ratio, padding bottom/right.

    Returns:
        (float32 image in [0, 1] of shape [size, size, channels], the scale factor applied).
    """
    import tensorflow as tf

    image = tf.image.convert_image_dtype(image, tf.float32)
    dims = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = size / tf.reduce_max(dims)
    new = tf.cast(tf.round(dims * scale), tf.int32)
    same = tf.reduce_all(tf.equal(new, tf.shape(image)[:2]))
    # An image already of the size is passed as is, so bytes-in equals tensors-in exactly.
    resized = tf.cond(same, lambda: image, lambda: tf.image.resize(image, new, method="bilinear", antialias=True))
    padded = tf.image.pad_to_bounding_box(resized, 0, 0, size, size)
    return tf.ensure_shape(tf.clip_by_value(padded, 0.0, 1.0), [size, size, None]), scale


def targets_of(features: Mapping[str, Any], size: int, max_boxes: int) -> dict[str, Any]:
    """Absolute letterboxed yxyx boxes and float labels, crowd boxes dropped, -1 padded to ``max_boxes``."""
    import tensorflow as tf

    height = tf.cast(features[_HEIGHT], tf.float32)
    width = tf.cast(features[_WIDTH], tf.float32)
    scale = size / tf.maximum(height, width)
    coords = [features[k] for k in _BOX_KEYS]  # ragged [B, None] each
    factors = [height * scale, width * scale, height * scale, width * scale]
    boxes = tf.stack([c * f[:, None] for c, f in zip(coords, factors, strict=True)], axis=-1)  # ragged [B, None, 4]
    labels = tf.cast(features[_LABELS], tf.float32)
    keep = tf.equal(features[_CROWD], 0)
    boxes = tf.ragged.boolean_mask(boxes, keep)
    labels = tf.ragged.boolean_mask(labels, keep)
    return {
        "boxes": boxes.to_tensor(default_value=-1.0, shape=[None, max_boxes, 4]),
        "labels": labels.to_tensor(default_value=-1.0, shape=[None, max_boxes]),
    }


def read_detection_split(dataset_dir: str, split: str, limit: int | None = None) -> list[dict[str, Any]]:
    """A split's records: encoded image, true size, normalised boxes, labels and crowd flags.

    Raises:
        DatasetError: the split is missing or empty.
    """
    import tensorflow as tf

    from trainer import tfrecords

    manifest = tfrecords.load_manifest(dataset_dir)
    tfrecords.split_count(manifest, split)
    files = tfrecords.shard_paths(dataset_dir, split, manifest)
    keys = (_ENCODED, _HEIGHT, _WIDTH, *_BOX_KEYS, _LABELS, _CROWD)
    spec = {k: tfrecords.FEATURE_SPEC[k] for k in keys}
    ds = tf.data.TFRecordDataset(files, compression_type=manifest.get("compression") or "")
    if limit is not None:
        ds = ds.take(limit)
    records = []
    for batch in ds.batch(256).map(lambda s: tf.io.parse_example(s, spec)):
        coords = [batch[k].to_list() for k in _BOX_KEYS]
        labels, crowd = batch[_LABELS].to_list(), batch[_CROWD].to_list()
        for i, encoded in enumerate(batch[_ENCODED].numpy()):
            records.append(
                {
                    "encoded": encoded,
                    "height": int(batch[_HEIGHT][i]),
                    "width": int(batch[_WIDTH][i]),
                    "boxes": [list(b) for b in zip(*(c[i] for c in coords), strict=True)],
                    "labels": [int(v) for v in labels[i]],
                    "crowd": [int(v) for v in crowd[i]],
                }
            )
    return records


# --------------------------------------------------------------------------------------------
# Model


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


def training_boxes(dataset_dir: str, split: str, size: int, limit: int = 5000) -> Any:
    """Up to ``limit`` records' non-crowd boxes, letterboxed to ``size`` (absolute yxyx, NumPy)."""
    import numpy as np

    rows = []
    for r in read_detection_split(dataset_dir, split, limit):
        scale = size / max(r["height"], r["width"])
        factors = np.array([r["height"], r["width"], r["height"], r["width"]], "float32") * scale
        rows += [np.asarray(b, "float32") * factors for b, c in zip(r["boxes"], r["crowd"], strict=True) if not c]
    return np.stack(rows) if rows else np.zeros((0, 4), "float32")


def report_anchor_coverage(model: Any, manifest: Mapping[str, Any], opts: DetectorOptions) -> float:
    """Logs the share of training boxes with an anchor at IoU >= 0.5; warns and suggests a size when low.

    Too small or too large anchors are the usual reason a detector's mAP stays near 0: no anchor
    is ever matched to the objects, so nothing learns to find them.
    """
    import keras_hub

    boxes = training_boxes(manifest["dir"], "train", opts.image_size)
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


# --------------------------------------------------------------------------------------------
# Export and prediction


def export_detector(model: Any, export_dir: str, class_names: list[str], opts: DetectorOptions) -> str:
    """Writes the detector as a SavedModel with ``serving_default`` (bytes) and ``serving_tensors``."""
    import keras
    import tensorflow as tf

    size = opts.image_size
    anchors = tf.constant(anchors_of(model.anchor_generator, size))
    names = tf.constant(["", *class_names])

    def detect(images, scales, heights, widths):
        raw = model(images, training=False)
        deltas = tf.cast(raw["bbox_regression"], tf.float32)
        scores = tf.sigmoid(tf.cast(raw["cls_logits"], tf.float32))
        boxes = keras.utils.bounding_boxes.decode_deltas_to_boxes(
            anchors=anchors,
            boxes_delta=deltas,
            encoded_format="center_xywh",
            anchor_format="yxyx",
            box_format="yxyx",
            image_shape=(size, size, 3),
        )
        nms = tf.image.combined_non_max_suppression(
            boxes[:, :, None, :],
            scores,
            max_output_size_per_class=opts.max_detections,
            max_total_size=opts.max_detections,
            iou_threshold=opts.nms_iou,
            score_threshold=opts.score_threshold,
            clip_boxes=False,
        )
        # Letterboxed pixels -> the original image's normalised coordinates.
        factor = tf.stack([heights, widths, heights, widths], axis=-1) * scales[:, None]
        out_boxes = tf.clip_by_value(nms.nmsed_boxes / factor[:, None, :], 0.0, 1.0)
        valid = tf.sequence_mask(nms.valid_detections, opts.max_detections)
        ids = tf.where(valid, nms.nmsed_classes + 1.0, 0.0)
        return {
            "detection_boxes": tf.where(valid[..., None], out_boxes, 0.0),
            "detection_scores": tf.where(valid, nms.nmsed_scores, 0.0),
            "detection_classes": ids,
            "detection_class_names": tf.gather(names, tf.cast(ids, tf.int32)),
            "num_detections": tf.cast(nms.valid_detections, tf.float32),
        }

    def decode_one(data):
        image = tf.io.decode_image(data, channels=3, expand_animations=False)
        dims = tf.cast(tf.shape(image)[:2], tf.float32)
        boxed, scale = letterbox(image, size)
        return boxed, scale, dims[0], dims[1]

    module = tf.Module()
    module.model = model

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
    def serve_bytes(image_bytes):
        images, scales, heights, widths = tf.map_fn(
            decode_one,
            image_bytes,
            fn_output_signature=(
                tf.TensorSpec([size, size, 3], tf.float32),
                tf.TensorSpec([], tf.float32),
                tf.TensorSpec([], tf.float32),
                tf.TensorSpec([], tf.float32),
            ),
        )
        return detect(images, scales, heights, widths)

    @tf.function(input_signature=[tf.TensorSpec([None, size, size, 3], tf.float32, name="images")])
    def serve_tensors(images):
        ones = tf.ones(tf.shape(images)[:1], tf.float32)
        return detect(images, ones, ones * size, ones * size)

    module.serve_bytes = serve_bytes
    module.serve_tensors = serve_tensors
    tf.saved_model.save(
        module,
        export_dir,
        signatures={
            "serving_default": serve_bytes.get_concrete_function(),
            "serving_tensors": serve_tensors.get_concrete_function(),
        },
    )
    return export_dir


def predict_in_process(fn: Any, images: Sequence[bytes], batch_size: int) -> list[dict[str, Any]]:
    """Runs ``serving_default`` over encoded images; one prediction dict per image (as served)."""
    import tensorflow as tf

    rows: list[dict[str, Any]] = []
    for start in range(0, len(images), batch_size):
        out = fn(image_bytes=tf.constant(list(images[start : start + batch_size]), dtype=tf.string))
        arrays = {k: v.numpy() for k, v in out.items()}
        for i in range(len(arrays["num_detections"])):
            rows.append(
                {
                    "detection_boxes": arrays["detection_boxes"][i].tolist(),
                    "detection_scores": arrays["detection_scores"][i].tolist(),
                    "detection_classes": arrays["detection_classes"][i].tolist(),
                    "detection_class_names": [n.decode() for n in arrays["detection_class_names"][i]],
                    "num_detections": float(arrays["num_detections"][i]),
                }
            )
    return rows


# --------------------------------------------------------------------------------------------
# COCO evaluation


def scored_examples(
    records: Sequence[Mapping[str, Any]], predictions: Sequence[Mapping[str, Any]], count: int = 8
) -> list[dict[str, Any]]:
    """The first ``count`` images that have objects, with true and predicted boxes (the HTML page's)."""
    import base64

    out = []
    for r, p in zip(records, predictions, strict=True):
        if not r["boxes"]:
            continue
        n = int(p["num_detections"])
        found = zip(p["detection_boxes"][:n], p["detection_classes"][:n], p["detection_scores"][:n], strict=True)
        out.append(
            {
                "image": base64.b64encode(r["encoded"]).decode("ascii"),
                "truth": [[list(b), int(label)] for b, label in zip(r["boxes"], r["labels"], strict=True)],
                "predicted": [[list(b), int(c) - 1, float(s)] for b, c, s in found if s >= MATCH_SCORE],
            }
        )
        if len(out) == count:
            break
    return out


def coco_evaluate(
    records: Sequence[Mapping[str, Any]], predictions: Sequence[Mapping[str, Any]], class_names: list[str]
) -> DetectionEvaluation:
    """COCO metrics (pycocotools) of served-format predictions against the records' true boxes.

    Boxes are compared in the original images' pixels; crowd boxes are passed as ``iscrowd``.

    Raises:
        TaskError: no records, or a prediction count that differs from the record count.
    """
    import contextlib
    import io

    import numpy as np
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    if not records:
        raise TaskError("no examples to evaluate: the split is empty")
    if len(records) != len(predictions):
        raise TaskError(f"{len(predictions)} predictions for {len(records)} images")
    gt: dict[str, Any] = {
        "images": [{"id": i, "height": r["height"], "width": r["width"]} for i, r in enumerate(records)],
        "categories": [{"id": c, "name": name} for c, name in enumerate(class_names)],
        "annotations": [],
    }
    instances = [0] * len(class_names)
    for i, r in enumerate(records):
        h, w = r["height"], r["width"]
        for (y1, x1, y2, x2), label, crowd in zip(r["boxes"], r["labels"], r["crowd"], strict=True):
            bw, bh = (x2 - x1) * w, (y2 - y1) * h
            gt["annotations"].append(
                {"id": len(gt["annotations"]) + 1, "image_id": i, "category_id": int(label), "iscrowd": int(crowd),
                 "bbox": [x1 * w, y1 * h, bw, bh], "area": bw * bh}
            )  # fmt: skip
            instances[int(label)] += 0 if crowd else 1
    dets = []
    for i, (r, p) in enumerate(zip(records, predictions, strict=True)):
        h, w = r["height"], r["width"]
        n = int(p["num_detections"])
        for (y1, x1, y2, x2), score, cls in zip(
            p["detection_boxes"][:n], p["detection_scores"][:n], p["detection_classes"][:n], strict=True
        ):
            dets.append(
                {"image_id": i, "category_id": int(cls) - 1, "score": float(score),
                 "bbox": [x1 * w, y1 * h, (x2 - x1) * w, (y2 - y1) * h]}
            )  # fmt: skip
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet):  # pycocotools prints its progress
        coco_gt = COCO()
        coco_gt.dataset = gt
        coco_gt.createIndex()
        if not dets:
            stats = np.zeros(12)
            precision = None
        else:
            evaluator = COCOeval(coco_gt, coco_gt.loadRes(dets), "bbox")
            evaluator.evaluate()
            evaluator.accumulate()
            evaluator.summarize()
            stats = np.maximum(evaluator.stats, 0.0)  # -1 (undefined) counts as 0 for the gate
            precision = evaluator.eval["precision"]  # [T, R, K, A, M]
    per_class, curves = [], {}
    for k, name in enumerate(class_names):
        if precision is None:
            ap, ap50, curve = 0.0, 0.0, [0.0] * 101
        else:
            p_all = precision[:, :, k, 0, -1]
            ap = float(p_all[p_all > -1].mean()) if (p_all > -1).any() else 0.0
            p50 = precision[0, :, k, 0, -1]
            ap50 = float(p50[p50 > -1].mean()) if (p50 > -1).any() else 0.0
            curve = [float(v) for v in p50]
        per_class.append({"name": name, "ap": ap, "ap50": ap50, "instances": instances[k]})
        curves[name] = curve
    metrics = {
        "ap": float(stats[0]),
        "ap50": float(stats[1]),
        "ap75": float(stats[2]),
        "ar100": float(stats[8]),
        "num_examples": float(len(records)),
    }
    return DetectionEvaluation(metrics=metrics, class_names=list(class_names), per_class=per_class, pr_curves=curves)
