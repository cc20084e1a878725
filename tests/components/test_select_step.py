"""The select step end to end through its library, its component's body and its command line, on a
small real classifier (tests/eval_bench_fixtures.py) and a pool of its kind of images.

The pool holds new images, four images the labelled dataset has (the same bytes), and a near-copy
of one of them (one pixel brighter): the dataset's are never picked, the near-copy is passed over,
the picks come in score order, and the files a labelling tool opens (Label Studio tasks with their
predictions and scores, the CVAT COCO 1.0 archive, YOLO labels) load back with the picks.
"""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from components.select.__main__ import main
from components.select.component import select_images
from components.select.config import SelectConfig
from components.select.result import read_selection
from components.select.selection import describe, select
from tests.eval_bench_fixtures import make_image, tiny_assets
from trainer import tfrecords
from trainer.tfrecord_read import iter_split_features

pytestmark = pytest.mark.slow

NEW = 24


def _png(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(array, mode="L").save(out, format="PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """``(pool folder, sha256 of the images the dataset has, the near-copy's name and its original's)``."""
    folder = tmp_path_factory.mktemp("pool")
    rng = np.random.default_rng(11)
    for i in range(NEW):
        (folder / f"new-{i:02d}.png").write_bytes(_png(make_image(i % 10, rng)))
    info = tfrecords.load_dataset_info(tiny_assets()["dataset"])
    known = []
    for n, features in enumerate(iter_split_features(info, "train", skip=())):
        if n == 4:
            break
        data = features["image/encoded"][0]
        (folder / f"labelled-{n}.png").write_bytes(data)
        known.append(hashlib.sha256(data).hexdigest())
    original = np.array(Image.open(folder / "new-03.png"))
    original[0, 0] = min(255, int(original[0, 0]) + 1)
    (folder / "new-03-copy.png").write_bytes(_png(original))
    return folder, set(known), ("new-03.png", "new-03-copy.png")


def test_the_pick_leaves_out_the_dataset_and_near_copies_and_loads_back_in_the_tools(pool, tmp_path):
    folder, known, copies = pool
    out = tmp_path / "pick"
    config = SelectConfig(
        data=str(folder), output_uri=str(out), model_dir=tiny_assets()["model"], dataset=tiny_assets()["dataset"],
        count=40, strategy="margin",
    )  # fmt: skip
    result = select(config)
    assert (result.pool, result.scored, result.labelled, result.near_copies) == (NEW + 5, NEW + 5, 4, 1)
    assert len(result.picks) == NEW and not {p.sha256 for p in result.picks} & known
    assert sum(p.path in copies for p in result.picks) == 1
    scores = [p.score for p in result.picks]
    assert scores == sorted(scores, reverse=True) and all(0.0 <= s <= 1.0 for s in scores)
    assert all(p.reason.startswith("margin: top class ") and p.label and p.phash for p in result.picks)
    assert read_selection(str(out)) == result
    assert "picked 24 (of 40 asked: the pool has no more) by margin" in describe(result)[1]

    tasks = json.loads((out / "label_studio.json").read_text())
    assert len(tasks) == NEW and [t["predictions"][0]["score"] for t in tasks] == pytest.approx(scores)
    first = tasks[0]
    assert first["predictions"][0]["model_version"] == result.model.label
    assert first["predictions"][0]["result"][0]["value"]["choices"] == [result.picks[0].label]
    assert first["data"]["image"] == f"/data/local-files/?d={result.picks[0].image}"
    assert "<Choices" in (out / "label_studio.xml").read_text()
    with zipfile.ZipFile(out / "cvat_coco.zip") as archive:
        coco = json.loads(archive.read("annotations/instances_default.json"))
    assert [im["file_name"] for im in coco["images"]] == [p.image.split("/")[-1] for p in result.picks]
    assert [c["name"] for c in coco["categories"]] == list(result.class_names)
    assert len(list((out / "yolo").glob("*.txt"))) == NEW
    for p in result.picks:
        assert hashlib.sha256((out / p.image).read_bytes()).hexdigest() == p.sha256
    page = (out / "report.html").read_text()
    assert page.count("<figure>") == NEW and "data:image/png;base64," in page


def test_the_component_and_the_random_baseline(pool, tmp_path):
    folder, _, _ = pool
    out = tmp_path / "random"
    report, page = SimpleNamespace(path=str(tmp_path / "report.md")), SimpleNamespace(path=str(tmp_path / "page.html"))
    summary = select_images.python_func(
        data=str(folder), output_uri=str(out), report=report, page=page, model_dir=tiny_assets()["model"],
        count=5, strategy="random", seed=1, diversity="kcenter", stage="", model_name="", stages_root="", dataset="",
    )  # fmt: skip
    assert summary["picked"] == 5 and summary["strategy"] == "random" and summary["labelled"] == 0
    result = read_selection(str(out))
    assert result.scored_by == "least_confidence" and result.diversity == "kcenter"
    assert all(p.reason.startswith("random pick (seed 1); least confidence: ") for p in result.picks)
    assert "# Images to label" in open(report.path).read() and "<figure>" in open(page.path).read()


def test_the_command_line_says_what_is_wrong_in_one_line(pool, tmp_path, capsys):
    folder, _, _ = pool
    common = ["--output-uri", str(tmp_path / "o")]
    assert main(["--data", str(folder), "--model-dir", str(tmp_path / "none"), *common]) == 2
    assert "is not an exported model" in capsys.readouterr().err
    assert main(["--data", tiny_assets()["dataset"], "--model-dir", tiny_assets()["model"], *common]) == 2
    assert "is a converted dataset, labelled already" in capsys.readouterr().err
    assert main(["--data", str(folder), "--model-dir", tiny_assets()["model"], "--strategy", "flip", *common]) == 2
    assert "strategy 'flip': task 'classification' offers" in capsys.readouterr().err


def test_a_detector_s_pick_scores_the_mirror_images_and_exports_its_boxes(tmp_path):
    """The shared tiny detector over new shapes and twenty images its dataset holds (left out)."""
    import shutil

    from components.image_input import shapes
    from tests.detection_fixtures import tiny_detection

    assets = tiny_detection()
    folder = tmp_path / "pool"
    shutil.copytree(shapes.generate(tmp_path / "new", count=10, seed=99).parent / "images", folder / "new")
    (folder / "old").mkdir()
    for image in sorted((Path(assets["coco"]).parent / "images").iterdir())[:20]:
        shutil.copy(image, folder / "old" / image.name)
    out = tmp_path / "pick"
    config = SelectConfig(
        data=str(folder), output_uri=str(out), model_dir=assets["model"], dataset=assets["dataset"], count=5,
        selection_options={"threshold": 0.3}, diversity="none",
    )  # fmt: skip
    result = select(config)
    assert (result.scored, result.labelled, len(result.picks)) == (30, 20, 5)
    assert result.strategy == "uncertainty" and all(p.path.startswith("new/") for p in result.picks)
    assert all("near the threshold 0.30" in p.reason and "; flip: " in p.reason for p in result.picks)
    boxes = [b for p in result.picks for b in p.boxes]
    assert all(b["score"] >= 0.3 for b in boxes)
    tasks = json.loads((out / "label_studio.json").read_text())
    values = [r["value"] for t in tasks for r in t["predictions"][0]["result"]]
    assert len(values) == len(boxes) and all(0 <= v["x"] <= 100 and v["rectanglelabels"] for v in values)
    with zipfile.ZipFile(out / "cvat_coco.zip") as archive:
        coco = json.loads(archive.read("annotations/instances_default.json"))
    assert len(coco["annotations"]) == len(boxes) and len(coco["images"]) == 5
    lines = [line for f in (out / "yolo").glob("*.txt") for line in f.read_text().splitlines()]
    assert len(lines) == len(boxes) and all(len(line.split()) == 6 for line in lines)
