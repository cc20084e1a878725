"""The stage store on gs:// against a real local GCS emulator (gcp-storage-emulator) on loopback."""

import dataclasses

import pytest

from components.serving import stages
from components.serving.checks import CheckResult, KnownExample
from components.serving.stages import StageEntry, StageRegistry
from tests.gcs_emulator import running_emulator
from trainer import storage

pytestmark = pytest.mark.integration

BUCKET = "serving"


@pytest.fixture(scope="module")
def gcs():
    with running_emulator(BUCKET):
        yield f"gs://{BUCKET}"


def fake_saved_model(path, payload):
    (path / "variables").mkdir(parents=True)
    (path / "variables" / "variables.index").write_bytes(b"index-" + payload)
    (path / "saved_model.pb").write_bytes(payload)
    return str(path)


def test_stage_store_on_gcs(gcs, tmp_path):
    root = stages.resolve_stages_root("", f"{gcs}/pipeline-root")
    assert root == f"{gcs}/pipeline-root/stages"
    registry = StageRegistry(root)
    a = fake_saved_model(tmp_path / "a", b"A")
    b = fake_saved_model(tmp_path / "b", b"B")
    assert registry.publish(a, "prod", "clf") == 1
    assert registry.publish(a, "prod", "clf") == 1
    assert registry.publish(b, "prod", "clf") == 2
    assert storage.list_files(registry.version_path("prod", "clf", 2)) == [
        "saved_model.pb",
        "variables/variables.index",
    ]
    assert storage.read_bytes(f"{root}/prod/models/clf/2/saved_model.pb") == b"B"
    # A version copied within GCS keeps its identity (content hash).
    assert storage.tree_sha256(registry.version_path("prod", "clf", 2)) == storage.tree_sha256(b)

    assert registry.read_current("prod", "clf") is None
    health = (CheckResult("health", True, "version 1 AVAILABLE"),)
    for version, uri, run, accuracy in [(1, "gs://m/a", "run-1", 0.9), (2, "gs://m/b", "run-2", 0.93)]:
        metrics = {"accuracy": accuracy}
        entry = StageEntry("promote", version, uri, run, model_name="clf", checks=health, metrics=metrics)
        registry.record("prod", entry)
    assert registry.read_current("prod", "clf").metrics == {"accuracy": 0.93}  # what the gate reads

    registry.retire("prod", "clf", 2)
    assert registry.list_versions("prod", "clf") == [1]
    assert storage.exists(f"{root}/prod/retired/clf/2/saved_model.pb")
    registry.record("prod", StageEntry("rollback", 1, "gs://m/a", "run-3", model_name="clf", metrics={"accuracy": 0.9}))
    assert [e.action for e in registry.read_history("prod", "clf")] == ["promote", "promote", "rollback"]
    assert registry.read_current("prod", "clf").version == 1
    assert registry.publish(b, "prod", "clf") == 3


def test_records_per_model_on_gcs(gcs):
    registry = StageRegistry(f"{gcs}/multi-stages")
    root = registry.root
    health = (CheckResult("health", True, "version 1 AVAILABLE"),)
    for name, version, metrics in [("classifier", 3, {"accuracy": 0.9}), ("detector", 1, {"ap50": 0.7})]:
        entry = StageEntry("promote", version, f"gs://m/{name}", "r", model_name=name, checks=health, metrics=metrics)
        registry.record("demo", entry)
    registry.record("demo", StageEntry("promote", 2, "gs://m/det2", "r2", model_name="detector", metrics={"ap50": 0.8}))
    assert storage.exists(f"{root}/demo/records/detector/current.json")
    assert storage.exists(f"{root}/demo/records/classifier/history.jsonl")
    assert registry.served_versions("demo") == {"classifier": 3, "detector": 2}
    assert [e.version for e in registry.read_history("demo", "detector")] == [1, 2]
    assert registry.read_current("demo", "classifier").metrics == {"accuracy": 0.9}
    examples = stages.StageExamples("classification", (KnownExample(b"png", 4),))
    registry.save_examples("demo", "detector", examples)
    assert registry.load_examples("demo", "detector") == examples
    with pytest.raises(FileNotFoundError, match="'classifier' has never been promoted"):
        registry.load_examples("demo", "classifier")


@pytest.mark.slow
def test_local_promotion_with_stages_on_gcs(gcs, tmp_path):
    from components.promote.run import promote
    from components.serving.config import PromoteConfig
    from tests.promote_models import export_tiny_model, write_digits_dataset

    export_tiny_model(str(tmp_path / "model" / "saved_model"), steps=150)
    dataset = write_digits_dataset(tmp_path / "dataset", count=24)
    config = PromoteConfig(stage="demo", stages_root=f"{gcs}/run-stages", model_name="clf", min_smoke_accuracy=0.6)
    result = promote(str(tmp_path / "model"), dataset, config, run_id="run-1", metrics={"accuracy": 0.9})
    assert result.version == 1 and result.check("prediction").passed
    registry = StageRegistry(config.stages_root)
    current = registry.read_current("demo", "clf")
    assert (current.version, current.task, current.target) == (1, "classification", "local")
    examples = registry.load_examples("demo", "clf")  # smoke_examples.json on gs://
    assert examples.task == "classification" and len(examples.examples) == config.smoke_examples
    assert promote(str(tmp_path / "model"), dataset, config, run_id="run-2").no_op
    # A second model at the same stage on GCS: the stage's server downloads and serves both.
    other = dataclasses.replace(config, model_name="other")
    second = promote(str(tmp_path / "model"), dataset, other, run_id="run-3", metrics={"accuracy": 0.8})
    assert second.version == 1 and second.check("stage_models").detail == "also serves clf version 1"
    assert sorted(registry.served_models("demo")) == ["clf", "other"]
