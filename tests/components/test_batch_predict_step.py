"""The batch prediction step end to end through its library and command line, on real exports.

A folder with a CSV of labels and the converted dataset of the same images give the same
predictions and the same accuracy; a killed shard is the only one redone and every image is
scored exactly once; a detector on a COCO file lists the images it cannot read, writes COCO
results pycocotools reads against the same file, and scores AP. The whole pipeline under kfp.local
runs once, in tests/pipelines/test_end_to_end_local.py, on the model the main pipeline promoted.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from components.batch_predict.__main__ import main
from components.batch_predict.config import PredictConfig
from components.batch_predict.join import join
from components.batch_predict.plan import plan
from components.batch_predict.run import shard_name
from components.batch_predict.score import score_shard
from tests.detection_fixtures import tiny_detection
from tests.eval_bench_fixtures import tiny_assets
from trainer import tfrecords

pytestmark = pytest.mark.slow


def _lines(out: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(out.glob("shard-*.jsonl")) for line in f.read_text().splitlines()]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """The tiny classification dataset's test images as PNG files, with a CSV of their labels."""
    from trainer.evaluate import read_encoded_split

    assets = tiny_assets()
    encoded, labels, _ = read_encoded_split(assets["dataset"], "test", None)
    classes = tfrecords.load_dataset_info(assets["dataset"]).classes
    folder = tmp_path_factory.mktemp("photos")
    rows = ["path,label"]
    for i, (data, label) in enumerate(zip(encoded, labels, strict=True)):
        (folder / f"{i:03d}.png").write_bytes(data)
        rows.append(f"{i:03d}.png,{classes[int(label)]}")
    (folder / "labels.csv").write_text("\n".join(rows) + "\n")
    return folder


def test_a_list_with_labels_and_the_dataset_give_the_same_predictions_and_accuracy(photos, tmp_path, capsys):
    assets = tiny_assets()
    by_list, by_dataset = tmp_path / "list", tmp_path / "dataset"
    common = ["--model-dir", assets["model"], "--images-per-shard", "25"]
    assert main(["run", "--data", str(photos / "labels.csv"), "--output-uri", str(by_list), *common]) == 0
    assert main(["run", "--data", assets["dataset"], "--output-uri", str(by_dataset), *common]) == 0
    out = capsys.readouterr().out
    assert "shards: 3 of 20 images" in out and "accuracy:" in out
    from_list, from_dataset = _lines(by_list), _lines(by_dataset)
    assert len(from_list) == len(from_dataset) == 60
    assert [r["classes"] for r in from_list] == [r["classes"] for r in from_dataset]
    assert [r["label"] for r in from_list] == [r["label"] for r in from_dataset]
    assert all(len(r["classes"]) == 5 and r["model_version"].startswith("sha256:") for r in from_list)
    summary = json.loads((by_list / "summary.json").read_text())
    right = sum(r["classes"][0]["class"] == r["label"] for r in from_list)
    assert summary["metrics"]["accuracy"] == pytest.approx(right / 60)
    assert summary["metrics"] == json.loads((by_dataset / "summary.json").read_text())["metrics"]
    assert summary["complete"] and summary["scored"] == 60 and sum(summary["class_counts"].values()) == 60
    assert not (by_list / "coco_results.json").exists()


def test_a_killed_shard_is_the_only_one_redone_and_every_image_is_scored_once(photos, tmp_path):
    out = tmp_path / "out"
    config = PredictConfig(data=str(photos), output_uri=str(out), model_dir=tiny_assets()["model"], images_per_shard=20)
    p = plan(config)
    for spec in p.shards:
        assert score_shard(str(out), spec.index).status == "ok"
    # Shard 1 killed mid-way on a re-run: its files gone, a temporary file left half-written.
    for suffix in (".json", ".jsonl"):
        (out / f"{shard_name(1)}{suffix}").unlink()
    (out / f".{shard_name(1)}.jsonl.tmp-deadbeef").write_text('{"path": "half a line')
    times = {i: os.stat(out / f"{shard_name(i)}.json").st_mtime_ns for i in (0, 2)}
    assert not join(str(out)).summary.complete
    assert main(["run", "--data", str(photos), "--output-uri", str(out), "--model-dir", tiny_assets()["model"],
                 "--images-per-shard", "20"]) == 0  # fmt: skip
    assert {i: os.stat(out / f"{shard_name(i)}.json").st_mtime_ns for i in (0, 2)} == times
    paths = [r["path"] for r in _lines(out)]
    assert sorted(paths) == sorted(f"{i:03d}.png" for i in range(60))  # each once: nothing lost or doubled
    redone = os.stat(out / f"{shard_name(1)}.json").st_mtime_ns
    assert main(["join", "--output-uri", str(out)]) == 0
    assert score_shard(str(out), 1).status == "ok" and os.stat(out / f"{shard_name(1)}.json").st_mtime_ns == redone


def test_a_detector_on_a_coco_file_lists_bad_images_and_writes_results_pycocotools_reads(tmp_path):
    from pycocotools.coco import COCO

    assets = tiny_detection()
    coco_file = Path(assets["coco"])
    data = json.loads(coco_file.read_text())
    keep = {img["id"] for img in data["images"][:24]}
    data["images"] = [img for img in data["images"] if img["id"] in keep]
    data["annotations"] = [a for a in data["annotations"] if a["image_id"] in keep]
    data["images"][0]["file_name"] = str(tmp_path / "broken.jpg")
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8 not really a jpeg")
    data["images"][1]["file_name"] = str(tmp_path / "missing.jpg")
    subset = coco_file.parent / f"subset-{os.getpid()}.json"
    subset.write_text(json.dumps(data))
    out = tmp_path / "out"
    status = main(["run", "--data", str(subset), "--output-uri", str(out), "--model-dir", assets["model"],
                   "--score-threshold", "0.1"])  # fmt: skip
    subset.unlink()
    assert status == 0
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["scored"], summary["failed_images"]) == (22, 2)
    failures = json.loads((out / "shard-00000.json").read_text())["failures"]
    assert [f["reason"].split(":")[0] for f in failures] == ["cannot decode", "cannot read"]
    assert 0.0 <= summary["metrics"]["ap50"] <= 1.0 and 0 < summary["metrics"]["num_examples"] <= 22
    rows = _lines(out)
    assert {r["image_id"] for r in rows} == keep - {data["images"][0]["id"], data["images"][1]["id"]}
    box = rows[0]["detections"][0]["box"]
    assert 0 <= box[0] < box[2] <= rows[0]["width"] and 0 <= box[1] < box[3] <= rows[0]["height"]
    truth = COCO()
    truth.dataset = data
    truth.createIndex()
    results = truth.loadRes(str(out / "coco_results.json"))
    assert len(results.getAnnIds()) == sum(len(r["detections"]) for r in rows) > 0
    assert {a["category_id"] for a in results.dataset["annotations"]} <= {c["id"] for c in data["categories"]}
    page = (out / "report.html").read_text()
    assert "cannot read" in page and "<svg" in page
