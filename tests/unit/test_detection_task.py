"""The detection task's TF-free side: options, the served-prediction schema, known-example matching,
the metric table the gate reads, and the anchor coverage arithmetic."""

import subprocess
import sys

import numpy as np
import pytest

from trainer.tasks import TaskError, get_task
from trainer.tasks.detection.evaluation import box_iou
from trainer.tasks.detection.model import anchor_coverage
from trainer.tasks.detection.options import DetectorOptions

TASK = get_task("detection")


def prediction(boxes, scores, classes):
    pad = 4 - len(boxes)
    return {
        "detection_boxes": [list(b) for b in boxes] + [[0.0] * 4] * pad,
        "detection_scores": list(scores) + [0.0] * pad,
        "detection_classes": list(classes) + [0.0] * pad,
        "detection_class_names": ["square" if c == 1 else "circle" for c in classes] + [""] * pad,
        "num_detections": float(len(boxes)),
    }


def test_the_task_imports_without_tensorflow_and_gives_the_gate_its_metrics():
    code = (
        "import sys; from trainer.tasks import get_task; t = get_task('detection'); "
        "print(sorted(t.directions().items())); "
        "assert 'tensorflow' not in sys.modules and 'keras_hub' not in sys.modules"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert "('ap50', True)" in out and "('ar100', True)" in out
    assert TASK.headline_metric == "ap50" and TASK.default_value_thresholds == {"ap50": 0.5}


def test_options_presets_overrides_and_bad_values():
    small = DetectorOptions.from_options({})
    assert small.image_size == small.aspect_ratios == small.max_level == "auto"  # fitted to the data
    assert "image_size" in small.auto_fields() and "stem_filters" not in small.auto_fields()
    tpu = DetectorOptions.from_options({"preset": "tpu-512", "max_boxes": 50.0})  # kfp.local: ints as floats
    assert tpu.image_size == 512 and tpu.max_boxes == 50 and isinstance(tpu.max_boxes, int)
    assert tpu.stackwise_blocks == (3, 4, 6, 3) and tpu.use_p5
    with pytest.raises(TaskError, match="unknown detector option; known"):
        DetectorOptions.from_options({"anchor": 3})
    with pytest.raises(TaskError, match="multiple of 2\\*\\*max_level"):
        DetectorOptions.from_options({"image_size": 100})  # not even P3's stride divides it
    with pytest.raises(TaskError, match="multiple of 2\\*\\*max_level"):
        DetectorOptions.from_options({"image_size": 104, "max_level": 4})
    with pytest.raises(TaskError, match="anchor_size: expected a number or .auto., got .big."):
        DetectorOptions.from_options({"anchor_size": "big", "head": "anchors"})
    with pytest.raises(TaskError, match="unknown 'huge'"):
        DetectorOptions.from_options({"preset": "huge"})
    with pytest.raises(TaskError, match="64 filters in its first stack"):
        DetectorOptions.from_options({"stackwise_filters": [32, 64, 128]})


def test_served_prediction_schema():
    good = prediction([[0.1, 0.1, 0.5, 0.5]], [0.9], [1.0])
    TASK.check_prediction(good)
    with pytest.raises(TaskError, match="prediction keys"):
        TASK.check_prediction({k: v for k, v in good.items() if k != "num_detections"})
    with pytest.raises(TaskError, match="not a normalised"):
        TASK.check_prediction(prediction([[0.5, 0.1, 0.2, 0.5]], [0.9], [1.0]))
    with pytest.raises(TaskError, match="sorted"):
        TASK.check_prediction(prediction([[0.1, 0.1, 0.5, 0.5]] * 2, [0.3, 0.9], [1.0, 1.0]))
    with pytest.raises(TaskError, match="label-map ids"):
        TASK.check_prediction(prediction([[0.1, 0.1, 0.5, 0.5]], [0.9], [0.0]))


def test_known_examples_match_by_class_and_overlap():
    truth = [{"box": [0.1, 0.1, 0.5, 0.5], "label": 0}]
    assert TASK.matches(prediction([[0.12, 0.1, 0.5, 0.52]], [0.8], [1.0]), truth)
    assert not TASK.matches(prediction([[0.12, 0.1, 0.5, 0.52]], [0.8], [2.0]), truth)  # wrong class
    assert not TASK.matches(prediction([[0.6, 0.6, 0.9, 0.9]], [0.8], [1.0]), truth)  # elsewhere
    assert not TASK.matches(prediction([[0.12, 0.1, 0.5, 0.52]], [0.1], [1.0]), truth)  # too unsure
    assert TASK.matches(prediction([[0.5, 0.5, 0.6, 0.6]], [0.1], [1.0]), [])  # a negative, low score
    assert not TASK.matches(prediction([[0.5, 0.5, 0.6, 0.6]], [0.9], [1.0]), [])
    assert TASK.expected_from_json([{"box": [0, 0, 1, 1], "label": 2.0}]) == [{"box": [0.0, 0.0, 1.0, 1.0], "label": 2}]


def test_box_iou_and_anchor_coverage():
    assert box_iou([0, 0, 10, 10], [0, 0, 10, 10]) == 1.0
    assert box_iou([0, 0, 10, 10], [0, 5, 10, 15]) == pytest.approx(50 / 150)
    anchors = np.array([[0, 0, 20, 20], [40, 40, 60, 60]], "float32")
    best = anchor_coverage(np.array([[0, 0, 20, 20], [40, 40, 50, 50], [0, 0, 2, 2]], "float32"), anchors)
    assert best.tolist() == pytest.approx([1.0, 0.25, 0.01])
    assert anchor_coverage(np.zeros((0, 4)), anchors).shape == (0,)


@pytest.mark.parametrize(("name", "expected"), [("l1", 0.1), ("huber", 0.5 * 0.1**2)])
def test_the_box_loss_is_the_one_the_options_name(name, expected):
    # Whatever the weights: predicted offsets exactly 0.1 off the encoded targets on every anchor,
    # and class logits sure and right, so the loss is the box loss alone, averaged over the matched
    # anchors: 0.1 under L1, 0.1**2 / 2 under Huber (quadratic at this size).
    import numpy as np
    import tensorflow as tf

    from trainer.tasks.detection.model import build_detector

    fitted = {"image_size": 64, "max_boxes": 8, "min_level": 3, "max_level": 4, "use_p5": False, "head": "anchors",
              "anchor_size": 2.5, "num_scales": 3, "aspect_ratios": [1.0], "warmup_steps": 1}  # fmt: skip
    task = type(TASK)({**fitted, "box_loss": name})
    model = build_detector(task.options, 3)
    task.compile(model, "adam", steps_per_execution=1, jit_compile=False)
    images = tf.zeros([2, 64, 64, 3])
    boxes = tf.constant([[[8.0, 8.0, 30.0, 28.0]], [[20.0, 24.0, 52.0, 60.0]]])  # yxyx pixels, one per image
    y = {"boxes": boxes, "labels": tf.constant([[0.0], [2.0]])}
    targets, labels = model.label_encoder(images=images, gt_boxes=y["boxes"], gt_classes=y["labels"])
    labels = tf.reshape(labels, tf.shape(targets)[:2])
    assert int(tf.reduce_sum(tf.cast(labels >= 0, tf.int32))) >= 2  # both boxes matched
    sure = tf.where(tf.one_hot(tf.cast(labels, tf.int32), 3) > 0, 30.0, -30.0)
    y_pred = {"bbox_regression": targets + 0.1, "cls_logits": sure}
    loss = float(model.compute_loss(x=images, y=y, y_pred=y_pred, sample_weight=None))
    assert np.isclose(loss, expected, rtol=1e-3), loss


def _giou_reference(t, p):
    """1 - GIoU of boxes given as anchor offsets (centre, log size under the loss's soft bound), in NumPy."""
    import numpy as np

    def corners(d):
        size = np.exp(4 * np.tanh(d[..., 2:] / 4))
        return d[..., :2] - size / 2, d[..., :2] + size / 2

    (t0, t1), (p0, p1) = corners(t), corners(p)
    inter = np.prod(np.clip(np.minimum(t1, p1) - np.maximum(t0, p0), 0, None), axis=-1)
    union = np.prod(t1 - t0, axis=-1) + np.prod(p1 - p0, axis=-1) - inter
    hull = np.prod(np.maximum(t1, p1) - np.minimum(t0, p0), axis=-1)
    return 1 - (inter / union - (hull - union) / hull)


@pytest.mark.parametrize("name", ["giou", "l1+giou"])
def test_the_iou_box_losses_score_the_decoded_boxes(name):
    # The same boxes as above, 0.1 off on every offset: the loss is 1 - GIoU of the decoded boxes
    # (compared in anchor units, where IoU is what it is in pixels), averaged over the matched
    # anchors, plus the offsets' L1 (0.1) for l1+giou; exact targets give 0.
    import numpy as np
    import tensorflow as tf

    from trainer.tasks.detection.model import box_loss, build_detector

    fitted = {"image_size": 64, "max_boxes": 8, "min_level": 3, "max_level": 4, "use_p5": False, "head": "anchors",
              "anchor_size": 2.5, "num_scales": 3, "aspect_ratios": [1.0], "warmup_steps": 1}  # fmt: skip
    task = type(TASK)({**fitted, "box_loss": name})
    model = build_detector(task.options, 3)
    task.compile(model, "adam", steps_per_execution=1, jit_compile=False)
    images = tf.zeros([2, 64, 64, 3])
    y = {
        "boxes": tf.constant([[[8.0, 8.0, 30.0, 28.0]], [[20.0, 24.0, 52.0, 60.0]]]),
        "labels": tf.constant([[0.0], [2.0]]),
    }
    targets, labels = model.label_encoder(images=images, gt_boxes=y["boxes"], gt_classes=y["labels"])
    labels = tf.reshape(labels, tf.shape(targets)[:2])
    matched = (labels >= 0).numpy()
    sure = tf.where(tf.one_hot(tf.cast(labels, tf.int32), 3) > 0, 30.0, -30.0)
    loss = float(
        model.compute_loss(
            x=images, y=y, y_pred={"bbox_regression": targets + 0.1, "cls_logits": sure}, sample_weight=None
        )
    )
    expected = _giou_reference(targets.numpy()[matched], targets.numpy()[matched] + 0.1).mean()
    assert np.isclose(loss, expected + (0.1 if name == "l1+giou" else 0.0), rtol=1e-3), (loss, expected)
    assert 0.0 < expected < 1.0
    exact = box_loss(name)(targets, targets, sample_weight=tf.cast(labels >= 0, tf.float32))
    assert float(exact) == pytest.approx(0.0, abs=1e-5)


def test_fresh_box_heads_start_every_box_at_its_anchor():
    # The box head's kernel drawn at std 0.01 and its bias 0: whatever the features, the first
    # offsets are small beside keras-hub's own draw (up to several anchor sizes).
    import numpy as np

    from trainer.tasks.detection.model import build_detector

    fitted = {"image_size": 64, "max_boxes": 8, "min_level": 3, "max_level": 4, "use_p5": False, "head": "anchors",
              "anchor_size": 2.5, "num_scales": 3, "aspect_ratios": [1.0], "warmup_steps": 1}  # fmt: skip
    model = build_detector(type(TASK)(fitted).options, 3)
    kernel = np.asarray(model.box_head.prediction_layer.kernel)
    assert 0.005 < kernel.std() < 0.02 and not np.asarray(model.box_head.prediction_layer.bias).any()


def test_an_unknown_box_loss_names_the_choices():
    with pytest.raises(TaskError, match="box_loss: unknown 'smooth'; choose one of l1, huber"):
        DetectorOptions.from_options({"box_loss": "smooth", "head": "anchors"})


def test_a_mosaic_moves_each_box_with_its_object_and_drops_only_slivers():
    """Each image holds bright rectangles at its boxes: after the mosaic every kept box still bounds
    bright pixels only (exact, whole-pixel windows), and what was dropped was mostly outside."""
    import tensorflow as tf

    from trainer.tasks.detection.input import MOSAIC_MIN_AREA, augment, mosaic

    size, rng = 32, np.random.default_rng(0)
    images, boxes, labels = np.zeros((6, size, size, 3), np.uint8), -np.ones((6, 2, 4), np.float32), -np.ones((6, 2))
    for i in range(6):
        for j in range(2):
            y, x = rng.integers(0, size - 8, 2)
            h, w = rng.integers(3, 9, 2)
            images[i, y : y + h, x : x + w] = 255
            boxes[i, j], labels[i, j] = (y, x, y + h, x + w), j
    targets = {"boxes": tf.constant(boxes), "labels": tf.constant(labels, tf.float32)}
    cut, moved = mosaic(tf.constant(images), targets, size, 1.0, seed=3)
    cut, out_boxes, out_labels = cut.numpy(), moved["boxes"].numpy(), moved["labels"].numpy()
    assert cut.shape == images.shape and out_boxes.shape == (6, 8, 4) and out_labels.shape == (6, 8)
    kept = out_labels >= 0
    assert kept.sum() > 0 and ((out_boxes >= 0) & (out_boxes <= size)).all(axis=-1)[kept].all()
    assert (out_boxes[~kept] == -1).all()
    for i, j in zip(*np.nonzero(kept), strict=True):
        y0, x0, y1, x1 = out_boxes[i, j].astype(int)
        assert (cut[i, y0:y1, x0:x1] == 255).all() and min(y1 - y0, x1 - x0) >= 2
    # A share of 0 changes nothing but the padding; flips keep every box on its object too.
    same, padded = mosaic(tf.constant(images), targets, size, 0.0, seed=3)
    assert (same.numpy() == images).all() and (padded["boxes"].numpy()[:, :2] == boxes).all()
    flipped, moved = augment(tf.constant(images), targets, (size, size, 3), seed=5, mosaic_chance=0.5)
    for i, j in zip(*np.nonzero(moved["labels"].numpy() >= 0), strict=True):
        y0, x0, y1, x1 = moved["boxes"].numpy()[i, j].astype(int)
        assert (flipped.numpy()[i, y0:y1, x0:x1] == 255).all()
    assert 0 < MOSAIC_MIN_AREA < 1
    with pytest.raises(TaskError, match="model_options.mosaic"):
        DetectorOptions(mosaic=1.5).check()
