"""A promotion keeps the contract of what a stage serves under a model name (docs/promotion.md).

Real tiny exports (tests/promote_models.py) with other class names, another class order and
another input size; the stage's first version is published and recorded through the registry, so
only the promotions that pass start a loopback server.
"""

import dataclasses
import functools

import pytest

from components.promote.result import render_report
from components.promote.rollback import rollback
from components.promote.run import promote, promote_version
from components.serving.checks import CheckResult
from components.serving.config import PromoteConfig
from components.serving.contract import REMEDY, ContractChangeError, read_contract
from components.serving.stages import StageEntry, StageRegistry
from tests.promote_models import CLASS_NAMES, IMAGE_SHAPE, export_tiny_model, train_tiny_model, write_digits_dataset
from trainer.tasks import get_task

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RENAMED = ["zero", *CLASS_NAMES[1:]]
REORDERED = [CLASS_NAMES[1], CLASS_NAMES[0], *CLASS_NAMES[2:]]


@functools.cache
def _trained():
    return train_tiny_model(steps=150)


def _export(folder, class_names, image_shape=IMAGE_SHAPE):
    import keras

    from trainer.tasks.classification.export import export_saved_model

    if image_shape == IMAGE_SHAPE:
        model = _trained()
    else:  # never served: refused before anything is published
        model = keras.Sequential([keras.Input(image_shape), keras.layers.Flatten(), keras.layers.Dense(10, "softmax")])
    export_saved_model(model, str(folder / "saved_model"), class_names, image_shape)
    return str(folder)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("contract")
    good = export_tiny_model(str(root / "good" / "saved_model"), steps=150).removesuffix("/saved_model")
    return {
        "good": good,
        "better": export_tiny_model(str(root / "better" / "saved_model"), seed=3).removesuffix("/saved_model"),
        "renamed": _export(root / "renamed", RENAMED),
        "reordered": _export(root / "reordered", REORDERED),
        "bigger": _export(root / "bigger", CLASS_NAMES, (16, 16, 1)),
        "dataset": write_digits_dataset(root / "dataset", count=32),
    }


def config(tmp_path, stage="staging", **kw):
    return PromoteConfig(stage=stage, stages_root=str(tmp_path / "stages"), model_name="clf", **kw)


def serve_by_hand(cfg, model_dir, old_format=False):
    """The stage serves ``model_dir`` as version 1, recorded as a promotion that passed; ``old_format``:
    an entry of before the contract was recorded.
    """
    registry = StageRegistry(cfg.stages_root)
    saved_model = model_dir + "/saved_model"
    version = registry.publish(saved_model, cfg.stage, "clf")
    contract = None if old_format else read_contract(saved_model, get_task("classification"))
    checks = (CheckResult("health", True, f"version {version} AVAILABLE"),)
    entry = StageEntry("promote", version, model_dir, "run-0", model_name="clf", checks=checks, task="classification")
    registry.record(cfg.stage, dataclasses.replace(entry, contract=contract))
    return registry


def test_a_renamed_class_is_refused_with_one_line(tmp_path, models):
    cfg = config(tmp_path)
    registry = serve_by_hand(cfg, models["good"])
    with pytest.raises(ContractChangeError) as err:
        promote(models["renamed"], models["dataset"], cfg, run_id="run-1", metrics={})
    served, candidate = ", ".join(CLASS_NAMES), ", ".join(RENAMED)
    assert str(err.value) == (
        f"staging serves 'clf' with classes [{served}]; the candidate has [{candidate}] "
        f"(class 0 'digit-0' -> 'zero'); {REMEDY}"
    )
    # Refused before anything was published: the stage serves and records what it did.
    assert registry.list_versions("staging", "clf") == [1] and len(registry.read_history("staging", "clf")) == 1


def test_another_class_order_is_refused(tmp_path, models):
    cfg = config(tmp_path, "prod")
    serve_by_hand(cfg, models["good"])
    with pytest.raises(ContractChangeError, match=r"^prod serves 'clf' with classes \[digit-0, digit-1, ") as err:
        promote(models["reordered"], models["dataset"], cfg, run_id="run-1", metrics={})
    assert "(the same classes in another order: class 0 'digit-0' -> 'digit-1', class 1 'digit-1' -> 'digit-0')" in (
        str(err.value)
    )


def test_another_input_signature_is_refused(tmp_path, models):
    cfg = config(tmp_path, "demo")
    serve_by_hand(cfg, models["good"])
    with pytest.raises(ContractChangeError) as err:
        promote(models["bigger"], models["dataset"], cfg, run_id="run-1", metrics={})
    assert str(err.value) == (
        "demo serves 'clf' with serving_tensors taking images DT_FLOAT [-1, 8, 8, 1]; the candidate takes "
        f"images DT_FLOAT [-1, 16, 16, 1]; {REMEDY}"
    )


def test_an_old_history_is_held_to_the_version_it_serves(tmp_path, models):
    """An entry without a contract (written before it was recorded): the served SavedModel says it."""
    cfg = config(tmp_path)
    registry = serve_by_hand(cfg, models["good"], old_format=True)
    assert registry.read_current("staging", "clf").contract is None
    with pytest.raises(ContractChangeError, match=r"\(class 0 'digit-0' -> 'zero'\); promote it under another"):
        promote(models["renamed"], models["dataset"], cfg, run_id="run-1", metrics={})


def test_the_same_contract_passes_and_is_recorded(tmp_path, models):
    cfg = config(tmp_path)
    registry = serve_by_hand(cfg, models["good"])
    result = promote(models["better"], models["dataset"], cfg, run_id="run-1", metrics={})
    assert result.version == 2 and result.contract_change is None and result.check("prediction").passed
    current = registry.read_current("staging", "clf")
    assert current.contract == registry.read_history("staging", "clf")[0].contract
    assert current.contract.class_names == tuple(CLASS_NAMES) and current.contract_change is None
    assert current.contract.signatures["serving_default"].outputs == ("classes", "probabilities")


def test_an_allowed_change_is_recorded_and_a_rollback_returns_to_the_old_contract(tmp_path, models):
    cfg = config(tmp_path, allow_contract_change=True)
    registry = serve_by_hand(cfg, models["good"])
    result = promote(models["renamed"], models["dataset"], cfg, run_id="run-1", metrics={})
    assert result.version == 2 and result.contract_change.startswith("staging serves 'clf' with classes [digit-0")
    assert result.contract_change.endswith("(class 0 'digit-0' -> 'zero')")  # the change, not the way out
    assert f"- contract replaced (allow_contract_change): {result.contract_change}" in render_report(result)
    current = registry.read_current("staging", "clf")
    assert current.contract_change == result.contract_change and current.contract.class_names == tuple(RENAMED)
    assert registry.read_history("staging", "clf")[-1].contract_change == result.contract_change
    # A rollback returns to what was served before: not checked, and the old contract is current again.
    back = rollback(config(tmp_path), run_id="run-2")
    assert back.version == 1 and back.check("prediction").passed
    current = registry.read_current("staging", "clf")
    assert current.action == "rollback" and current.contract.class_names == tuple(CLASS_NAMES)
    assert current.contract_change is None


def test_a_version_moved_on_keeps_the_next_stages_contract(tmp_path, models):
    """demo took the renamed model on purpose; staging serves the old classes: the move is refused."""
    serve_by_hand(config(tmp_path), models["good"])
    serve_by_hand(config(tmp_path, "demo"), models["renamed"])
    with pytest.raises(ContractChangeError, match=r"^staging serves 'clf' with classes .*'digit-0' -> 'zero'"):
        promote_version(config(tmp_path), "demo", run_id="run-1")
    assert StageRegistry(str(tmp_path / "stages")).list_versions("staging", "clf") == [1]


def test_a_folder_that_is_no_saved_model_promises_nothing(tmp_path):
    (tmp_path / "saved_model.pb").write_text("not a SavedModel")
    assert read_contract(str(tmp_path), get_task("classification")) is None
