"""The record base (trainer.records): strict and forward-compatible reading, coercion by type, and
the files earlier versions wrote (stage histories, training.json, dataset.json, sweep rows) still
loading. No TensorFlow."""

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, Optional

import pytest

from trainer import records
from trainer.records import FORWARD_COMPATIBLE, Record, RecordError


class PartError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Point(Record):
    _what = "point"

    x: int
    y: float = 0.0


@dataclasses.dataclass(frozen=True)
class Shape(Record):
    name: str
    corners: tuple[Point, ...]
    anchors: dict[str, Point] = dataclasses.field(default_factory=dict)
    weights: dict[str, float] = dataclasses.field(default_factory=dict)
    size: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class Note(Record):
    _mode = FORWARD_COMPATIBLE

    text: str
    points: tuple[Point, ...] = ()
    extra: Mapping[str, Any] = records.extra_field()


@dataclasses.dataclass(frozen=True)
class Span(Record):
    _error = PartError
    _what = "span"

    start: int
    end: int

    def __post_init__(self):
        if self.end < self.start:
            raise PartError(f"end {self.end} is before start {self.start}")


def _unhex(text):
    try:
        return bytes.fromhex(text)
    except (TypeError, ValueError):
        raise RecordError(f"expected hex digits, got {text!r}") from None


@dataclasses.dataclass(frozen=True)
class Timed(Record):
    _error = PartError
    _omit_empty = ("note", "tags")

    label: str = records.field(key="name")
    span: Span = records.field(flat="")
    other: Optional[Span] = records.field(flat="other_", default=None)
    note: Optional[str] = None
    tags: tuple[str, ...] = ()
    raw: bytes = records.field(default=b"", dump=bytes.hex, load=_unhex)
    where: Optional[str] = records.field(data=False, default=None)


def test_a_strict_record_refuses_an_unknown_key_naming_it_and_the_known_ones():
    with pytest.raises(RecordError, match=r"^z: unknown key in point; known keys: x, y$"):
        Point.from_dict({"x": 1, "z": 2})
    # Nested: the path to the key.
    with pytest.raises(RecordError, match=r"^corners\[1\]\.z: unknown key in point; known keys: x, y$"):
        Shape.from_dict({"name": "s", "corners": [{"x": 1}, {"x": 2, "z": 0}]})


def test_a_forward_compatible_record_keeps_unknown_keys_and_writes_them_back():
    data = {"text": "hi", "points": [{"x": 1}], "added_later": {"a": [1, 2]}}
    note = Note.from_dict(data)
    assert note.extra == {"added_later": {"a": [1, 2]}} and note.points == (Point(1),)
    assert note.to_dict() == {"text": "hi", "points": [{"x": 1, "y": 0.0}], "added_later": {"a": [1, 2]}}
    assert Note.from_dict(json.loads(json.dumps(note.to_dict()))) == note
    assert "extra" not in Note("plain").to_dict()  # extra is no key of the data
    # Its parts keep their own mode: a point stays strict inside a forward-compatible note.
    with pytest.raises(RecordError, match=r"points\[0\]\.w: unknown key in point"):
        Note.from_dict({"text": "hi", "points": [{"x": 1, "w": 2}]})


def test_types_drive_the_coercion():
    # What kfp.local and dsl.Collected hand over: ints as whole floats, tuples as lists.
    shape = Shape.from_dict(
        {"name": "s", "corners": [{"x": 3.0, "y": 1}], "anchors": {"a": {"x": 2.0}}, "weights": {"w": 2}, "size": 4.0}
    )
    assert shape == Shape("s", (Point(3, 1.0),), {"a": Point(2)}, {"w": 2.0}, 4)
    assert type(shape.corners[0].x) is int and type(shape.weights["w"]) is float and type(shape.size) is int
    assert isinstance(shape.anchors, dict)  # records keep plain dicts (configs freeze theirs)
    assert Shape.from_dict({"name": "s", "corners": [], "size": None}).size is None
    assert Shape.from_dict(shape.to_dict()) == shape
    assert shape.to_dict()["corners"] == [{"x": 3, "y": 1.0}]  # tuples written as lists


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "s", "corners": [{"x": 2.5}]}, "corners[0].x: expected an integer, got 2.5"),
        ({"name": "s", "corners": [{"x": True}]}, "corners[0].x: expected an integer, got True"),
        ({"name": "s", "corners": {"x": 1}}, "corners: expected a list, got {'x': 1}"),
        ({"name": 7, "corners": []}, "name: expected a string, got 7"),
        ({"name": "s", "corners": [], "weights": {"w": "heavy"}}, "weights.w: expected a number, got 'heavy'"),
        ({"name": "s", "corners": [], "anchors": {"a": 1}}, "anchors.a: expected a mapping for Point, got 1"),
        ({"name": "s", "corners": [], "size": 1.5}, "size: expected an integer, got 1.5"),
    ],
)
def test_a_wrong_type_names_the_field_what_was_expected_and_what_was_given(data, message):
    with pytest.raises(RecordError) as err:
        Shape.from_dict(data)
    assert str(err.value) == message


def test_missing_required_keys_are_named():
    with pytest.raises(RecordError, match=r"^point: missing keys \['x'\]; known keys: x, y$"):
        Point.from_dict({"y": 1.0})
    with pytest.raises(RecordError, match=r"^corners\[0\]: missing keys \['x'\] of point; known keys: x, y$"):
        Shape.from_dict({"name": "s", "corners": [{}]})
    with pytest.raises(RecordError, match=r"Shape: missing keys \['name', 'corners'\]"):
        Shape.from_dict(None)
    with pytest.raises(RecordError, match="point: expected a mapping, got list"):
        Point.from_dict([1, 2])


def test_a_record_raises_its_own_error_and_its_rules_say_where_they_broke():
    with pytest.raises(PartError, match="start: expected an integer, got 'a'"):
        Span.from_dict({"start": "a", "end": 1})
    with pytest.raises(PartError, match="^end 1 is before start 2$"):
        Span.from_dict({"start": 2, "end": 1})
    with pytest.raises(PartError, match=r"^part: end 1 is before start 2$"):
        Span.from_dict({"start": 2, "end": 1}, "part.")


def test_field_options_place_a_field_elsewhere_in_the_data():
    timed = Timed("t", Span(1, 2), Span(3, 4), raw=b"\x01", where="/here")
    data = timed.to_dict()
    # A renamed key, a nested record flat (twice, one under a prefix), empty fields left out, own codec.
    assert data == {"name": "t", "start": 1, "end": 2, "other_start": 3, "other_end": 4, "raw": "01"}
    back = Timed.from_dict(data)
    assert back == dataclasses.replace(timed, where=None) and back.note is None and back.tags == ()
    assert Timed.from_dict({"name": "t", "start": 1, "end": 2}).other is None  # a flat optional record absent
    partial = {k: v for k, v in data.items() if k != "other_end"}
    with pytest.raises(PartError, match=r"missing keys \['other_end'\]"):  # ... or given whole
        Timed.from_dict(partial)
    with pytest.raises(PartError, match="other_start: expected an integer, got 'x'"):
        Timed.from_dict({**data, "other_start": "x"})
    with pytest.raises(PartError, match="where: unknown key in Timed"):  # not a key of the data
        Timed.from_dict({**data, "where": "/x"})
    with pytest.raises(PartError, match="^raw: expected hex digits, got 'zz'$"):
        Timed.from_dict({**data, "raw": "zz"})


def test_whole_int_is_the_one_rule_for_numbers_that_arrive_as_floats():
    assert [records.whole_int(v) for v in (3, 3.0, -2.0, 2.5, True, "3", None)] == [3, 3, -2, None, None, None, None]


# ------------------------------------------------------------------ files written by earlier versions


# A promotion line of a history written before entries named their target, task and load test, and
# a rollback line of the first versions, which left model_uri out.
OLD_HISTORY = (
    '{"action": "promote", "checks": {"health": {"detail": "version 1 AVAILABLE", "passed": true}, "prediction": '
    '{"detail": "16/16 right (1.00 >= 0.80)", "passed": true}}, "metrics": {"accuracy": 0.875, "loss": 0.41}, '
    '"model_name": "classifier", "model_uri": "/runs/a/model", "run": "promote-1", "sha256": "0f3a", '
    '"time": "2025-03-01T09:00:00+00:00", "version": 1}\n'
    '{"action": "rollback", "checks": {}, "metrics": {}, "model_name": "classifier", "reason": "manual", '
    '"run": "rollback-2", "time": "2025-03-02T09:00:00+00:00", "verified": true, "version": 1}\n'
)


def test_a_stage_history_of_an_earlier_version_loads_and_is_rewritten_as_it_was(tmp_path):
    from components.serving.stages import StageEntry, StageRegistry

    folder = tmp_path / "stages" / "prod" / "records" / "classifier"
    folder.mkdir(parents=True)
    (folder / "history.jsonl").write_text(OLD_HISTORY)
    promote, rollback = StageRegistry(str(tmp_path / "stages")).read_history("prod", "classifier")
    assert promote.version == 1 and promote.checks_passed and promote.metrics == {"accuracy": 0.875, "loss": 0.41}
    assert promote.task is None and promote.target is None and promote.load_test is None and promote.extra == {}
    assert rollback.model_uri == "" and rollback.verified is True and rollback.reason == "manual"
    first, second = OLD_HISTORY.splitlines()
    assert json.loads(promote.to_json()) == json.loads(first)  # nothing made up, nothing lost
    assert json.loads(rollback.to_json()) == {**json.loads(second), "model_uri": ""}
    assert StageEntry.from_json(promote.to_json()) == promote


def test_a_stage_entry_of_a_newer_version_keeps_its_unknown_keys_in_every_part():
    from components.serving.stages import StageEntry

    line = json.loads(OLD_HISTORY.splitlines()[0])
    line["canary"] = {"steps": [10, 50]}
    line["checks"]["health"]["attempts"] = 3
    line["load_test"] = {"clients": 2, "requests": 40, "errors": 0, "duration_s": 1.5, "requests_per_s": 26.7,
                         "objectives": {"max_p99_ms": 300.0}, "passed": True, "p999_ms": 9.0}  # fmt: skip
    entry = StageEntry.from_dict(line)
    assert entry.extra == {"canary": {"steps": [10, 50]}} and entry.checks[0].extra == {"attempts": 3}
    assert entry.load_test.extra == {"p999_ms": 9.0} and entry.load_test.p99_ms is None
    assert entry.to_dict() == line


# training.json as written before the metrics mapping, the task, workers, the model's reason and the
# fit were recorded: the task's figures as top-level keys.
OLD_TRAINING_JSON = {
    "model": "mnist_cnn", "steps": 1500, "epochs": 4, "steps_per_epoch": 375, "global_batch_size": 128,
    "batch_size_per_replica": 128, "replicas": 1, "accelerator": "cpu", "strategy": "_DefaultDistributionStrategy",
    "precision": "float32", "steps_per_execution": 1, "jit_compile": False, "input_cached": True,
    "learning_rate": 0.001, "images_per_sec": 5120.5, "train_seconds": 41.2, "resumed_from_step": 0,
    "train_loss": 0.31, "val_loss": 0.35, "train_accuracy": 0.89, "val_accuracy": 0.87,
    "class_names": ["T-shirt/top", "Trouser"], "image_shape": [28, 28, 1], "dataset": "/runs/a/dataset",
    "dataset_fingerprint": "9c1d", "config_fingerprint": "77aa", "finished_at": "2025-02-01T10:00:00+00:00",
    "history": [{"epoch": 1, "step": 375, "loss": 0.5, "accuracy": 0.8, "val_accuracy": 0.84}],
    "epoch_seconds": [12.0, 9.7, 9.8, 9.7], "precision_reason": "float32: this CPU has no bfloat16 units",
}  # fmt: skip


def test_a_training_json_of_an_earlier_version_loads_with_its_figures():
    from trainer.train import TrainingSummary

    summary = TrainingSummary.from_dict(OLD_TRAINING_JSON)
    assert summary.task == "classification" and summary.workers == 1 and summary.fit is None
    assert summary.metrics == {"train_accuracy": 0.89, "val_accuracy": 0.87} and summary.extra == {}
    rewritten = summary.to_dict()
    assert {k: rewritten[k] for k in OLD_TRAINING_JSON} == OLD_TRAINING_JSON  # the keys it had, as they were
    assert rewritten["metrics"] == summary.metrics and TrainingSummary.from_dict(rewritten) == summary


def test_a_training_json_of_a_newer_version_keeps_its_unknown_keys():
    from trainer.train import TrainingSummary

    newer = {**TrainingSummary.from_dict(OLD_TRAINING_JSON).to_dict(), "energy_kwh": 0.4, "steps": 1500.0}
    summary = TrainingSummary.from_dict(newer)
    assert summary.extra == {"energy_kwh": 0.4} and type(summary.steps) is int
    assert summary.to_dict() == {**newer, "steps": 1500}
    with pytest.raises(RecordError, match="training.json: missing keys \\['model'\\]"):
        TrainingSummary.from_dict({k: v for k, v in newer.items() if k != "model"})


# dataset.json as the converter wrote it before version 3 (shards with sha256, no crc32c).
OLD_DATASET_JSON = """{
 "schema_version": 1,
 "task": "classification",
 "source": {"uri": "fashion-mnist", "format": "idx", "fingerprint": "5e1c0a"},
 "classes": ["T-shirt/top", "Trouser"],
 "image": {"height": 28, "width": 28, "channels": 1},
 "compression": null,
 "splits": {
  "train": {"count": 120, "class_counts": {"T-shirt/top": 60, "Trouser": 60},
            "shards": [{"file": "train-00000-of-00001.tfrecord", "count": 120, "bytes": 98304, "sha256": "ab12"}]},
  "test": {"count": 40, "class_counts": {"T-shirt/top": 20, "Trouser": 20},
           "shards": [{"file": "test-00000-of-00001.tfrecord", "count": 40, "bytes": 32768, "sha256": "cd34"}]}
 },
 "rejected": 0,
 "rejected_reasons": {},
 "converted": {},
 "ignored": {},
 "empty_classes": [],
 "plan_key": "3f9e",
 "config": {"source": "fashion-mnist", "limit_per_split": 120}
}
"""


def test_a_dataset_json_of_an_earlier_converter_loads(tmp_path):
    from trainer import tfrecords

    (tmp_path / "dataset.json").write_text(OLD_DATASET_JSON)
    info = tfrecords.load_dataset_info(str(tmp_path))
    assert info.splits["train"].shards[0].sha256 == "ab12" and info.splits["train"].shards[0].crc32c is None
    assert info.split_count("test") == 40 and info.boxes is None and info.location == str(tmp_path)
    assert info.shard_paths("train") == [f"{tmp_path}/train-00000-of-00001.tfrecord"]
    assert info.to_json() == json.loads(OLD_DATASET_JSON)  # written back with the keys it had


# A sweep row written before cells had workers, its counts turned into floats by kfp.local.
OLD_SWEEP_ROW = {
    "cell": {
        "key": "ce6b1472c949732b", "name": "tpu-v3-8 384px 4ep b16", "accelerator": "tpu-v3-8",
        "accelerator_type": "cloud-tpus.google.com/v3", "accelerator_count": "8", "strategy": "tpu",
        "model": "retinanet", "image_size": 384.0, "epochs": 4.0, "batch_size_per_replica": 16.0,
        "learning_rate": 0.001, "model_options": {"head_convs": 2.0}, "repeat": 0.0, "repeats": 1.0, "seed": 0.0,
    },
    "status": "ok", "reason": None, "task": "detection", "fit_s": 400.0, "billed_s": 600.0, "epoch_s": 100.0,
    "examples_per_sec": 123.0, "steps": 100.0, "global_batch_size": 128.0, "batch_size_per_replica": 16.0,
    "replicas": 8.0, "device": "tpu", "metrics": {"ap50": 0.6, "ap": 0.3}, "started_at": 1700000000.0,
}  # fmt: skip


def test_a_sweep_row_of_an_earlier_version_loads(tmp_path):
    from components.sweep.cell import CellResult, read_row
    from components.sweep.grid import GridError

    (tmp_path / "ce6b1472c949732b.json").write_text(json.dumps(OLD_SWEEP_ROW))
    cell = CellResult.from_dict(OLD_SWEEP_ROW).cell
    result = read_row(str(tmp_path), cell)
    assert result.cell.workers == 1 and result.cell.image_size == 384 and type(result.steps) is int
    assert result.cell.model_options == {"head_convs": 2} and result.cell.global_batch_size is None
    assert CellResult.from_dict(result.to_dict()) == result
    with pytest.raises(GridError, match="a reason comes with status failed only"):
        CellResult.from_dict({**OLD_SWEEP_ROW, "status": "failed"})
