"""Object detection: keras-hub's RetinaNet network from COCO-style TFRecords, COCO mAP, TF-OD-API-style serving.

The parts: ``options.py`` (presets and the detector's settings), ``fit.py`` (the options left on
``auto`` fitted to the training boxes), ``input.py`` (letterboxing and
box targets), ``model.py`` (the detector and its anchor check), ``edges.py`` (the default head:
YOLOv8's edge distributions, task-aligned assignment, CIoU and DFL), ``export.py`` (the serving
signatures), ``evaluation.py`` (COCO metrics with pycocotools) and ``prediction.py`` (batch
prediction's records, COCO results and metrics).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from trainer.configbase import ConfigBase
from trainer.tasks import register
from trainer.tasks.base import DataFit, Metric, RunDefaults, ServingSchema, Task, TaskError
from trainer.tasks.detection import input as task_input
from trainer.tasks.detection.evaluation import (
    MATCH_IOU,
    MATCH_SCORE,
    METRICS,
    SLICE_METRICS,
    TRAINING_METRICS,
    DetectionEvaluation,
    box_iou,
)
from trainer.tasks.detection.export import OUTPUTS
from trainer.tasks.detection.options import DetectorOptions, DetectorPredictionOptions, DetectorSelectionOptions
from trainer.tasks.detection.prediction import DetectionPrediction
from trainer.tasks.detection.selection import DetectionSelection
from trainer.tfrecords import DatasetInfo

if TYPE_CHECKING:
    from trainer.config import EvaluateConfig

log = logging.getLogger(__name__)


# A training's figures (``training_metrics``) -> the key keras-hub's RetinaNet logs them under.
_LOGGED = {
    "val_box_loss": "val_bbox_regression_loss",
    "val_class_loss": "val_cls_logits_loss",
    "train_box_loss": "bbox_regression_loss",
    "train_class_loss": "cls_logits_loss",
}


def _fmt(value: Any) -> str:
    return "n/a" if value is None else format(value, ".4f")


@register
class Detection(Task):
    """Boxes and classes per image; RetinaNet's network with the dfl head (or its own anchors); COCO mAP."""

    name: ClassVar[str] = "detection"
    options_type: ClassVar[type[DetectorOptions]] = DetectorOptions
    metrics: ClassVar[tuple[Metric, ...]] = METRICS
    headline_metric: ClassVar[str] = "ap50"
    quality_metrics: ClassVar[tuple[str, ...]] = ("ap50", "ap")
    slice_metrics: ClassVar[tuple[str, ...]] = SLICE_METRICS
    builtin_slice_columns: ClassVar[tuple[str, ...]] = ("class", "size", "area")
    training_metrics: ClassVar[tuple[Metric, ...]] = TRAINING_METRICS
    serving: ClassVar[ServingSchema] = ServingSchema(outputs=OUTPUTS)
    default_value_thresholds: ClassVar[Mapping[str, float]] = {"ap50": 0.5}
    records_boxes: ClassVar[bool] = True
    step_options_types: ClassVar[Mapping[str, type[ConfigBase]]] = {
        "prediction_options": DetectorPredictionOptions,
        "selection_options": DetectorSelectionOptions,
    }
    run_defaults: ClassVar[RunDefaults] = RunDefaults(
        data="shapes",
        limit=0,
        epochs=0,  # 0: the schedule is fitted to the data, in optimizer steps (fit.py)
        served_model_name="detector",
        model="retinanet",
        headline=("ap50", "ap"),
        time_budget="<=5m",
        grid_data="shapes:400",
        # The small preset suits shapes and a CPU already; a short warm-up for runs of few steps.
        grid_model_options={"warmup_steps": 2},
        # The small RetinaNet, fitted to the data; 0.008 gives 1e-3 at batch 16.
        form={
            # Spelled out so the run form shows what is fitted to the data; a value typed over
            # "auto" is kept as it is.
            "model_options": {name: "auto" for name in DetectorOptions().auto_fields()},
            "batch_size_per_replica": 16,
            "augment": True,
            "learning_rate": 0.008,
            "change_thresholds": {"ap50": -0.02},
        },
        notes={
            "source": "For detection: a COCO instances JSON (images beside it or under images/), or shapes.",
            "model_options": (
                "For the detector: image_size, anchor_size, num_scales, aspect_ratios, min_level/max_level, "
                "max_boxes, warmup_steps (each auto: fitted to the training boxes, within max_image_size), the "
                "ResNet's stackwise_filters/blocks/strides, head_convs, weights, ...; or {preset: tpu-512} for a "
                "ResNet-50-class detector at 512 px (docs/detection.md)."
            ),
            "epochs": "0 fits a schedule in optimizer steps to the dataset's size and the global batch.",
            "learning_rate": "0.008 gives 1e-3 at batch 16, after a short warm-up, with cosine decay.",
        },
    )
    options: DetectorOptions

    @classmethod
    def parse_options(cls, options: Mapping[str, Any]) -> DetectorOptions:
        """A preset, then overrides of its fields (``options.py``)."""
        return DetectorOptions.from_options(options)

    def accepts_image_size(self) -> bool:
        """The detector letterboxes to ``image_size``."""
        return True

    def with_image_size(self, image_size: int) -> dict[str, Any]:
        """``image_size`` set in the model options."""
        return {"image_size": image_size}

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
        return task_input.FEATURE_KEYS

    def input_shape(self, info: DatasetInfo) -> tuple[int, int, int]:
        """``image_size`` square, RGB: images of any size are letterboxed to it."""
        size = self.options.image_size
        if size == "auto":
            raise TaskError("model_options.image_size is auto: the task must be fitted to the data first (fit_to_data)")
        return (size, size, 3)

    def check_dataset(self, info: DatasetInfo) -> None:
        """A detection dataset has classes and box features (dataset.json ``task: detection``)."""
        from trainer.tfrecords import DatasetError

        if not info.classes:
            raise DatasetError(f"{info.where}: no classes; convert a COCO file with categories")

    def decode(self, features: Mapping[str, Any], shape: tuple[int, int, int]) -> tuple[Any, Any]:
        """Letterboxed uint8 images and -1-padded absolute yxyx boxes and labels."""
        return task_input.decode(features, shape, self.options.max_boxes)

    def augment(self, images: Any, targets: Any, shape: tuple[int, int, int], seed: int | None) -> tuple[Any, Any]:
        """Mosaics (``model_options.mosaic``) and random horizontal flips, boxes moved with the images."""
        return task_input.augment(images, targets, shape, seed, self.options.mosaic)

    def fit_to_data(
        self,
        info: DatasetInfo,
        split: str,
        *,
        global_batch: int,
        steps_per_epoch: int,
        epochs: Optional[int],
        learning_rate: float,
    ) -> Optional[DataFit]:
        """The options left on ``auto`` and, with ``epochs`` None, the schedule, from the split's boxes (``fit.py``)."""
        from trainer.tasks.detection.fit import fit_detector, read_box_sample

        if not self.options.auto_fields() and epochs is not None:
            return None
        fitted = fit_detector(
            self.options,
            read_box_sample(info, split),
            global_batch=global_batch,
            steps_per_epoch=steps_per_epoch,
            epochs=epochs,
            learning_rate=learning_rate,
        )
        for line in fitted.record["lines"]:
            (log.warning if line.startswith("warning:") else log.info)("fit to the data: %s", line)
        return DataFit(type(self)(self.options.resolved(fitted.options)), fitted.epochs, fitted.record)

    def optimizer(self, learning_rate: float, total_steps: int) -> Any:
        """Adam with a linear warm-up then cosine decay, and global gradient clipping.

        The schedule's length can be set once the step is timed (a time budget,
        ``trainer.budget.schedules.set_total_steps``).
        """
        import keras

        from trainer.budget.schedules import WarmupCosine

        opts = self.options
        schedule = WarmupCosine(learning_rate, opts.warmup_steps, total_steps)
        return keras.optimizers.Adam(schedule, global_clipnorm=opts.clipnorm)

    def validation_metric(self, accelerator: str) -> tuple[str, bool]:
        """COCO AP on a sample of the validation split (``val_ap``); the validation loss on a TPU,
        where the model in memory is not scored outside the strategy.
        """
        return ("val_loss", False) if accelerator == "tpu" else ("val_ap", True)

    def validation_callbacks(self, info: DatasetInfo, dataset_dir: str, split: str, accelerator: str) -> list[Any]:
        """COCO AP and AP@0.5 of the model in memory on up to ``VALIDATION_IMAGES`` validation images."""
        if accelerator == "tpu":
            return []
        from trainer.tasks.detection.validation import VALIDATION_IMAGES, ValidationAP

        return [ValidationAP(info, split, self.options, limit=VALIDATION_IMAGES)]

    def resolve_model(self, model_name: str, info: DatasetInfo) -> tuple[str, Optional[str]]:
        """``auto`` is the one detector, RetinaNet."""
        from trainer.tasks.detection.model import MODEL_NAME

        if model_name == "auto":
            return MODEL_NAME, "the detection task's model"
        return model_name, None

    def build_model(self, model_name: str, info: DatasetInfo) -> Any:
        """The RetinaNet detector for the dataset's classes; its anchors checked against the boxes."""
        from trainer.tasks.detection.model import MODEL_NAME, build_detector, report_anchor_coverage

        if model_name != MODEL_NAME:
            raise TaskError(f"train.model: the detection task trains {MODEL_NAME!r}, got {model_name!r}")
        model = build_detector(self.options, len(info.classes))
        report_anchor_coverage(model, info, self.options)
        return model

    def compile(self, model: Any, optimizer: Any, *, steps_per_execution: int, jit_compile: Any) -> None:
        """The options' box loss and keras-hub's focal loss on the classes; no compiled metrics (refused)."""
        from trainer.tasks.detection.model import box_loss

        model.compile(
            optimizer=optimizer,
            box_loss=box_loss(self.options.box_loss),
            steps_per_execution=steps_per_execution,
            jit_compile=jit_compile,
        )

    def export(self, model: Any, export_dir: str, info: DatasetInfo) -> str:
        """The TF-OD-API-style signatures (``export.py``)."""
        from trainer.tasks.detection.export import export_detector

        export_detector(model, export_dir, list(info.classes), self.options)
        return export_dir

    def save_preset(self, model: Any, preset_dir: str) -> str:
        """keras-hub's ``save_to_preset`` (backbone, heads, pixel scaling): ``weights`` can name it."""
        from trainer import presets

        return presets.save_preset(model, preset_dir)

    def serving_function(self, saved_model_dir: str, info: DatasetInfo) -> tuple[Any, Any]:
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

    def evaluate(
        self,
        saved_model_dir: str,
        dataset_dir: str,
        config: EvaluateConfig,
        limit: int | None = None,
        on_progress: Optional[Callable[..., None]] = None,
        on_answers: Optional[Callable[..., None]] = None,
    ) -> DetectionEvaluation:
        """COCO metrics of the exported model on ``config.split`` (pycocotools), and its slice table
        (``on_answers``: each batch's images and answers as served, ``export.predict_in_process``).
        """
        from trainer import slices, tfrecords
        from trainer.tasks.detection.evaluation import coco_evaluate, scored_examples, slice_table
        from trainer.tasks.detection.export import predict_in_process
        from trainer.tasks.detection.input import read_detection_split

        info = tfrecords.load_dataset_info(dataset_dir)
        info.split_count(config.split)
        keys = slices.read_split_slices(
            dataset_dir, config.split, limit, config.slice_columns, config.slice_size_edges
        ).keys
        _loaded, fn = self.serving_function(saved_model_dir, info)
        records = read_detection_split(info, config.split, limit)
        images = [r["encoded"] for r in records]
        predictions = predict_in_process(fn, images, config.batch_size, on_progress, on_answers)
        classes = list(info.classes)
        result = coco_evaluate(records, predictions, classes, config.slice_min_size)
        table = slice_table(records, predictions, classes, keys, result, config.slice_min_size)
        return dataclasses.replace(result, examples=scored_examples(records, predictions), slices=table)

    def known_examples(self, dataset_dir: str, split: str, count: int) -> list[tuple[bytes, Any]]:
        """The split's first ``count`` images with their true (non-crowd) boxes."""
        from trainer import tfrecords
        from trainer.tasks.detection.input import read_detection_split

        records = read_detection_split(tfrecords.load_dataset_info(dataset_dir), split, count)
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

    def summary_metrics(self, history: Sequence[Mapping[str, Any]]) -> dict[str, Optional[float]]:
        """The last epoch's box and class losses, validation and training (keras-hub's log names)."""
        last = history[-1] if history else {}
        return {name: last.get(key) for name, key in _LOGGED.items()}

    def describe(self, summary: Mapping[str, Any]) -> Sequence[str]:
        """The losses, train and validation."""
        last = (summary.get("history") or [{}])[-1]
        return [
            "| | loss | box loss | class loss |",
            "|---|---|---|---|",
            f"| train | {_fmt(last.get('loss'))} | {_fmt(last.get('bbox_regression_loss'))} | "
            f"{_fmt(last.get('cls_logits_loss'))} |",
            f"| validation | {_fmt(last.get('val_loss'))} | {_fmt(last.get('val_bbox_regression_loss'))} | "
            f"{_fmt(last.get('val_cls_logits_loss'))} |",
        ]

    # ----------------------------------------------------------------- batch prediction

    def prediction(self) -> DetectionPrediction:
        """The detector's batch prediction (``prediction.py``)."""
        return DetectionPrediction(self)

    def selection(self, options: Optional[ConfigBase] = None) -> DetectionSelection:
        """The detector's uncertainty strategies (``selection.py``)."""
        return DetectionSelection(self, options)

    def portable(self) -> Any:
        """The detector's portable forms (``portable.py``): its heads converted, decoding and NMS its own."""
        from trainer.tasks.detection.portable import DetectionPortable

        return DetectionPortable(self.options)
