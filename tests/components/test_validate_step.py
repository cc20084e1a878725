"""validate_dataset, the step between convert and train (python_func): it publishes its statistics
and report either way, and fails on an error finding, naming it and the way out; the policy turns
that error into a warning."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from components.validate.component import validate_dataset
from components.validate.run import ValidationFailed
from tests.validate_fixtures import Rec, balanced, write_dataset
from trainer.config import ConfigError


def _leaky(tmp_path):
    train, test = balanced("train", 8, 4), balanced("test", 4, 4)
    test[1] = Rec("test/copy", train[5].label, image=b"image of train/5")
    return write_dataset(tmp_path / "d", {"train": train, "test": test})


def _run(tmp_path, dataset, **params):
    statistics = SimpleNamespace(path=str(tmp_path / "stats"), metadata={})
    report = SimpleNamespace(path=str(tmp_path / "report.md"))
    call = lambda: validate_dataset.python_func(  # noqa: E731
        dataset=SimpleNamespace(path=str(dataset)), statistics=statistics, report=report, **params
    )
    return call, statistics, report


def test_leakage_fails_the_step_after_publishing_and_a_policy_can_make_it_a_warning(tmp_path):
    call, statistics, report = _run(tmp_path, _leaky(tmp_path))
    with pytest.raises(ValidationFailed) as err:
        call()
    assert "leakage: " in str(err.value) and "validation_policy" in str(err.value)
    assert (tmp_path / "stats" / "stats.json").is_file() and (tmp_path / "stats" / "validation.json").is_file()
    assert "FAILED" in (tmp_path / "report.md").read_text() and statistics.metadata["passed"] is False

    call, statistics, _ = _run(tmp_path, _leaky(tmp_path), validation_policy={"leakage": "warn"})
    result = call()
    assert result["passed"] and statistics.metadata == {"passed": True, "errors": 0, "warns": 1, "ignores": 0}

    call, _, _ = _run(tmp_path, _leaky(tmp_path), validation_policy={"leek": "warn"})
    with pytest.raises(ConfigError, match="leek"):
        call()


def test_the_baseline_is_the_dataset_prod_serves_a_model_trained_on_else_the_drift_checks_say_skipped(tmp_path):
    from components.serving.stages import StageEntry, StageRegistry
    from trainer import storage

    stages = str(tmp_path / "stages")
    served = {"stages_root": stages, "served_model_name": "classifier"}
    old = write_dataset(tmp_path / "old", {"train": balanced("train", 8, 4), "test": balanced("test", 4, 4)})
    new_test = [Rec(f"test/new-{i}", i % 4) for i in range(4)]  # the test split changed since
    new = write_dataset(tmp_path / "new", {"train": balanced("train", 8, 4), "test": new_test})

    call, _, _ = _run(tmp_path, new, **served)
    result = call()  # nothing served yet
    assert result["passed"] and result["findings"] == []
    assert result["notes"] == ["no prod or staging model 'classifier' to compare with: drift checks skipped"]

    model = tmp_path / "model"
    storage.write_json(str(model / "training.json"), {"dataset": str(old)})
    StageRegistry(stages).record(
        "staging",
        StageEntry(action="promote", version=3, model_uri=str(model), run="r1", model_name="classifier"),
    )
    call, _, report = _run(tmp_path, new, **served)
    result = call()
    assert result["notes"] == ["baseline: the dataset staging's classifier version 3 was trained on"]
    assert [f["kind"] for f in result["findings"]] == ["test_split_changed"] and result["baseline"] == str(old)
    assert "test_split_changed" in Path(report.path).read_text()
