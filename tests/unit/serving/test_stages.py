import json

import pytest

from components.serving import stages
from components.serving.checks import CheckResult, KnownExample
from components.serving.stages import StageEntry, StageRegistry


def fake_saved_model(path, payload=b"graph"):
    (path / "variables").mkdir(parents=True)
    (path / "variables" / "variables.index").write_bytes(b"index-" + payload)
    (path / "saved_model.pb").write_bytes(payload)
    return str(path)


def test_resolve_stages_root():
    assert stages.resolve_stages_root("gs://b/st", "/root") == "gs://b/st"
    assert stages.resolve_stages_root("", "/root/") == "/root/stages"
    assert stages.resolve_stages_root("", "gs://b/p") == "gs://b/p/stages"
    with pytest.raises(ValueError, match="pipeline_root"):
        stages.resolve_stages_root("", "")


def test_a_registry_is_its_root_and_names_its_folders():
    registry = StageRegistry("gs://b/stages")
    assert registry.stage_dir("prod") == "gs://b/stages/prod"
    assert registry.models_dir("prod") == "gs://b/stages/prod/models"
    assert registry.version_path("prod", "clf", 3) == "gs://b/stages/prod/models/clf/3"
    assert registry.records_dir("demo", "clf") == "gs://b/stages/demo/records/clf"
    with pytest.raises(ValueError, match="unknown stage 'qa'"):
        registry.stage_dir("qa")
    with pytest.raises(ValueError, match="model_name must be a non-empty name without '/'"):
        registry.records_dir("demo", "a/b")
    with pytest.raises(ValueError, match="a stage registry needs a root"):
        StageRegistry("")


def test_publish_numbers_versions_and_is_idempotent(tmp_path):
    registry = StageRegistry(str(tmp_path / "stages"))
    a = fake_saved_model(tmp_path / "a", b"A")
    b = fake_saved_model(tmp_path / "b", b"B")
    assert registry.publish(a, "demo", "clf") == 1
    assert registry.publish(a, "demo", "clf") == 1  # same content: nothing copied
    assert registry.publish(b, "demo", "clf") == 2
    assert registry.publish(a, "demo", "clf") == 3  # older content again must become newest
    assert registry.list_versions("demo", "clf") == [1, 2, 3]
    assert (tmp_path / "stages/demo/models/clf/2/saved_model.pb").read_bytes() == b"B"
    assert registry.list_versions("staging", "clf") == []


def test_saved_model_pb_is_copied_last(tmp_path, monkeypatch):
    from trainer import storage

    order = []
    real = storage.copy_file
    monkeypatch.setattr(storage, "copy_file", lambda s, d: (order.append(d), real(s, d)))
    StageRegistry(str(tmp_path / "st")).publish(fake_saved_model(tmp_path / "a"), "demo", "clf")
    assert order[-1].endswith("/1/saved_model.pb") and len(order) == 2


def test_interrupted_copy_is_replaced(tmp_path):
    root = tmp_path / "stages"
    (root / "demo/models/clf/1/variables").mkdir(parents=True)  # no saved_model.pb: never ready
    assert StageRegistry(str(root)).publish(fake_saved_model(tmp_path / "a"), "demo", "clf") == 1
    assert (root / "demo/models/clf/1/saved_model.pb").exists()


def test_publish_refuses_a_folder_without_saved_model(tmp_path):
    (tmp_path / "x").mkdir()
    registry = StageRegistry(str(tmp_path / "st"))
    with pytest.raises(FileNotFoundError, match="saved_model.pb"):
        registry.publish(str(tmp_path / "x"), "demo", "clf")
    with pytest.raises(ValueError, match="unknown stage"):
        registry.publish(str(tmp_path / "x"), "qa", "clf")


def entry(action, version, model_uri, run, metrics=None, model_name="clf", **kw):
    return StageEntry(
        action=action, version=version, model_uri=model_uri, run=run, metrics=metrics or {}, model_name=model_name, **kw
    )


def test_record_current_history_and_retire(tmp_path):
    registry = StageRegistry(str(tmp_path / "stages"))
    health = (CheckResult("health", True, "version 1 AVAILABLE", {"version": 1}),)
    assert registry.read_current("prod", "clf") is None
    assert registry.read_history("prod", "clf") == []
    v1 = registry.publish(fake_saved_model(tmp_path / "a", b"A"), "prod", "clf")
    registry.record("prod", entry("promote", v1, "/m/a", "run-1", {"accuracy": 0.9}, checks=health))
    v2 = registry.publish(fake_saved_model(tmp_path / "b", b"B"), "prod", "clf")
    registry.record("prod", entry("promote", v2, "/m/b", "run-2", {"accuracy": 0.95}, checks=health))
    assert registry.read_current("prod", "clf").metrics == {"accuracy": 0.95}
    registry.retire("prod", "clf", v2)
    assert registry.list_versions("prod", "clf") == [1]
    registry.record("prod", entry("rollback", v1, "/m/a", "run-3", {"accuracy": 0.9}, reason="manual"))
    current = registry.read_current("prod", "clf")
    assert current.version == 1 and current.action == "rollback" and current.reason == "manual"
    history = registry.read_history("prod", "clf")
    assert [e.action for e in history] == ["promote", "promote", "rollback"]
    assert history[0].checks == health and history[0].checks_passed and not history[2].checks_passed
    # On disk: the contract's keys (docs/CONTRACTS.md), which to_dict writes.
    first = json.loads((tmp_path / "stages/prod/records/clf/history.jsonl").read_text().splitlines()[0])
    assert set(first) == {"version", "model_uri", "model_name", "run", "time", "action", "checks", "metrics"}
    assert first["checks"] == {"health": {"passed": True, "detail": "version 1 AVAILABLE", "figures": {"version": 1}}}
    assert history[0].to_dict() == first and history[0].metrics == {"accuracy": 0.9}
    # A retired number is never reused: version numbers only grow.
    assert registry.publish(fake_saved_model(tmp_path / "c", b"C"), "prod", "clf") == 3
    assert json.loads((tmp_path / "stages/prod/published.json").read_text())["clf"]["3"]["source"].endswith("c")
    with pytest.raises(FileNotFoundError, match="not in service"):
        registry.retire("prod", "clf", 2)
    with pytest.raises(ValueError, match="unknown action"):
        entry("deploy", 1, "", "r")


FUTURE_LINE = (
    '{"action": "promote", "checks": {"health": {"detail": "version 2 AVAILABLE", "passed": true}}, "metrics": {}, '
    '"model_name": "clf", "model_uri": "/runs/x", "run": "promote-3", "source_stage": "demo", '
    '"source_version": 4, "time": "2025-06-03T10:00:00+00:00", "version": 2, "some_future_key": [1, 2]}\n'
)


def test_keys_this_code_does_not_know_survive_a_rewrite(tmp_path):
    folder = tmp_path / "stages" / "staging" / "records" / "clf"
    folder.mkdir(parents=True)
    (folder / "history.jsonl").write_text(FUTURE_LINE)
    (moved,) = StageRegistry(str(tmp_path / "stages")).read_history("staging", "clf")
    assert moved.source_stage == "demo" and moved.source_version == 4 and moved.checks_passed
    assert moved.extra == {"some_future_key": [1, 2]}
    assert StageEntry.from_json(moved.to_json()) == moved


def test_an_entry_names_its_models_task_and_one_written_before_that_loads_without(tmp_path):
    # FUTURE_LINE was written before entries carried the task: it loads, the task unknown.
    assert StageEntry.from_json(FUTURE_LINE).task is None
    assert "task" not in StageEntry.from_json(FUTURE_LINE).to_dict()  # nothing is made up on a rewrite
    registry = StageRegistry(str(tmp_path / "stages"))
    registry.record("demo", entry("promote", 1, "/m", "run-1", task="detection", target="local"))
    current = registry.read_current("demo", "clf")
    assert (current.task, current.target) == ("detection", "local") and current.extra == {}
    on_disk = json.loads((tmp_path / "stages/demo/records/clf/current.json").read_text())
    assert on_disk["task"] == "detection"


def test_known_examples_round_trip_with_their_task(tmp_path):
    registry = StageRegistry(str(tmp_path / "stages"))
    with pytest.raises(FileNotFoundError, match="never been promoted"):
        registry.load_examples("staging", "clf")
    written = stages.StageExamples("classification", (KnownExample(b"png", 4), KnownExample(b"jpg", 0)))
    registry.save_examples("staging", "clf", written)
    on_disk = json.loads((tmp_path / "stages/staging/records/clf/smoke_examples.json").read_text())
    expected = [{"b64": "cG5n", "expected": 4}, {"b64": "anBn", "expected": 0}]
    assert on_disk == {"task": "classification", "examples": expected}
    assert registry.load_examples("staging", "clf") == written
    with pytest.raises(FileNotFoundError, match="'detector' has never been promoted to staging"):
        registry.load_examples("staging", "detector")


def test_records_are_kept_per_model_name(tmp_path):
    registry = StageRegistry(str(tmp_path / "stages"))
    assert registry.served_models("demo") == {} and registry.served_versions("demo") == {}
    registry.record("demo", entry("promote", 1, "/m/clf", "run-1", {"accuracy": 0.9}, model_name="classifier"))
    registry.record("demo", entry("promote", 1, "/m/det", "run-2", {"ap50": 0.7}, model_name="detector"))
    registry.record("demo", entry("promote", 2, "/m/det2", "run-3", {"ap50": 0.8}, model_name="detector"))
    registry.record("demo", entry("rollback", 1, "/m/det", "run-4", {"ap50": 0.7}, model_name="detector"))
    assert registry.read_current("demo", "classifier").metrics == {"accuracy": 0.9}
    assert registry.read_current("demo", "detector").run == "run-4"
    assert [e.run for e in registry.read_history("demo", "classifier")] == ["run-1"]
    assert [e.run for e in registry.read_history("demo", "detector")] == ["run-2", "run-3", "run-4"]
    assert registry.last_entry_for_version("demo", "detector", 2).run == "run-3"
    assert registry.last_entry_for_version("demo", "classifier", 2) is None
    assert registry.served_versions("demo") == {"classifier": 1, "detector": 1}
    assert registry.read_current("prod", "classifier") is None
    # A model whose first promotion failed has history but serves nothing.
    registry.record("demo", entry("rollback", None, "", "run-5", model_name="segmenter"))
    assert list(registry.served_models("demo")) == ["classifier", "detector"]
    assert (tmp_path / "stages/demo/records/detector/current.json").is_file()
    assert not (tmp_path / "stages/demo/current.json").exists()  # no stage-level record any more
    with pytest.raises(ValueError, match="needs model_name"):
        registry.record("demo", StageEntry("promote", 3, "/m", "run-6"))


def test_the_gates_baseline_is_prods_model_of_the_same_name(tmp_path):
    from components.evaluate.run import read_baseline

    root = str(tmp_path / "stages")
    registry = StageRegistry(root)
    assert read_baseline(None, "classifier") is None
    assert read_baseline(root, "classifier") is None
    registry.record("prod", entry("promote", 4, "/m/clf", "run-1", {"accuracy": 0.9}, model_name="classifier"))
    registry.record("prod", entry("promote", 1, "/m/det", "run-2", {"ap50": 0.7}, model_name="detector"))
    registry.record("demo", entry("promote", 9, "/m/x", "run-3", {"accuracy": 0.1}, model_name="classifier"))
    assert read_baseline(root, "classifier")["metrics"] == {"accuracy": 0.9}
    assert read_baseline(root, "detector")["metrics"] == {"ap50": 0.7}
    assert read_baseline(root, "segmenter") is None
