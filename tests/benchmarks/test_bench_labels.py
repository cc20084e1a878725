"""The labelling tools' layouts against COCO, on the same boxes (make bench).

One original set (``IMAGES`` images of eight sizes from 24x16 to 1280x720, about ``BOXES`` boxes
each, written once per run in a temporary folder) is written as a COCO file, an Ultralytics YOLO
set, a Pascal VOC folder and a Label Studio export (``tests/label_sets.py``). Each is converted in
this process with one worker (no TensorFlow), in rounds that alternate the formats, the first one
rotating, each round into a fresh output folder; printed per format: the median time to scan the
source (``open_source``: what the kind itself costs), to convert it whole (scan, shards,
``dataset.json``), images per second, and the ratio to COCO's. COCO's reader parses one JSON file;
YOLO reads one small text file per image, VOC one XML file per image, Label Studio one JSON file:
the ratio says what a layout's reading costs on top of what every conversion does. The round trip's
worst error (YOLO -> ours -> YOLO and the others, docs/labels.md) is printed too.

Nothing is asserted beyond sanity (every conversion keeps every box); the figures depend on the
host (the CPU line is printed first).
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path

import pytest

from components.convert import convert
from components.convert.config import ConvertConfig
from components.image_input import sources
from tests import label_sets
from tests.benchmarks.cpu import versus

pytestmark = pytest.mark.benchmark

IMAGES = 3000
BOXES = 6  # boxes per image on average (0 to 12)
ROUNDS = 5
WRITERS = {
    "coco": lambda root, orig: label_sets.coco(root / "coco", orig),
    "yolo": lambda root, orig: label_sets.yolo(root / "yolo", orig),
    "voc": lambda root, orig: label_sets.voc(root / "voc", orig),
    "label-studio": lambda root, orig: label_sets.label_studio(root / "ls", orig),
}


def _convert(path: Path, out: Path) -> tuple[float, float, dict]:
    """(seconds to scan, seconds to convert, dataset.json) from a fresh output folder."""
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    sources.open_source(str(path))
    scanned = time.perf_counter() - start
    start = time.perf_counter()
    config = ConvertConfig(source=str(path), splits={"train": 1.0}, workers=1)
    manifest = convert(config, str(out), log=lambda _: None)
    return scanned, time.perf_counter() - start, manifest


def test_bench_label_layouts_against_coco(tmp_path):
    orig = label_sets.original(images=IMAGES, boxes=BOXES, seed=5)
    boxes = sum(len(b) for b in orig.boxes.values())
    paths = {name: write(tmp_path, orig) for name, write in WRITERS.items()}
    order = list(paths)
    scans: dict[str, list[float]] = {n: [] for n in order}
    converts: dict[str, list[float]] = {n: [] for n in order}
    for r in range(ROUNDS):
        for name in order[r % len(order) :] + order[: r % len(order)]:
            scanned, seconds, manifest = _convert(paths[name], tmp_path / f"out-{name}")
            assert manifest["boxes"]["kept"] == boxes and manifest["rejected"] == 0
            scans[name].append(scanned)
            converts[name].append(seconds)
    print(f"\n{IMAGES} images, {boxes} boxes; medians of {ROUNDS} rounds, one worker")
    coco_scan, coco_convert = statistics.median(scans["coco"]), statistics.median(converts["coco"])
    for name in order:
        scan, whole = statistics.median(scans[name]), statistics.median(converts[name])
        print(
            f"{name:>12}: scan {scan:.3f} s ({IMAGES / scan:,.0f} img/s, {scan / coco_scan:.2f}x COCO's time), "
            f"convert {whole:.3f} s ({IMAGES / whole:,.0f} img/s; spread {min(converts[name]):.3f}-"
            f"{max(converts[name]):.3f} s)"
        )
        if name != "coco":
            print("  " + versus(f"{name} conversion speed / COCO's", coco_convert / whole, ">= 0.5x, informative"))


def _worst(scanned, orig: label_sets.Original) -> float:
    """The largest move of a box side, in pixels, between the original and what an importer scanned."""
    sizes = {name: (w, h) for name, w, h, _ in orig.images}
    worst = 0.0
    for item in scanned.items:
        name = item.key.rsplit("/", 1)[-1]
        w, h = sizes[name] if item.boxes.normalized else (1, 1)
        for box, (_, x, y, bw, bh) in zip(item.boxes.boxes, orig.boxes[name], strict=True):
            bx, by, bbw, bbh = box.bbox
            got = (bx * w, by * h, (bx + bbw) * w, (by + bbh) * h)
            worst = max(worst, *(abs(a - b) for a, b in zip(got, (x, y, x + bw, y + bh), strict=True)))
    return worst


def test_bench_round_trip_error(tmp_path):
    from components.image_input import exports
    from components.image_input.sources.label_studio import scan_label_studio
    from components.image_input.sources.voc import scan_voc
    from components.image_input.sources.yolo import scan_yolo
    from trainer.tfrecords import load_dataset_info

    def items(path: Path, out: Path) -> list:
        _convert(path, out)
        return [i for s in load_dataset_info(str(out)).splits for i in exports.review_items_of_dataset(str(out), s)]

    floats, ints = (label_sets.original(images=120, boxes=10, seed=11, integer=i) for i in (False, True))
    found = items(label_sets.yolo(tmp_path / "y", floats), tmp_path / "oy")
    for split in ("train", "val"):
        picked = [i for i in found if f"/{split}/" in i.image]
        exports.write_yolo_labels(picked, tmp_path / "y2" / "labels" / split, classes=floats.classes)
    label_sets.link(tmp_path / "y" / "images", tmp_path / "y2" / "images")
    (tmp_path / "y2" / "data.yaml").write_text(f"train: images/train\nval: images/val\nnames: {list(floats.classes)}\n")
    exports.write_voc(
        items(label_sets.voc(tmp_path / "v", ints), tmp_path / "ov"), tmp_path / "v2", classes=ints.classes
    )
    label_sets.link(tmp_path / "v" / "JPEGImages", tmp_path / "v2" / "JPEGImages")
    found = items(label_sets.label_studio(tmp_path / "l", floats), tmp_path / "ol")
    back = exports.write_label_studio(
        found,
        tmp_path / "l" / "back.json",
        model_version="",
        classes=floats.classes,
        task="detection",
        annotations=True,
    )
    n = sum(len(b) for b in floats.boxes.values())
    print(f"\nround trip of {n} boxes on 120 images (24x16 to 1280x720): worst move of a box side")
    for name, scanned, orig in (
        ("YOLO -> ours -> YOLO", scan_yolo(str(tmp_path / "y2")), floats),
        ("VOC -> ours -> VOC", scan_voc(str(tmp_path / "v2")), ints),
        ("Label Studio -> ours -> Label Studio", scan_label_studio(str(back)), floats),
    ):
        worst = _worst(scanned, orig)
        print(f"{name}: {worst:.5f} px (target <= 0.5 px)")
        assert worst <= 0.5
