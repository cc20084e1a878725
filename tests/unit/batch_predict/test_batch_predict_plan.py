"""Batch prediction's planning and join, without TensorFlow: inputs, shards, the manifest, bad input.

The model folders here are stand-ins (a ``saved_model.pb`` of a few bytes and a ``training.json``
naming the task): planning pins a model by its content hash and never loads it.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from components.batch_predict import inputs
from components.batch_predict.config import PredictConfig
from components.batch_predict.join import join
from components.batch_predict.plan import plan, read_manifest
from components.batch_predict.run import PredictError, shard_name
from components.batch_predict.score import ShardResult
from trainer import storage
from trainer.configbase import ConfigError
from trainer.tasks import TaskError


def _model(folder, task="classification", content=b"model"):
    (folder / "saved_model").mkdir(parents=True)
    (folder / "saved_model" / "saved_model.pb").write_bytes(content)
    (folder / "training.json").write_text(json.dumps({"task": task}))
    return folder


def _images(folder, count, ext=".png"):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        sub = folder / ("a" if i % 2 else "b")
        sub.mkdir(exist_ok=True)
        (sub / f"{i:03d}{ext}").write_bytes(b"not decoded while planning %d" % i)
    (folder / "README.txt").write_text("not an image")
    return folder


def _config(tmp_path, data, **fields):
    if not (tmp_path / "model").exists():
        _model(tmp_path / "model")
    fields.setdefault("model_dir", str(tmp_path / "model"))
    return PredictConfig(data=str(data), output_uri=str(tmp_path / "out"), **fields)


def test_a_folder_lists_its_images_in_a_stable_order_and_a_change_changes_the_fingerprint(tmp_path):
    folder = _images(tmp_path / "photos", 5)
    first = inputs.list_input(str(folder))
    assert first.kind == "folder" and not first.labelled
    assert [it.path for it in first.items] == ["a/001.png", "a/003.png", "b/000.png", "b/002.png", "b/004.png"]
    assert [it.image_id for it in first.items] == [1, 2, 3, 4, 5]
    assert inputs.list_input(str(folder)).fingerprint == first.fingerprint
    (folder / "b" / "002.png").write_bytes(b"replaced with other bytes")
    assert inputs.list_input(str(folder)).fingerprint != first.fingerprint


def test_lists_give_paths_relative_to_the_list_and_labels(tmp_path):
    folder = _images(tmp_path / "photos", 3)
    (folder / "list.csv").write_text("path,label\nb/000.png,cat\na/001.png,dog\nmissing.png,cat\n")
    listing = inputs.list_input(str(folder / "list.csv"))
    assert listing.kind == "list" and listing.labelled
    assert listing.items[0].uri == str(folder / "b" / "000.png")
    assert [it.label for it in listing.items] == ["cat", "dog", "cat"]
    (folder / "list.jsonl").write_text('{"image": "b/000.png"}\n\n{"image": "a/001.png"}\n')
    jsonl = inputs.list_input(str(folder / "list.jsonl"))
    assert [it.path for it in jsonl.items] == ["b/000.png", "a/001.png"] and not jsonl.labelled
    (folder / "bad.csv").write_text("file,label\nb/000.png,cat\n")
    with pytest.raises(inputs.InputError, match="no path column; expected one of"):
        inputs.list_input(str(folder / "bad.csv"))


def test_a_coco_file_keeps_its_ids_and_gives_its_boxes_as_labels(tmp_path):
    folder = _images(tmp_path / "coco", 2)
    coco = {
        "images": [{"id": 7, "file_name": "b/000.png"}, {"id": 9, "file_name": "a/001.png"}],
        "annotations": [{"id": 1, "image_id": 7, "category_id": 3, "bbox": [1, 2, 10, 20]}],
        "categories": [{"id": 3, "name": "circle"}],
    }
    (folder / "instances.json").write_text(json.dumps(coco))
    listing = inputs.list_input(str(folder / "instances.json"))
    assert listing.kind == "coco" and listing.labelled
    assert [it.image_id for it in listing.items] == [7, 9]
    assert listing.items[0].label == [{"box": [1.0, 2.0, 11.0, 22.0], "class": "circle"}]
    assert listing.items[1].label == []


def test_shards_are_even_and_none_is_above_the_size():
    assert inputs.shard_ranges(10, 4) == [(0, 3), (3, 7), (7, 10)]
    assert inputs.shard_ranges(3, 5000) == [(0, 3)]
    ranges = inputs.shard_ranges(20000, 5000)
    assert len(ranges) == 4 and all(b - a == 5000 for a, b in ranges)


def test_the_plan_is_written_once_and_a_re_plan_of_the_same_work_reuses_it(tmp_path):
    folder = _images(tmp_path / "photos", 7)
    config = _config(tmp_path, folder, images_per_shard=3, images_per_sec=100.0)
    first = plan(config)
    assert [(s.start, s.stop) for s in first.shards] == [(0, 2), (2, 5), (5, 7)]
    assert first.model.task == "classification" and first.model.label.startswith("sha256:")
    assert first.price_key.startswith("cpu-") and first.estimate_s == pytest.approx(0.07)
    assert first.estimate_cost == pytest.approx(0.07 * first.price_per_hour / 3600)
    assert read_manifest(config.output_uri) == first
    items = inputs.items_from_text((tmp_path / "out" / "items.jsonl").read_text())
    assert [it.path for it in items] == [it.path for it in inputs.list_input(str(folder)).items]
    assert plan(config).plan_id == first.plan_id and plan(config).planned_at == first.planned_at


def test_another_input_or_model_is_refused_where_predictions_are(tmp_path):
    folder = _images(tmp_path / "photos", 4)
    config = _config(tmp_path, folder)
    plan(config)
    (folder / "b" / "new.png").write_bytes(b"one more image")
    with pytest.raises(PredictError, match=r"holds predictions of another input .*give a new output_uri"):
        plan(config)
    (folder / "b" / "new.png").unlink()
    other = _model(tmp_path / "other-model", content=b"another model")
    with pytest.raises(PredictError, match="another model"):
        plan(PredictConfig(data=str(folder), output_uri=config.output_uri, model_dir=str(other)))


def test_bad_input_fails_in_planning_with_one_clear_line(tmp_path):
    folder = _images(tmp_path / "photos", 2)
    (tmp_path / "empty").mkdir()
    (tmp_path / "not-a-model").mkdir()
    with pytest.raises(PredictError, match="not an exported model: no saved_model/saved_model.pb"):
        plan(PredictConfig(data=str(folder), output_uri=str(tmp_path / "o"), model_dir=str(tmp_path / "not-a-model")))
    with pytest.raises(inputs.InputError, match="no such folder, or it is empty"):
        plan(_config(tmp_path, tmp_path / "empty"))
    with pytest.raises(TaskError, match="prediction_options.coco: task 'classification' takes no prediction options"):
        plan(_config(tmp_path, folder, prediction_options={"coco": True}))
    with pytest.raises(ConfigError, match="predict.coco: renamed; set predict.prediction_options.coco instead"):
        PredictConfig.from_dict({"data": "x", "output_uri": "y", "model_dir": "m", "coco": "on"}, _prefix="predict.")
    (tmp_path / "a-file").write_text("")
    _model(tmp_path / "m")
    with pytest.raises(PredictError, match="cannot write under .*a-file/o"):
        plan(PredictConfig(data=str(folder), output_uri=str(tmp_path / "a-file" / "o"), model_dir=str(tmp_path / "m")))
    with pytest.raises(ConfigError, match="either a stage .* or model_dir .* not both"):
        PredictConfig(data="x", output_uri="y", stage="staging", model_dir="m")
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_stage_that_serves_no_such_model_names_what_it_serves(tmp_path):
    from components.serving.stages import StageEntry, StageRegistry

    folder = _images(tmp_path / "photos", 2)
    registry = StageRegistry(str(tmp_path / "stages"))
    model = _model(tmp_path / "m")
    version = registry.publish(str(model / "saved_model"), "staging", "classifier")
    registry.record("staging", StageEntry(action="promote", version=version, model_uri=str(model), run="r",
                                          model_name="classifier", task="classification"))  # fmt: skip
    config = PredictConfig(
        data=str(folder), output_uri=str(tmp_path / "out"), stage="staging", stages_root=registry.root
    )
    pinned = plan(config)
    assert (pinned.model.stage, pinned.model.model_name, pinned.model.version) == ("staging", "classifier", version)
    assert pinned.model.label == f"staging/classifier v{version}"
    assert pinned.model.saved_model == registry.version_path("staging", "classifier", version)
    with pytest.raises(PredictError, match=r"prod serves no model named 'detector' .* it serves nothing"):
        plan(PredictConfig(data=str(folder), output_uri=str(tmp_path / "o2"), stage="prod", model_name="detector",
                           stages_root=registry.root))  # fmt: skip


def _result(p, index, status="ok", **fields):
    spec = p.shards[index]
    base = dict(plan_id=p.plan_id, index=index, status=status, images=spec.images)
    if status == "ok":
        base.update(scored=spec.images - 1, failed_images=1, seconds=2.0, billed_s=10.0, cost=0.01,
                    failures=({"path": "x.png", "reason": "cannot decode: not an image"},),
                    class_counts={"cat": spec.images - 1})  # fmt: skip
    base.update(fields)
    storage.write_json(storage.join(p.output_uri, f"{shard_name(index)}.json"), ShardResult(**base).to_dict())


def test_the_join_counts_what_finished_and_names_the_shards_that_did_not(tmp_path):
    folder = _images(tmp_path / "photos", 9)
    p = plan(_config(tmp_path, folder, images_per_shard=3))
    _result(p, 0)
    _result(p, 1, status="failed", reason="OSError: the model did not load")
    joined = join(p.output_uri)
    s = joined.summary
    assert not s.complete and (s.shards, s.shards_ok) == (3, 1)
    assert [f["shard"] for f in s.failed_shards] == ["shard-00001", "shard-00002"]
    assert "did not load" in s.failed_shards[0]["reason"] and "did not finish" in s.failed_shards[1]["reason"]
    assert (s.scored, s.failed_images, s.class_counts) == (2, 1, {"cat": 2})
    assert s.images_per_dollar == pytest.approx(2 / 0.01)
    assert joined.failures == [{"shard": "shard-00000", "path": "x.png", "reason": "cannot decode: not an image"}]
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["scored"] == 2
    # A summary left by another plan is not this plan's result.
    _result(p, 2, plan_id="another-plan")
    assert join(p.output_uri).summary.shards_ok == 1


def test_the_reports_name_lost_shards_and_failed_images(tmp_path):
    from components.batch_predict.page import write_reports

    folder = _images(tmp_path / "photos", 6)
    p = plan(_config(tmp_path, folder, images_per_shard=3))
    _result(p, 0)
    md, html = write_reports(p.output_uri, join(p.output_uri))
    assert "**Incomplete**" in md and "shard-00001" in md and "cannot decode: not an image" in md
    assert html.startswith("<!DOCTYPE html>") and "shard-00001" in html and "<svg" in html
    assert (tmp_path / "out" / "report.html").read_text() == html


def test_the_cli_says_bad_input_in_one_line_with_status_2(tmp_path, capsys):
    from components.batch_predict.__main__ import main

    status = main(["plan", "--data", str(tmp_path / "nothing"), "--output-uri", str(tmp_path / "o"),
                   "--model-dir", str(tmp_path / "nothing")])  # fmt: skip
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("error: ") and "not an exported model" in err and err.count("\n") == 1
    assert main(["shard", "--output-uri", str(tmp_path / "o"), "--index", "0"]) == 2
    assert "plan the batch prediction first" in capsys.readouterr().err


def test_planning_imports_no_tensorflow():
    import subprocess

    code = (
        "import components.batch_predict.plan, components.batch_predict.join, components.batch_predict.page, sys; "
        "print('tensorflow' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    assert out.stdout.strip() == "False"
