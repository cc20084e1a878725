import json

import pytest

from components.serving import stages


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


def test_publish_numbers_versions_and_is_idempotent(tmp_path):
    root = str(tmp_path / "stages")
    a = fake_saved_model(tmp_path / "a", b"A")
    b = fake_saved_model(tmp_path / "b", b"B")
    assert stages.publish(a, root, "demo", "clf") == 1
    assert stages.publish(a, root, "demo", "clf") == 1  # same content: nothing copied
    assert stages.publish(b, root, "demo", "clf") == 2
    assert stages.publish(a, root, "demo", "clf") == 3  # older content again must become newest
    assert stages.list_versions(root, "demo", "clf") == [1, 2, 3]
    assert (tmp_path / "stages/demo/models/clf/2/saved_model.pb").read_bytes() == b"B"
    assert stages.list_versions(root, "staging", "clf") == []


def test_saved_model_pb_is_copied_last(tmp_path, monkeypatch):
    from trainer import storage

    order = []
    real = storage.copy_file
    monkeypatch.setattr(storage, "copy_file", lambda s, d: (order.append(d), real(s, d)))
    stages.publish(fake_saved_model(tmp_path / "a"), str(tmp_path / "st"), "demo", "clf")
    assert order[-1].endswith("/1/saved_model.pb") and len(order) == 2


def test_interrupted_copy_is_replaced(tmp_path):
    root = tmp_path / "stages"
    (root / "demo/models/clf/1/variables").mkdir(parents=True)  # no saved_model.pb: never ready
    assert stages.publish(fake_saved_model(tmp_path / "a"), str(root), "demo", "clf") == 1
    assert (root / "demo/models/clf/1/saved_model.pb").exists()


def test_publish_refuses_a_folder_without_saved_model(tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(FileNotFoundError, match="saved_model.pb"):
        stages.publish(str(tmp_path / "x"), str(tmp_path / "st"), "demo", "clf")
    with pytest.raises(ValueError, match="unknown stage"):
        stages.publish(str(tmp_path / "x"), str(tmp_path / "st"), "qa", "clf")


def test_record_current_history_and_retire(tmp_path):
    root = str(tmp_path / "stages")
    assert stages.read_current(root, "prod") is None
    assert stages.read_history(root, "prod") == []
    v1 = stages.publish(fake_saved_model(tmp_path / "a", b"A"), root, "prod", "clf")
    stages.record(root, "prod", "promote", v1, "/m/a", "run-1", {"health": True}, {"accuracy": 0.9}, "clf")
    v2 = stages.publish(fake_saved_model(tmp_path / "b", b"B"), root, "prod", "clf")
    stages.record(root, "prod", "promote", v2, "/m/b", "run-2", {"health": True}, {"accuracy": 0.95}, "clf")
    assert stages.read_current(root, "prod")["metrics"] == {"accuracy": 0.95}
    stages.retire(root, "prod", "clf", v2)
    assert stages.list_versions(root, "prod", "clf") == [1]
    stages.record(root, "prod", "rollback", v1, "/m/a", "run-3", metrics={"accuracy": 0.9}, reason="manual")
    current = stages.read_current(root, "prod")
    assert current["version"] == 1 and current["action"] == "rollback" and current["reason"] == "manual"
    history = stages.read_history(root, "prod")
    assert [e["action"] for e in history] == ["promote", "promote", "rollback"]
    assert set(history[0]) >= {"version", "model_uri", "run", "time", "action", "checks", "metrics"}
    # A retired number is never reused: version numbers only grow.
    assert stages.publish(fake_saved_model(tmp_path / "c", b"C"), root, "prod", "clf") == 3
    assert json.loads((tmp_path / "stages/prod/published.json").read_text())["clf"]["3"]["source"].endswith("c")
    with pytest.raises(FileNotFoundError, match="not in service"):
        stages.retire(root, "prod", "clf", 2)
    with pytest.raises(ValueError, match="unknown action"):
        stages.record(root, "prod", "deploy", 1, "", "r")
