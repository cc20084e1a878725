"""The dfl head (``trainer/tasks/detection/edges.py``): its decoding, its assigner, its losses, its options.

Properties that hold whatever a model's weights are: the decoding is exact for distributions the
test writes, the assigner's positives are inside their object and at most ``topk`` of them, the
class targets are at most the IoU, DFL is least at the true distance.
"""

import dataclasses

import numpy as np
import pytest

from trainer.tasks.base import TaskError
from trainer.tasks.detection.options import DetectorOptions

BINS = 16


def _frames(size=64, levels=(3, 4)):
    """One square anchor of 4 strides per location (the dfl head's frame), absolute yxyx, NumPy."""
    import keras_hub

    from trainer.tasks.detection.model import anchors_of

    return anchors_of(keras_hub.layers.AnchorGenerator("yxyx", levels[0], levels[1], 1, [1.0], 4.0), size)


def _peaked(distances):
    """Box-head logits ``[1, N, 4 x BINS]`` whose expectations are ``distances`` (``[N, 4]``, in strides)."""
    n = len(distances)
    logits = np.full((n, 4, BINS), -60.0, "float32")
    left = np.floor(distances).astype(int)
    right_share = distances - left
    for i in range(n):
        for e in range(4):
            # two bins around the distance, with log-weights giving that expectation
            logits[i, e, left[i, e]] = np.log(max(1 - right_share[i, e], 1e-12))
            logits[i, e, min(left[i, e] + 1, BINS - 1)] = np.log(max(right_share[i, e], 1e-12))
    return logits.reshape(1, n, 4 * BINS)


def test_the_decoding_reads_each_edge_s_distance_from_the_location_s_centre_and_stride():
    from trainer.tasks.detection.edges import centres_and_strides, decode_edges
    from trainer.tasks.detection.export import decode_boxes

    anchors = _frames()
    rng = np.random.default_rng(0)
    distances = rng.uniform(0.5, 6.0, (len(anchors), 4)).astype("float32")
    boxes = np.asarray(decode_edges(_peaked(distances), anchors, 4.0, BINS))[0]
    centres, strides = (np.asarray(v) for v in centres_and_strides(anchors, 4.0))
    assert set(np.round(strides).astype(int)) == {8, 16}
    d = distances * strides[:, None]
    expected = np.concatenate([centres - d[:, :2], centres + d[:, 2:]], axis=1)
    np.testing.assert_allclose(boxes, expected, atol=1e-3)
    # the export's decoding tells the heads apart by the box head's width
    opts = DetectorOptions.from_options({"image_size": 64, "anchor_size": 4.0})
    np.testing.assert_allclose(np.asarray(decode_boxes(_peaked(distances), anchors, opts))[0], expected, atol=1e-3)


def test_the_assigner_picks_at_most_topk_locations_inside_each_object_and_targets_at_most_their_iou():
    from trainer.tasks.detection.edges import assign, centres_and_strides, iou

    anchors = _frames()
    centres, _ = centres_and_strides(anchors, 4.0)
    rng = np.random.default_rng(1)
    # predictions: boxes near the anchors, scores anywhere
    boxes = (anchors + rng.normal(0, 3, anchors.shape)).astype("float32")[None].repeat(2, 0)
    boxes[..., 2:] = np.maximum(boxes[..., 2:], boxes[..., :2] + 1)
    scores = rng.uniform(0.001, 0.9, (2, len(anchors), 3)).astype("float32")
    gt = np.array([[[4, 6, 30, 40], [30, 30, 60, 62]], [[10, 10, 50, 50], [-1, -1, -1, -1]]], "float32")
    labels = np.array([[0, 2], [1, -1]], "float32")
    for topk in (1, 3, 10):
        target_boxes, targets = (np.asarray(v) for v in assign(centres, boxes, scores, gt, labels, topk))
        quality = targets.max(-1)
        positive = quality > 0
        for b in range(2):
            for m in range(2):
                if labels[b, m] < 0:
                    continue
                mine = positive[b] & np.all(target_boxes[b] == gt[b, m], axis=-1)
                assert 1 <= mine.sum() <= topk  # every object gets a location, at most topk
                c = np.asarray(centres)[mine]
                assert np.all((c > gt[b, m, :2]) & (c < gt[b, m, 2:]))  # each inside its object
                assert np.all(targets[b][mine].argmax(-1) == labels[b, m])  # of the object's class
                overlap = np.asarray(iou(gt[b, m][None], boxes[b][mine]))
                assert np.all(quality[b][mine] <= overlap + 1e-5)  # at most the IoU
                assert quality[b][mine].max() == pytest.approx(overlap.max(), rel=1e-4)  # the best gets its IoU
        assert not positive[1][np.all(target_boxes[1] == -1, axis=-1)].any()  # padding claims nothing


def test_the_assigner_still_finds_positives_when_every_score_is_tiny():
    # In linear space 1e-30 ** 0.5 x IoU ** 6 underflows to 0 and no location would ever be
    # positive again (the collapse the log-space alignment prevents).
    from trainer.tasks.detection.edges import assign, centres_and_strides

    anchors = _frames()
    centres, _ = centres_and_strides(anchors, 4.0)
    boxes = anchors[None].astype("float32")
    scores = np.full((1, len(anchors), 3), 1e-30, "float32")
    gt, labels = np.array([[[4, 6, 30, 40]]], "float32"), np.array([[1]], "float32")
    _, targets = assign(centres, boxes, scores, gt, labels, 3)
    assert 1 <= int((np.asarray(targets).max(-1) > 0).sum()) <= 3


def test_distribution_focal_loss_is_least_at_the_true_distance():
    from trainer.tasks.detection.edges import distribution_focal_loss

    true = np.array([[[2.3, 0.0, 7.9, 12.5]]], "float32")
    right = _peaked(true[0]).reshape(1, 1, 4, BINS)
    off = _peaked(true[0] + 1.5).reshape(1, 1, 4, BINS)
    at_truth = float(np.asarray(distribution_focal_loss(right, true)).sum())
    assert at_truth < float(np.asarray(distribution_focal_loss(off, true)).sum())
    uniform = np.zeros((1, 1, 4, BINS), "float32")
    assert at_truth < float(np.asarray(distribution_focal_loss(uniform, true)).sum())


def test_a_head_s_options_given_to_the_other_head_are_one_line_naming_its_own():
    own = "own options are box_bins, topk, head_filters"
    with pytest.raises(TaskError, match=f"box_loss: the dfl head does not take it .*{own}"):
        DetectorOptions.from_options({"box_loss": "l1"})
    with pytest.raises(TaskError, match="num_scales: the dfl head does not take it"):
        DetectorOptions.from_options({"num_scales": 3})
    with pytest.raises(TaskError, match="topk: the anchors head does not take it .*box_loss, anchor_size"):
        DetectorOptions.from_options({"head": "anchors", "topk": 5})
    with pytest.raises(TaskError, match="head_filters: the anchors head does not take it"):
        DetectorOptions.from_options({"head": "anchors", "head_filters": 32})
    with pytest.raises(TaskError, match="head_filters and fpn_filters must be >= 1, got 0 and 128"):
        DetectorOptions.from_options({"head_filters": 0})
    assert DetectorOptions.from_options({"preset": "tpu-512"}).fpn_filters == 256  # keras-hub's RetinaNet
    with pytest.raises(TaskError, match="head: unknown 'yolo'; choose one of dfl, anchors"):
        DetectorOptions.from_options({"head": "yolo"})
    # a fitted run's options handed back whole (a retraining) change nothing, so they pass
    fitted = {"anchor_size": 4.0, "num_scales": 1, "aspect_ratios": [1.0], "box_loss": "l1+giou", "topk": 3}
    assert DetectorOptions.from_options(fitted).head == "dfl"
    assert DetectorOptions.from_options({"preset": "tpu-512"}).head == "anchors"


def test_the_fit_gives_the_dfl_head_its_frame_and_chooses_only_the_levels():
    from tests.unit.test_detection_fit import synthetic
    from trainer.tasks.detection import fit

    opts = DetectorOptions.from_options({})
    sample = synthetic()
    fitted = fit.fit_detector(opts, sample, global_batch=16, steps_per_epoch=10, epochs=None, learning_rate=1e-3)
    chosen = fitted.options
    assert (chosen["anchor_size"], chosen["num_scales"], tuple(chosen["aspect_ratios"])) == (4.0, 1, (1.0,))
    assert 3 <= chosen["min_level"] <= chosen["max_level"]
    lines = "\n".join(fitted.record["lines"])
    assert "locations P" in lines and "anchors cover only" not in lines
    assert "the dfl head at P" in fitted.record["summary"]


def test_the_head_s_loss_is_finite_logs_keras_hub_s_loss_names_and_the_model_survives_a_save(tmp_path):
    import keras
    import keras_hub

    from trainer.tasks.detection.edges import EdgeDetector
    from trainer.tasks.detection.model import build_detector

    opts = DetectorOptions.from_options(
        {"image_size": 64, "max_boxes": 4, "min_level": 3, "max_level": 4, "use_p5": False, "warmup_steps": 1,
         "head_filters": 32}
    )  # fmt: skip
    opts = DetectorOptions(**{**opts.__dict__, "anchor_size": 4.0, "num_scales": 1, "aspect_ratios": (1.0,)})
    model = build_detector(opts, 3)
    assert isinstance(model, EdgeDetector) and model.output["bbox_regression"].shape[-1] == 4 * BINS
    widths = {head.conv_layers[0].filters for head in (model.box_head, model.classification_head)}
    assert widths == {32}  # the heads' width is the option's
    # The pyramid at the options' width (keras-hub's class fixes 256), still a RetinaNetBackbone to keras-hub.
    assert isinstance(model.backbone, keras_hub.models.RetinaNetBackbone) and model.backbone.fpn_filters == 128
    assert {int(t.shape[-1]) for t in model.backbone.outputs} == {128}
    model.compile(optimizer=keras.optimizers.Adam(1e-3), box_loss="ignored", jit_compile=False)
    images = np.random.default_rng(0).uniform(0, 1, (2, 64, 64, 3)).astype("float32")
    y = {
        "boxes": np.array([[[8, 8, 30, 28], [-1, -1, -1, -1]], [[20, 24, 52, 60], [-1, -1, -1, -1]]], "float32"),
        "labels": np.array([[0, -1], [2, -1]], "float32"),
    }
    out = model(images)
    loss = float(model.compute_loss(x=images, y=y, y_pred=out))
    assert np.isfinite(loss) and loss > 0
    logged = {m.name: float(m.result()) for m in (model.box_loss_tracker, model.class_loss_tracker)}
    assert set(logged) == {"bbox_regression_loss", "cls_logits_loss"} and all(v > 0 for v in logged.values())
    path = str(tmp_path / "model.keras")
    model.save(path)
    again = keras.saving.load_model(path, compile=False)
    assert again.head_filters == 32 and again.box_head.conv_layers[0].filters == 32
    assert type(again.backbone).__name__ == "PyramidBackbone" and again.backbone.fpn_filters == 128
    # Its preset, started from with another head width for the same classes: the heads are kept at
    # theirs (a model saved before the width was an option has 256), not started again.
    from trainer import presets

    preset = presets.save_preset(model, str(tmp_path / "preset"))
    tuned = build_detector(dataclasses.replace(opts, weights=preset, head_filters=8), 3)
    assert tuned.head_filters == 32 and tuned.backbone.fpn_filters == 128
    np.testing.assert_allclose(
        np.asarray(tuned(images)["cls_logits"], "float32"), np.asarray(out["cls_logits"], "float32"), atol=1e-5
    )
    np.testing.assert_allclose(
        np.asarray(again(images)["bbox_regression"], "float32"), np.asarray(out["bbox_regression"], "float32")
    )
