"""The detector fitted to the data (``trainer/tasks/detection/fit.py``), on generated box statistics: NumPy only.

Box samples are drawn here directly (cheap) and from the varied COCO generator's
``instances.json`` (``tests/varied_coco.py``), which the acceptance benchmark trains on.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from tests import varied_coco
from trainer.tasks.base import TaskError
from trainer.tasks.detection import fit
from trainer.tasks.detection.options import DetectorOptions


def synthetic(
    *,
    images: int = 300,
    sides: tuple[int, int] = (96, 160),
    object_px: tuple[float, float] = (24, 56),
    aspect: tuple[float, float] = (0.8, 1.25),
    classes: int = 3,
    labels: int | None = None,
    seed: int = 0,
) -> fit.BoxSample:
    """``images`` non-square images with 1-4 boxes each (``aspect``: height / width), labels below ``labels``."""
    rng = np.random.default_rng(seed)
    image_hw = rng.integers(sides[0], sides[1] + 1, size=(images, 2)).astype(float)
    owner = np.repeat(np.arange(images), rng.integers(1, 5, size=images))
    side = rng.uniform(*object_px, size=len(owner))
    ratio = rng.uniform(*aspect, size=len(owner))
    hw = np.minimum(np.stack([side * np.sqrt(ratio), side / np.sqrt(ratio)], axis=1), image_hw[owner] - 1)
    center = rng.uniform(hw / 2, image_hw[owner] - hw / 2) / image_hw[owner]
    return fit.BoxSample(
        image_hw=image_hw,
        box_hw=hw,
        box_center=center,
        box_image=owner,
        labels=rng.integers(0, labels or classes, size=len(owner)),
        crowd=0,
        examples=images,
        class_names=tuple(f"c{i}" for i in range(classes)),
    )


def sample_of_coco(path) -> fit.BoxSample:
    """The non-crowd boxes of a COCO file, as the fit reads them from the records."""
    data = json.loads(path.read_text())
    index = {im["id"]: i for i, im in enumerate(data["images"])}
    image_hw = np.array([[im["height"], im["width"]] for im in data["images"]], float)
    anns = [a for a in data["annotations"] if not a["iscrowd"]]
    owner = np.array([index[a["image_id"]] for a in anns])
    xywh = np.array([a["bbox"] for a in anns], float)
    center = np.stack([xywh[:, 1] + xywh[:, 3] / 2, xywh[:, 0] + xywh[:, 2] / 2], axis=1) / image_hw[owner]
    return fit.BoxSample(
        image_hw=image_hw,
        box_hw=xywh[:, [3, 2]],
        box_center=center,
        box_image=owner,
        labels=np.array([a["category_id"] - 1 for a in anns]),
        crowd=len(data["annotations"]) - len(anns),
        examples=len(image_hw),
        class_names=tuple(c["name"] for c in data["categories"]),
    )


def run_fit(sample: fit.BoxSample, options: dict | None = None, epochs: int | None = None, batch: int = 16):
    """The fit of the anchor head (the anchor search's tests), unless ``options`` name the head."""
    opts = DetectorOptions.from_options({"head": "anchors", **(options or {})})
    return opts, fit.fit_detector(
        opts, sample, global_batch=batch, steps_per_epoch=max(1, sample.examples // batch), epochs=epochs,
        learning_rate=1e-3,
    )  # fmt: skip


def test_the_issue_kind_of_data_gets_a_larger_input_and_full_coverage():
    opts, fitted = run_fit(synthetic())
    record = fitted.record
    assert fitted.options["image_size"] == 128  # 24 px objects in 160 px images keep >= 16 px
    assert record["object_px"]["p5"] >= fit.MIN_OBJECT_PX
    assert record["coverage_after"] >= 0.95 > record["coverage_previous_setup"]  # 64 px lost the small ones
    resolved = opts.resolved(fitted.options)
    assert resolved.auto_fields() == [] and resolved.image_size % 2**resolved.max_level == 0
    assert any("coverage" in line for line in record["lines"]) and any("schedule" in line for line in record["lines"])


def test_elongated_objects_get_anchors_that_cover_them():
    sample = synthetic(sides=(300, 400), object_px=(40, 120), aspect=(0.22, 0.35))  # wide bars
    opts, fitted = run_fit(sample)
    record = fitted.record
    assert record["coverage_before"] < 0.5 < 0.9 <= record["coverage_after"]
    assert min(fitted.options["aspect_ratios"]) < 0.5
    opts.resolved(fitted.options).check()


def test_user_values_are_kept_and_never_refitted():
    user = {"image_size": 96, "anchor_size": 3.0, "aspect_ratios": [1.0], "max_boxes": 50, "warmup_steps": 10}
    opts, fitted = run_fit(synthetic(), user, epochs=5)
    assert not set(fitted.options) & set(user)
    assert fitted.epochs is None and fitted.record["steps"] == 5 * (300 // 16)
    resolved = opts.resolved(fitted.options)
    assert (resolved.image_size, resolved.anchor_size, resolved.aspect_ratios) == (96, 3.0, (1.0,))
    assert (resolved.max_boxes, resolved.warmup_steps) == (50, 10)
    assert 96 % 2**resolved.max_level == 0
    with pytest.raises(TaskError, match="set by the user"):
        opts.resolved({"image_size": 128})


def test_objects_too_small_for_the_budget_are_an_error_naming_the_size_they_need():
    sample = synthetic(sides=(600, 640), object_px=(3, 6))
    with pytest.raises(fit.FitError, match=r"too small.*max_image_size to \d+"):
        run_fit(sample, {"max_image_size": 256})
    # Within a larger budget the same data fits (the size it asked for).
    _opts, fitted = run_fit(sample, {"max_image_size": 4096})
    assert fitted.options["image_size"] > 256


def test_a_few_small_objects_at_the_budget_warn_with_the_size_that_would_keep_them():
    sample = synthetic(sides=(600, 640), object_px=(8, 200))
    _opts, fitted = run_fit(sample, {"max_image_size": 512})
    assert fitted.options["image_size"] == 512
    assert any("max_image_size" in w for w in fitted.warnings)


def test_a_class_without_boxes_is_warned_and_counted():
    _opts, fitted = run_fit(synthetic(classes=4, labels=3))
    assert fitted.record["classes_without_boxes"] == ["c3"]
    assert any("1 of 4 classes" in w and "c3" in w for w in fitted.warnings)


def test_the_schedule_is_in_steps_scaled_with_the_data_and_the_batch():
    small = fit.schedule(1_000, 16, 62)
    assert small[1] == pytest.approx(fit.MIN_IMAGES / 16, rel=0.05)  # a small set still gets its steps
    large = fit.schedule(100_000, 16, 6250)
    assert large[1] == fit.EPOCH_EQUIVALENT * 6250
    wide = fit.schedule(100_000, 64, 1562)
    assert wide[1] == pytest.approx(large[1] / 4, rel=0.01)
    assert fit.schedule(1_000, 1024, 1)[1] == fit.MIN_STEPS


def test_max_boxes_follows_the_most_boxes_in_an_image():
    _opts, fitted = run_fit(synthetic())
    assert fitted.options["max_boxes"] == 8 and fitted.record["most_boxes_per_image"] == 4


def test_no_boxes_at_all_falls_back_with_a_warning():
    empty = fit.BoxSample(np.full((10, 2), 64.0), np.zeros((0, 2)), np.zeros((0, 2)), np.zeros(0, int),
                          np.zeros(0, int), 0, 10, ("a",))  # fmt: skip
    opts, fitted = run_fit(empty)
    assert any("no boxes" in w for w in fitted.warnings)
    opts.resolved(fitted.options).check()


@pytest.mark.slow
def test_the_numpy_grid_matches_the_anchor_generator_of_keras_hub():
    pytest.importorskip("keras_hub")
    import keras_hub

    from trainer.tasks.detection.model import anchor_coverage, anchors_of

    sample = synthetic(images=60)
    anchors = fit.AnchorSet(3, 5, 2.0, 3, (0.5, 1.0, 2.0))
    generator = keras_hub.layers.AnchorGenerator("yxyx", 3, 5, 3, [0.5, 1.0, 2.0], 2.0)
    centers, hw = sample.letterboxed(128)
    yxyx = np.concatenate([centers - hw / 2, centers + hw / 2], axis=1)
    reference = anchor_coverage(yxyx, anchors_of(generator, 128))
    np.testing.assert_allclose(fit.best_iou(centers, hw, anchors, 128), reference, atol=1e-4)


def test_the_varied_generator_writes_what_it_promises(tmp_path):
    spec = varied_coco.VariedSpec(count=60, seed=3, negatives=0.2, crowd=0.3)
    path = varied_coco.generate(tmp_path, spec)
    data = json.loads(path.read_text())
    sizes = {(im["width"], im["height"]) for im in data["images"]}
    assert any(w != h for w, h in sizes) and all(96 <= v <= 160 for s in sizes for v in s)
    names = [im["file_name"] for im in data["images"]]
    assert {n.rsplit(".", 1)[1] for n in names} == {"jpg", "png"}
    assert any(a["iscrowd"] for a in data["annotations"])
    assert len({a["image_id"] for a in data["annotations"]}) < len(data["images"])  # negatives
    from PIL import Image

    assert "L" in {Image.open(tmp_path / n).mode for n in names}
    assert varied_coco.generate(tmp_path / "again", spec).read_bytes() == path.read_bytes()  # seeded
    _opts, fitted = run_fit(sample_of_coco(path))
    assert fitted.record["coverage_after"] >= 0.95


def test_the_run_form_autos_keep_a_preset_s_values():
    from trainer.tasks import get_task

    form = dict(get_task("detection").run_defaults.form["model_options"])
    assert form and set(form.values()) == {"auto"}
    tpu = DetectorOptions.from_options({**form, "preset": "tpu-512"})
    assert (tpu.image_size, tpu.max_level, tpu.anchor_size) == (512, 7, 4.0)
    assert set(tpu.auto_fields()) == {"warmup_steps"}


def test_the_one_line_summary_of_the_train_step():
    from components.train.run import fit_summary

    _opts, fitted = run_fit(synthetic())
    line = fit_summary(fitted.record)
    assert line.startswith("fitted: input 128 px, anchors cover") and line.endswith(f"{fitted.record['steps']} steps")
    assert line == fitted.record["summary"]  # the fit says it; the train step only passes it on
    earlier = {k: v for k, v in fitted.record.items() if k != "summary"}  # a fit recorded before it did
    assert fit_summary(earlier) == fitted.record["lines"][0]


def test_the_built_in_shapes_keep_the_detector_tuned_for_them():
    rng = np.random.default_rng(1)
    sample = synthetic(images=400, sides=(64, 64), object_px=(16, 32), aspect=(1.0, 1.0))
    # Sides of whole pixels, as stored: normalised float32 coordinates times the image size.
    sides = rng.integers(16, 33, size=len(sample.box_hw)).astype(np.float32)
    hw = np.stack([sides, sides], axis=1) / np.float32(64) * np.float32(64)
    _opts, fitted = run_fit(dataclasses.replace(sample, box_hw=hw.astype(float)), epochs=8)
    chosen = fitted.options
    assert chosen["image_size"] == 64
    assert (chosen["min_level"], chosen["max_level"], chosen["anchor_size"], chosen["num_scales"]) == (3, 4, 2.5, 3)
    assert chosen["aspect_ratios"] == (1.0,)


@pytest.mark.slow
def test_the_records_give_the_fit_the_boxes_of_the_coco_file(tmp_path):
    from components.convert import convert
    from components.convert.config import ConvertConfig
    from trainer.tfrecords import load_dataset_info

    coco = varied_coco.generate(tmp_path / "coco", varied_coco.VariedSpec(count=40, seed=5, crowd=0.5))
    convert(ConvertConfig(source=str(coco), workers=1, splits={"train": 1.0}), str(tmp_path / "ds"))
    got = fit.read_box_sample(load_dataset_info(str(tmp_path / "ds")), "train")
    want = sample_of_coco(coco)
    assert got.examples == 40 and len(got.image_hw) == 40 and got.crowd == want.crowd > 0
    order = lambda s: np.lexsort(np.concatenate([s.box_hw, s.box_center], axis=1).T.round(2))  # noqa: E731
    np.testing.assert_allclose(got.box_hw[order(got)], want.box_hw[order(want)], atol=0.05)
    assert sorted(got.labels.tolist()) == sorted(want.labels.tolist())
