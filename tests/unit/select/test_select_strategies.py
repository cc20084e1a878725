"""The select step's logic as pure functions: the tasks' uncertainty strategies on arrays and
records, the ranking, the diversity step, the config's checks. No model, no TensorFlow."""

from __future__ import annotations

import numpy as np
import pytest

from components.select import picking
from components.select.config import SelectConfig
from components.select.pool import names
from trainer.config import ConfigError
from trainer.tasks import TaskError, get_task
from trainer.tasks.classification.selection import entropy, least_confidence, margin, probabilities
from trainer.tasks.detection.selection import box_iou, flip_agreement, mirror, near_threshold
from trainer.tasks.selection import selection_of

P = np.array([[0.9, 0.05, 0.05], [0.4, 0.35, 0.25], [1 / 3, 1 / 3, 1 / 3], [0.5, 0.5, 0.0]])


def test_classification_strategies_rank_the_unsure_first():
    assert least_confidence(P) == pytest.approx([0.1, 0.6, 2 / 3, 0.5])
    assert margin(P) == pytest.approx([0.15, 0.95, 1.0, 1.0])
    h = entropy(P)
    assert h[2] == pytest.approx(1.0) and h[0] < h[1] < h[2] and 0.0 <= h.min()
    assert entropy(np.array([[1.0, 0.0]])) == pytest.approx([0.0], abs=1e-9)
    # margin tells two classes neck and neck from a spread; least confidence does not
    assert margin(P)[3] > margin(P)[1] and least_confidence(P)[3] < least_confidence(P)[1]


def test_classification_records_become_probabilities_and_reasons():
    names_ = ["shirt", "coat", "bag"]
    records = [
        {"classes": [{"class": names_[i], "index": i, "score": float(p)} for i, p in enumerate(row)]} for row in P
    ]
    assert probabilities(records, 3) == pytest.approx(P)
    facet = selection_of(get_task("classification"))
    assert facet.check("auto") == "least_confidence" and facet.check("random") == "random"
    doubts = facet.uncertainty(records, None, strategy="margin", class_names=names_)
    assert [round(d.score, 2) for d in doubts] == [0.15, 0.95, 1.0, 1.0]
    assert doubts[1].reason == "margin: top class shirt at 0.40, then coat at 0.35"
    assert facet.proposal(records[1]).label == "shirt" and facet.proposal({"classes": []}).label is None
    with pytest.raises(TaskError, match="a prediction names class 5, but the model has 3 classes"):
        probabilities([{"classes": [{"index": 5, "score": 1.0}]}], 3)


def test_near_threshold_finds_the_box_closest_to_the_threshold():
    assert near_threshold(np.array([0.95, 0.52, 0.1]), 0.5) == (pytest.approx(0.96), 1)
    assert near_threshold(np.array([]), 0.5) == (0.0, -1)
    assert near_threshold(np.array([1.0]), 0.5)[0] == pytest.approx(0.0)


def test_flip_agreement_matches_mirrored_boxes_class_for_class():
    boxes = np.array([[10, 10, 30, 30], [60, 20, 90, 40]], dtype=float)
    seen = mirror(boxes, 100)  # what the mirror image's detector reports
    assert seen[0] == pytest.approx([70, 10, 90, 30])
    assert mirror(seen, 100) == pytest.approx(boxes)
    assert box_iou(boxes, boxes).diagonal() == pytest.approx([1.0, 1.0])
    assert flip_agreement(boxes, ["a", "b"], mirror(seen, 100), ["a", "b"], 0.5)[:2] == (pytest.approx(1.0), 2)
    # one box lost, and a class that disagrees: one pair of three boxes
    agreement, pairs, ious = flip_agreement(boxes, ["a", "b"], boxes[:1], ["a"], 0.5)
    assert (pairs, agreement) == (1, pytest.approx(0.5))
    assert flip_agreement(boxes, ["a", "b"], boxes, ["b", "a"], 0.5)[:2] == (0.0, 0)
    shifted = boxes[:1] + [5, 0, 5, 0]
    assert flip_agreement(boxes[:1], ["a"], shifted, ["a"], 0.5)[2] == [pytest.approx(15 / 25)]
    assert flip_agreement(np.zeros((0, 4)), [], np.zeros((0, 4)), [], 0.5) == (1.0, 0, [])


def _record(*detections, width=100):
    return {"detections": [{"box": b, "class": c, "class_id": 1, "score": s} for b, c, s in detections],
            "width": width, "height": 80}  # fmt: skip


def test_detection_strategies_combine_the_threshold_and_the_flip():
    facet = selection_of(get_task("detection"), {"threshold": 0.4})
    sure = _record(([10, 10, 40, 40], "ring", 0.95))
    sure_mirror = _record(([60, 10, 90, 40], "ring", 0.93))
    doubtful = _record(([10, 10, 40, 40], "ring", 0.42), ([50, 50, 60, 60], "bar", 0.9))
    doubtful_mirror = _record(([10, 10, 40, 40], "ring", 0.41))  # the ring moved: not found again
    records, mirrored = [sure, doubtful], [sure_mirror, doubtful_mirror]
    assert facet.flips("uncertainty") and facet.flips("flip") and not facet.flips("threshold")
    flip = facet.uncertainty(records, mirrored, strategy="flip", class_names=["ring", "bar"])
    assert flip[0].score == pytest.approx(0.0) and flip[1].score == pytest.approx(1.0)
    assert flip[1].reason == "flip: 0 of 2 boxes found again in the mirror image (1 there)"
    near = facet.uncertainty(records, None, strategy="threshold", class_names=["ring", "bar"])
    assert near[1].score > near[0].score and "box ring at 0.42 near the threshold 0.40" in near[1].reason
    both = facet.uncertainty(records, mirrored, strategy="uncertainty", class_names=["ring", "bar"])
    assert both[1].score == pytest.approx((near[1].score + 1.0) / 2)
    assert [b.label for b in facet.proposal(doubtful).boxes] == ["ring", "bar"]
    assert facet.proposal(_record(([1, 1, 5, 5], "bar", 0.2))).boxes == ()
    with pytest.raises(ValueError, match="needs the mirrored images' records"):
        facet.uncertainty(records, None, strategy="flip", class_names=["ring", "bar"])


def test_the_tasks_refuse_what_they_do_not_offer():
    with pytest.raises(TaskError, match="strategy 'flip': task 'classification' offers least_confidence, margin, "):
        selection_of(get_task("classification")).check("flip")
    with pytest.raises(TaskError, match="selection_options.threshold: task 'classification' takes no selection"):
        selection_of(get_task("classification"), {"threshold": 0.3})
    with pytest.raises(TaskError, match="selection_options.threshold: must be in"):
        selection_of(get_task("detection"), {"threshold": 1.5})
    with pytest.raises(TaskError, match="unknown key"):
        selection_of(get_task("detection"), {"thresh": 0.3})


def test_rank_puts_the_highest_first_and_random_is_seeded():
    scores = [0.1, 0.9, 0.5, 0.9, 0.0]
    ranked = picking.rank(scores, random_order=False, seed=0)
    assert ranked[2:] == [2, 0, 4] and sorted(ranked[:2]) == [1, 3]
    assert picking.rank(scores, random_order=True, seed=3) == picking.rank(scores, random_order=True, seed=3)
    assert sorted(picking.rank(scores, random_order=True, seed=3)) == list(range(5))
    many = [picking.rank([0.0] * 20, random_order=True, seed=s) for s in range(3)]
    assert many[0] != many[1] != many[2]


HASHES = {0: 0b0, 1: 0b1, 2: 0xFF, 3: 0xFFFF_0000, 4: 0b11, 5: 0xFFFF_FFFF}


def test_the_hash_step_passes_over_near_copies_in_rank_order():
    looked: list[int] = []

    def hash_of(p):
        looked.append(p)
        return HASHES[p]

    picked = picking.spread([0, 1, 2, 3, 4, 5], hash_of, 3, diversity="hash", near_bits=4)
    assert picked.picks == [0, 2, 3] and picked.near_copies == [1]
    assert looked == [0, 1, 2, 3]  # nothing hashed past the count
    assert picking.spread([0, 1, 2], HASHES.__getitem__, 2, diversity="none", near_bits=4).picks == [0, 1]
    short = picking.spread([0, 1, 4], HASHES.__getitem__, 3, diversity="hash", near_bits=4)
    assert short.picks == [0] and short.near_copies == [1, 4]


def test_k_center_spreads_the_picks_over_the_candidates():
    picked = picking.spread([0, 1, 2, 3, 4, 5], HASHES.__getitem__, 3, diversity="kcenter", near_bits=2)
    assert picked.picks[0] == 0  # the best ranked first
    assert picked.picks[1] == 5  # then the farthest from it (32 bits)
    assert 1 not in picked.picks and 4 not in picked.picks  # near-copies of the first
    assert picking.distance(0xF0, 0x0F) == 8


def test_picked_images_get_safe_unique_names_with_their_format():
    got = names(
        ["a/b.jpg", "a_b.jpg", "fashion-mnist:train:7", "x y.PNG", "photo"], ["jpeg", "jpeg", "png", "png", "gif"]
    )
    assert got == ["a_b.jpg", "a_b-1.jpg", "fashion-mnist_train_7.png", "x_y.PNG", "photo.gif"]


def test_the_config_refuses_what_cannot_work():
    base = dict(data="pool", output_uri="out", model_dir="m")
    assert SelectConfig(**base).strategy == "auto"
    for bad, match in (
        (dict(count=0), "count: must be >= 1"),
        (dict(diversity="far"), "diversity: expected one of"),
        (dict(near_bits=40), "near_bits: must be 0..32"),
        (dict(stage="staging"), "not both"),
        (dict(selection_options={"nope": 1}), "selection_options.nope"),
    ):
        with pytest.raises(ConfigError, match=match):
            SelectConfig(**{**base, **bad})
    assert SelectConfig(**base, selection_options={"threshold": 0.3}).selection_options == {"threshold": 0.3}
