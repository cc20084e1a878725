"""The detector fitted to the data: every detector option left on ``auto``, derived from the training boxes.

Before the model is built, the train step reads the training split's boxes (their features only,
no image is decoded: :func:`read_box_sample`) and derives, for each option left on ``auto``:

- ``image_size``: the smallest multiple of 64 (sizes that suit the TPU's tiling), at least 64, at
  which the small objects (the 5th percentile of the box sizes, as the square root of the area)
  keep ``MIN_OBJECT_PX`` pixels after letterboxing, bounded by ``max_image_size`` (the compute
  budget). More than ``TOO_SMALL_SHARE`` of the boxes under ``LEARNABLE_PX`` at the budget is an
  error that names the size they need; fewer, a warning.
- ``min_level``/``max_level`` (and ``use_p5``), ``anchor_size``, ``num_scales``, ``aspect_ratios``:
  a search over candidates (the aspect ratios also from clustering the boxes' log aspect ratios)
  for the share of boxes with an anchor at IoU >= 0.5 on the real anchor grid at the chosen size
  (keras-hub's ``AnchorGenerator``, in NumPy); among the best, the previous defaults where they
  reach the goal, else the fewest anchors. The share is reported before (the previous fixed
  defaults at that size) and after.
- ``max_boxes``: the most boxes any training image has, rounded up to a multiple of 8.
- ``warmup_steps`` and the length of training (``epochs: null`` in the train config): a schedule
  in optimizer steps, ``max(MIN_IMAGES, EPOCH_EQUIVALENT x examples) / global batch`` (at least
  ``MIN_STEPS``), rounded to whole epochs; the learning rate is the one for the global batch.

A value the user sets is never changed; the fit only fills in the ``auto`` ones. Pure NumPy but
for :func:`read_box_sample`, so the choices are tested without TensorFlow.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from trainer.tasks.base import TaskError

if TYPE_CHECKING:
    from trainer.tasks.detection.options import DetectorOptions
    from trainer.tfrecords import DatasetInfo

log = logging.getLogger(__name__)

AUTO = "auto"
MIN_OBJECT_PX = 16.0  # the small objects keep this many pixels (square root of the area) after letterboxing
LEARNABLE_PX = 8.0  # under this no anchor of P3 (stride 8) can match a box
SMALL_QUANTILE = 0.05  # "the small objects": this quantile of the box sizes
TOO_SMALL_SHARE = 0.10  # more boxes than this under LEARNABLE_PX at the budget: an error
SIZE_STEP = 64  # multiples of 64 suit the TPU's tiling (and every level up to P6)
MIN_IMAGE_SIZE = 64
COVERAGE_GOAL = 0.95
MATCH_IOU = 0.5  # keras-hub's RetinaNet matches an anchor to a box from IoU 0.5
# The schedule: at least this many images seen, or this many passes over the data if more.
MIN_IMAGES = 20_000
EPOCH_EQUIVALENT = 8
MIN_STEPS = 400
WARMUP_SHARE = 0.03
MIN_WARMUP = 30
SEARCH_BOXES = 4000  # boxes the anchor search scores (a seeded sample); the coverage reported uses all
# What the detector used before it was fitted: the "before" of the coverage report.
PREVIOUS: dict[str, Any] = {
    "min_level": 3,
    "max_level": 4,
    "anchor_size": 2.5,
    "num_scales": 3,
    "aspect_ratios": (1.0,),
}
ANCHOR_SIZES = (1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0)
NUM_SCALES = (2, 3, 4)
LEVELS = (3, 4, 5, 6, 7)


class FitError(TaskError):
    """The data cannot be fitted within the budget (objects too small for any allowed size)."""


@dataclasses.dataclass(frozen=True)
class BoxSample:
    """The training boxes the fit reads: sizes in the images' own pixels, NumPy arrays.

    Attributes:
        image_hw: ``[N, 2]`` height and width of each sampled image (negatives included).
        box_hw: ``[B, 2]`` height and width of each non-crowd box, in its image's pixels.
        box_center: ``[B, 2]`` centre (y, x) of each box, normalised to its image.
        box_image: ``[B]`` index into ``image_hw`` of each box's image.
        labels: ``[B]`` class index of each box.
        crowd: crowd boxes seen (not trained on).
        examples: examples in the split (the sample may hold fewer).
        class_names: the dataset's classes.
    """

    image_hw: np.ndarray
    box_hw: np.ndarray
    box_center: np.ndarray
    box_image: np.ndarray
    labels: np.ndarray
    crowd: int
    examples: int
    class_names: tuple[str, ...]

    def scale(self, size: int) -> np.ndarray:
        """``[B]`` the letterbox factor of each box's image at ``size``."""
        return size / self.image_hw.max(axis=1)[self.box_image]

    def object_px(self, size: int) -> np.ndarray:
        """``[B]`` each box's size (square root of the area) in pixels after letterboxing to ``size``."""
        return np.sqrt(self.box_hw[:, 0] * self.box_hw[:, 1]) * self.scale(size)

    def letterboxed(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        """(``[B, 2]`` centres, ``[B, 2]`` heights and widths) in pixels at ``size``."""
        factor = self.scale(size)[:, None]
        return self.box_center * self.image_hw[self.box_image] * factor, self.box_hw * factor


@dataclasses.dataclass(frozen=True)
class AnchorSet:
    """One candidate anchor configuration (keras-hub's ``AnchorGenerator`` arguments)."""

    min_level: int
    max_level: int
    anchor_size: float
    num_scales: int
    aspect_ratios: tuple[float, ...]

    def per_location(self) -> int:
        """Anchors at each position of a level."""
        return self.num_scales * len(self.aspect_ratios)

    def count(self, size: int) -> int:
        """Anchors over all levels for a ``size`` x ``size`` input (the heads' work)."""
        return (
            sum(math.ceil(size / 2**lv) ** 2 for lv in range(self.min_level, self.max_level + 1)) * self.per_location()
        )

    def shapes(self) -> list[tuple[int, float, float]]:
        """(level, height, width) of each anchor shape, rounded as keras-hub rounds them."""
        out = []
        for level in range(self.min_level, self.max_level + 1):
            for k in range(self.num_scales):
                side = int(2**level * self.anchor_size * 2 ** (k / self.num_scales))
                for ratio in self.aspect_ratios:
                    h, w = side * math.sqrt(ratio), side / math.sqrt(ratio)
                    # Half-even rounding of the half extents, as keras-hub's ``ops.round`` does.
                    out.append((level, 2.0 * round(h / 2), 2.0 * round(w / 2)))
        return out


def _shape_iou(centers: np.ndarray, hw: np.ndarray, shape: tuple[int, float, float], size: int) -> np.ndarray:
    """``[B]`` each box's IoU with the nearest anchor of one shape (level, height, width) at ``size``.

    keras-hub puts a level's anchor centres at ``i * stride`` (``stride = size // ceil(size / 2**level)``);
    for a given anchor shape the IoU falls with the centre's distance along each axis, so the
    nearest grid point is the best one and no full box-by-anchor matrix is needed.
    """
    level, ah, aw = shape
    cells = math.ceil(size / 2**level)
    stride = size // cells
    grid = np.minimum(np.rint(centers / stride), cells - 1) * stride  # centres are >= 0
    inter = np.ones(len(hw))
    for axis, extent in ((0, ah), (1, aw)):
        lo = np.maximum(centers[:, axis] - hw[:, axis] / 2, grid[:, axis] - extent / 2)
        hi = np.minimum(centers[:, axis] + hw[:, axis] / 2, grid[:, axis] + extent / 2)
        inter *= np.maximum(hi - lo, 0.0)
    return inter / np.maximum(hw[:, 0] * hw[:, 1] + ah * aw - inter, 1e-9)


class _Scorer:
    """Coverage of anchor sets on one set of letterboxed boxes; each anchor shape's IoUs computed once."""

    def __init__(self, centers: np.ndarray, hw: np.ndarray, size: int) -> None:
        self.centers, self.hw, self.size = centers, hw, size
        self._columns: dict[tuple[int, float, float], np.ndarray] = {}

    def best_iou(self, anchors: AnchorSet) -> np.ndarray:
        best = np.zeros(len(self.hw))
        for shape in anchors.shapes():
            if shape not in self._columns:
                self._columns[shape] = _shape_iou(self.centers, self.hw, shape, self.size)
            np.maximum(best, self._columns[shape], out=best)
        return best

    def coverage(self, anchors: AnchorSet) -> float:
        if not len(self.hw):
            return 1.0
        return float((self.best_iou(anchors) >= MATCH_IOU).mean())


def best_iou(centers: np.ndarray, hw: np.ndarray, anchors: AnchorSet, size: int) -> np.ndarray:
    """``[B]`` each box's best IoU with any anchor of ``anchors`` on the grid of a ``size`` input (pixels, yx)."""
    return _Scorer(centers, hw, size).best_iou(anchors)


def coverage(sample: BoxSample, anchors: AnchorSet, size: int) -> float:
    """The share of the sample's boxes with an anchor at IoU >= 0.5 at input ``size``."""
    return _Scorer(*sample.letterboxed(size), size).coverage(anchors)


def cluster_ratios(sample: BoxSample, k: int, seed: int = 0) -> tuple[float, ...]:
    """``k`` aspect ratios (height / width, as keras-hub reads them) from 1-D k-means on log ratios."""
    logs = np.log(sample.box_hw[:, 0] / np.maximum(sample.box_hw[:, 1], 1e-9))
    if not len(logs):
        return (1.0,)
    centres = np.quantile(logs, (np.arange(k) + 0.5) / k)
    for _ in range(20):
        nearest = np.abs(logs[:, None] - centres[None, :]).argmin(axis=1)
        centres = np.array([logs[nearest == j].mean() if (nearest == j).any() else centres[j] for j in range(k)])
    return tuple(sorted({round(float(np.exp(c)), 2) for c in centres}))


def _ratio_candidates(sample: BoxSample) -> list[tuple[float, ...]]:
    candidates = [(1.0,), (0.5, 1.0, 2.0)] + [cluster_ratios(sample, k) for k in (2, 3)]
    return list(dict.fromkeys(candidates))


def _choices(opts: DetectorOptions, name: str, options: Sequence[Any]) -> Sequence[Any]:
    value = getattr(opts, name)
    return options if value == AUTO else (value,)


def _level_ranges(opts: DetectorOptions, sample: BoxSample, size: int, deepest: int) -> list[tuple[int, int]]:
    """The (min_level, max_level) pairs the options allow (the user's levels held fixed)."""
    smallest = float(np.quantile(sample.object_px(size), 0.01))
    top = deepest if opts.use_p5 is False else max(LEVELS)
    lows = _choices(opts, "min_level", LEVELS)
    # A coarser finest level only where even the smallest objects are 1.5 strides across.
    lows = [lv for lv in lows if lv == min(lows) or 1.5 * 2**lv <= smallest]
    pairs = []
    for lo in lows:
        # A user's image_size must divide into every level's cells; an ``auto`` one is rounded up to fit.
        highs = [lv for lv in LEVELS if lo <= lv <= top and (opts.image_size == AUTO or size % 2**lv == 0)]
        pairs += [(lo, hi) for hi in _choices(opts, "max_level", highs or [lo])]
    return pairs


def _candidates(opts: DetectorOptions, sample: BoxSample, size: int, deepest: int, scorer: _Scorer) -> list:
    """(coverage, anchor set) of every anchor set the fields left on ``auto`` allow (the user's held fixed)."""
    pairs = _level_ranges(opts, sample, size, deepest)
    levels = sorted({lv for lo, hi in pairs for lv in range(lo, hi + 1)})
    out = []
    ratio_choices = _choices(opts, "aspect_ratios", _ratio_candidates(sample))
    for a in _choices(opts, "anchor_size", ANCHOR_SIZES):
        for n in _choices(opts, "num_scales", NUM_SCALES):
            for ratios in ratio_choices:
                # Each level's best IoUs once; a range of levels is their maximum.
                per_level = {lv: scorer.best_iou(AnchorSet(lv, lv, float(a), int(n), tuple(ratios))) for lv in levels}
                for lo, hi in pairs:
                    best = np.max([per_level[lv] for lv in range(lo, hi + 1)], axis=0)
                    covered = float((best >= MATCH_IOU).mean()) if len(best) else 1.0
                    out.append((covered, AnchorSet(lo, hi, float(a), int(n), tuple(ratios))))
    return out


def search_anchors(opts: DetectorOptions, sample: BoxSample, size: int, deepest: int) -> AnchorSet:
    """The anchor set with the best coverage at ``size``; among those within half a point, the fewest anchors."""
    centers, hw = sample.letterboxed(size)
    if len(hw) > SEARCH_BOXES:
        index = np.random.default_rng(0).choice(len(hw), SEARCH_BOXES, replace=False)
        centers, hw = centers[index], hw[index]
    scored = _candidates(opts, sample, size, deepest, _Scorer(centers, hw, size))
    top = max(s for s, _ in scored)
    near = [c for s, c in scored if s >= top - 0.005]
    # The anchors the detector had before the fit stay where they already cover the boxes (what
    # works is not changed for a tie); else the fewest anchors among the best.
    previous = [c for c in near if dataclasses.asdict(c) == {**dataclasses.asdict(c), **PREVIOUS}]
    if previous and top >= COVERAGE_GOAL:
        return previous[0]
    return min(near, key=lambda c: (c.count(size), c.max_level, abs(c.anchor_size - 2.5)))


def _round_up(value: float, step: int) -> int:
    return int(math.ceil(value / step) * step)


def choose_image_size(sample: BoxSample, budget: int) -> tuple[int, float, Optional[str]]:
    """(the input size, the size the small objects need, a warning or None) for the boxes.

    Raises:
        FitError: more than ``TOO_SMALL_SHARE`` of the boxes stay under ``LEARNABLE_PX`` at the budget.
    """
    relative = np.sqrt(sample.box_hw[:, 0] * sample.box_hw[:, 1]) / sample.image_hw.max(axis=1)[sample.box_image]
    small = float(np.quantile(relative, SMALL_QUANTILE))
    need = MIN_OBJECT_PX / max(small, 1e-9)
    # 2% of slack: boxes stored as normalised float32 must not tip 64.0 over to the next size.
    size = max(MIN_IMAGE_SIZE, _round_up(need / 1.02, SIZE_STEP))
    cap = budget // SIZE_STEP * SIZE_STEP
    if size <= cap:
        return size, need, None
    under = float((relative * cap < LEARNABLE_PX).mean())
    advice = _round_up(need / 1.02, SIZE_STEP)
    if under > TOO_SMALL_SHARE:
        raise FitError(
            f"model_options.image_size: the objects are too small for the budget: at max_image_size {budget} "
            f"(input {cap} px) {100 * under:.0f}% of the training boxes stay under {LEARNABLE_PX:g} px, where no "
            f"anchor can match them (the smallest 5% are {100 * small:.1f}% of their image's long side). They need "
            f"image_size {advice} to keep {MIN_OBJECT_PX:g} px: set model_options.max_image_size to {advice} "
            "(compute grows with its square), or crop or tile the images"
        )
    return (
        cap,
        need,
        (
            f"image_size {cap} (the budget, max_image_size {budget}) leaves the smallest 5% of the objects under "
            f"{MIN_OBJECT_PX:g} px; image_size {advice} would keep them (set model_options.max_image_size {advice})"
        ),
    )


def schedule(examples: int, global_batch: int, steps_per_epoch: int) -> tuple[int, int, str]:
    """(epochs, steps, why) of the schedule in optimizer steps for the dataset's size and the global batch."""
    images = max(MIN_IMAGES, EPOCH_EQUIVALENT * examples)
    steps = max(MIN_STEPS, math.ceil(images / global_batch))
    epochs = max(1, round(steps / max(1, steps_per_epoch)))  # whole epochs, the nearest count
    why = (
        f"{epochs * steps_per_epoch} steps ({epochs} epochs x {steps_per_epoch}) at global batch {global_batch}: "
        f"max({MIN_IMAGES:,} images, {EPOCH_EQUIVALENT} passes over {examples:,}) / batch, at least {MIN_STEPS}"
    )
    return epochs, epochs * steps_per_epoch, why


@dataclasses.dataclass(frozen=True)
class DetectorFit:
    """What the fit chose, and why.

    Attributes:
        options: the resolved value of every option that was ``auto``, by name.
        epochs: the epochs of the fitted schedule; None when the config set them.
        record: JSON data for ``training.json`` (``fit``), the model card and the run report.
        warnings: what the fit could not reach, with what would.
    """

    options: dict[str, Any]
    epochs: Optional[int]
    record: dict[str, Any]
    warnings: list[str]


def _quantiles(values: np.ndarray) -> dict[str, float]:
    if not len(values):
        return {}
    q = np.quantile(values, (0.0, 0.05, 0.5, 0.95, 1.0))
    return {k: round(float(v), 1) for k, v in zip(("min", "p5", "median", "p95", "max"), q, strict=True)}


def _empty_classes(sample: BoxSample) -> list[str]:
    counts = np.bincount(sample.labels.astype(int), minlength=len(sample.class_names))
    return [name for name, n in zip(sample.class_names, counts, strict=False) if n == 0]


def _size_and_anchors(opts: DetectorOptions, sample: BoxSample, deepest: int) -> tuple[int, AnchorSet, dict]:
    """The input size and the anchors, fitted together (a level's stride must divide the size)."""
    notes: dict[str, Any] = {}
    size = opts.image_size
    if size == AUTO:
        size, need, warning = choose_image_size(sample, opts.max_image_size)
        notes.update(size_needed=round(need, 1), size_warning=warning)
    for _ in range(3):
        anchors = search_anchors(opts, sample, int(size), deepest)
        if opts.image_size != AUTO or size % 2**anchors.max_level == 0:
            break
        size = _round_up(size, 2**anchors.max_level)
    return int(size), anchors, notes


def fit_detector(
    opts: DetectorOptions,
    sample: BoxSample,
    *,
    global_batch: int,
    steps_per_epoch: int,
    epochs: Optional[int],
    learning_rate: float,
) -> DetectorFit:
    """Derives every option left on ``auto`` (and the epochs when ``epochs`` is None) from the boxes.

    Args:
        opts: the detector's options, some ``auto``.
        sample: the training split's boxes (:func:`read_box_sample`).
        global_batch: examples per optimizer step.
        steps_per_epoch: steps of one epoch at that batch.
        epochs: the config's epochs; None to fit the schedule.
        learning_rate: the learning rate for the global batch (recorded).

    Raises:
        FitError: the objects are too small for any input size within ``max_image_size``.
    """
    deepest = 1 + len(opts.stackwise_filters)  # the stem reaches P2, each stack after the first one level more
    warnings: list[str] = []
    record: dict[str, Any] = {"boxes": int(len(sample.box_hw)), "images_read": int(len(sample.image_hw))}
    chosen: dict[str, Any] = {}
    if len(sample.box_hw):
        size, anchors, notes = _size_and_anchors(_framed(opts), sample, deepest)
        chosen.update(_anchor_choices(opts, size, anchors, deepest))
        record.update(_anchor_record(sample, size, anchors, notes), head=opts.head)
        coverage_warning = _coverage_warning(record, sample, size) if opts.head == "anchors" else None
        warnings += [w for w in (notes.get("size_warning"), coverage_warning) if w]
    else:
        warnings.append("no boxes in the training split: the detector can only learn that there is nothing")
        chosen.update({k: v for k, v in _fallbacks(opts).items() if getattr(opts, k) == AUTO})
    if opts.max_boxes == AUTO:
        per_image = np.bincount(sample.box_image, minlength=len(sample.image_hw)) if len(sample.box_hw) else [0]
        chosen["max_boxes"] = max(8, _round_up(int(np.max(per_image)), 8))
        record["most_boxes_per_image"] = int(np.max(per_image))
    empty = _empty_classes(sample)
    if empty:
        warnings.append(
            f"{len(empty)} of {len(sample.class_names)} classes have no boxes in the training split "
            f"({', '.join(empty)}): the detector cannot learn them; their AP will be 0"
        )
    record["classes_without_boxes"] = empty
    fitted_epochs, steps = epochs, (epochs or 0) * steps_per_epoch
    if epochs is None:
        fitted_epochs, steps, record["schedule"] = schedule(sample.examples, global_batch, steps_per_epoch)
    if opts.warmup_steps == AUTO:
        chosen["warmup_steps"] = max(MIN_WARMUP, round(WARMUP_SHARE * steps))
    record.update(steps=steps, global_batch=global_batch, learning_rate=learning_rate, chosen=dict(chosen))
    record["lines"] = describe(record, warnings)
    record["summary"] = summarize(record)
    return DetectorFit(chosen, None if epochs is not None else fitted_epochs, record, warnings)


def _framed(opts: DetectorOptions) -> DetectorOptions:
    """The dfl head's options with its frame (one square of 4 strides per location) in place of the
    anchor shapes left on ``auto``: the search then chooses only the levels (and the size) for it.
    """
    from trainer.tasks.detection.options import DFL_FRAME

    if opts.head != "dfl":
        return opts
    return dataclasses.replace(opts, **{k: v for k, v in DFL_FRAME.items() if getattr(opts, k) == AUTO})


def _fallbacks(opts: DetectorOptions) -> dict[str, Any]:
    """The previous defaults, for a split without boxes (nothing to fit); the dfl head's frame for it."""
    from trainer.tasks.detection.options import DFL_FRAME

    size = 64 if opts.image_size == AUTO else opts.image_size
    return {"image_size": size, "use_p5": False, **PREVIOUS, **(DFL_FRAME if opts.head == "dfl" else {})}


def _anchor_choices(opts: DetectorOptions, size: int, anchors: AnchorSet, deepest: int) -> dict[str, Any]:
    values = {
        "image_size": size,
        "min_level": anchors.min_level,
        "max_level": anchors.max_level,
        "anchor_size": anchors.anchor_size,
        "num_scales": anchors.num_scales,
        "aspect_ratios": anchors.aspect_ratios,
        "use_p5": anchors.max_level > deepest,
    }
    return {k: v for k, v in values.items() if getattr(opts, k) == AUTO}


def _anchor_record(sample: BoxSample, size: int, anchors: AnchorSet, notes: Mapping[str, Any]) -> dict[str, Any]:
    previous = AnchorSet(**PREVIOUS)
    px = sample.object_px(size)
    return {
        "image_size": size,
        "size_needed": notes.get("size_needed"),
        "object_px": _quantiles(px),
        "object_px_before_fit": _quantiles(sample.object_px(MIN_IMAGE_SIZE)),
        "coverage_before": round(coverage(sample, previous, size), 4),
        "coverage_previous_setup": round(coverage(sample, previous, MIN_IMAGE_SIZE), 4),
        "coverage_after": round(coverage(sample, anchors, size), 4),
        "anchors": dataclasses.asdict(anchors),
        "anchors_per_location": anchors.per_location(),
    }


def _coverage_warning(record: Mapping[str, Any], sample: BoxSample, size: int) -> Optional[str]:
    after = record["coverage_after"]
    if after >= COVERAGE_GOAL:
        return None
    small = float((sample.object_px(size) < MIN_OBJECT_PX).mean())
    hint = (
        f"{100 * small:.0f}% of the boxes are under {MIN_OBJECT_PX:g} px: a larger image_size (or max_image_size) "
        "would cover them"
        if small > 1 - after - 0.01
        else "set aspect_ratios for elongated objects, or more num_scales"
    )
    share = f"{100 * after:.1f}%"
    return f"anchors cover only {share} of the training boxes at IoU >= {MATCH_IOU} (goal {COVERAGE_GOAL:.0%}): {hint}"


def describe(record: Mapping[str, Any], warnings: Sequence[str]) -> list[str]:
    """The fit in a few lines for people (the log, the model card, the run report)."""
    lines = []
    if "image_size" in record:
        px = record["object_px"]
        lines.append(
            f"input {record['image_size']} px: objects {px.get('min')}-{px.get('max')} px (median {px.get('median')}, "
            f"smallest 5% under {px.get('p5')}) after letterboxing; {MIN_OBJECT_PX:g} px for the small ones needs "
            f"{record.get('size_needed') or 'n/a'}"
        )
        a = record["anchors"]
        before, after = 100 * record["coverage_before"], 100 * record["coverage_after"]
        if record.get("head") == "dfl":
            lines.append(
                f"locations P{a['min_level']}-P{a['max_level']} (one per cell; each reads its distances to a "
                f"box's edges from its centre): {after:.1f}% of the {record['boxes']} boxes have a level whose "
                f"{a['anchor_size']:g}-stride square meets them at IoU >= {MATCH_IOU}"
            )
        else:
            lines.append(
                f"anchors P{a['min_level']}-P{a['max_level']}, size {a['anchor_size']:g} x stride, "
                f"{a['num_scales']} scales, aspect ratios (h/w) {', '.join(f'{r:g}' for r in a['aspect_ratios'])}: "
                f"coverage at IoU >= {MATCH_IOU} {before:.1f}% with the previous defaults -> {after:.1f}% "
                f"({record['boxes']} boxes; the previous setup, {MIN_IMAGE_SIZE} px and those anchors: "
                f"{100 * record['coverage_previous_setup']:.1f}%)"
            )
    if "schedule" in record:
        lines.append(f"schedule: {record['schedule']}, learning rate {record['learning_rate']:.3g} for the batch")
    if record.get("chosen"):
        lines.append("chosen: " + ", ".join(f"{k}={_plain(v)}" for k, v in record["chosen"].items()))
    return lines + [f"warning: {w}" for w in warnings]


def summarize(record: Mapping[str, Any]) -> str:
    """The fit in one line (the Model artifact's ``fit_summary``, the run's console): input size, coverage, steps."""
    parts = []
    if "image_size" in record:
        parts.append(f"input {record['image_size']} px")
        before = record.get("coverage_previous_setup", record["coverage_before"])
        a = record["anchors"]
        if record.get("head") == "dfl":
            parts.append(f"the dfl head at P{a['min_level']}-P{a['max_level']}")
        else:
            parts.append(f"anchors cover {100 * record['coverage_after']:.1f}% (previous setup {100 * before:.1f}%)")
    parts.append(f"{record['steps']} steps")
    return "fitted: " + ", ".join(parts)


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def read_box_sample(info: DatasetInfo, split: str, limit: int = 20_000) -> BoxSample:
    """The split's box features (up to ``limit`` records spread over its shards; no image is decoded).

    Raises:
        DatasetError: the split is missing or empty.
    """
    from trainer import data
    from trainer.tasks.detection import input as task_input

    examples = info.split_count(split)
    keys = tuple(k for k in task_input.FEATURE_KEYS if k != "image/encoded")
    images, boxes, centers, owners, labels, crowd = [], [], [], [], [], 0
    for batch in data.sample_features(info, [split], keys, limit):
        hw = np.stack([batch["image/height"].numpy(), batch["image/width"].numpy()], axis=1).reshape(-1, 2)
        ymin, xmin, ymax, xmax = (batch[f"image/object/bbox/{k}"] for k in ("ymin", "xmin", "ymax", "xmax"))
        rows = ymin.value_rowids().numpy() + len(images)
        flags = batch["image/object/is_crowd"].flat_values.numpy() != 0
        y0, x0, y1, x1 = (t.flat_values.numpy().astype(np.float64) for t in (ymin, xmin, ymax, xmax))
        keep = ~flags
        crowd += int(flags.sum())
        images.extend(hw.tolist())
        owners.append(rows[keep])
        labels.append(batch["image/object/class/label"].flat_values.numpy()[keep])
        boxes.append(np.stack([y1 - y0, x1 - x0], axis=1)[keep])
        centers.append(np.stack([(y0 + y1) / 2, (x0 + x1) / 2], axis=1)[keep])
    image_hw = np.asarray(images, np.float64).reshape(-1, 2)
    owner = np.concatenate(owners).astype(int) if owners else np.zeros(0, int)
    return BoxSample(
        image_hw=image_hw,
        box_hw=(np.concatenate(boxes) if boxes else np.zeros((0, 2))) * image_hw[owner],
        box_center=np.concatenate(centers) if centers else np.zeros((0, 2)),
        box_image=owner,
        labels=np.concatenate(labels).astype(int) if labels else np.zeros(0, int),
        crowd=crowd,
        examples=examples,
        class_names=tuple(info.classes),
    )
