"""A served model's contract: its record, the one line naming a difference, and the stage entry that
keeps it (no TensorFlow; the promotions themselves are in tests/components/test_promote_contract.py).
"""

import dataclasses
import json

import pytest

from components.serving.contract import (
    REMEDY,
    ContractChangeError,
    ServingContract,
    SignatureContract,
    contract_change,
)
from components.serving.stages import StageEntry, StageRegistry

SERVED = ServingContract(
    signatures={
        "serving_default": SignatureContract(
            inputs={"image_bytes": "DT_STRING [-1]"}, outputs=("detection_boxes", "detection_class_names")
        ),
        "serving_tensors": SignatureContract(
            inputs={"images": "DT_FLOAT [-1, 256, 256, 3]"}, outputs=("detection_boxes", "detection_class_names")
        ),
    },
    class_names=("circle", "square", "triangle"),
)


def changed(contract, signature, **fields):
    """``contract`` with one signature's fields replaced."""
    sigs = dict(contract.signatures)
    sigs[signature] = dataclasses.replace(sigs[signature], **fields)
    return dataclasses.replace(contract, signatures=sigs)


def test_the_same_contract_is_no_change():
    same = ServingContract.from_dict(json.loads(json.dumps(SERVED.to_dict())))
    assert same == SERVED
    assert contract_change("staging", "detector", SERVED, same) is None


def test_renamed_classes_are_named_in_one_line():
    other = dataclasses.replace(SERVED, class_names=("square", "disc", "triangle"))
    line = contract_change("staging", "detector", SERVED, other)
    assert line == (
        "staging serves 'detector' with classes [circle, square, triangle]; the candidate has "
        "[square, disc, triangle] (class 0 'circle' -> 'square', class 1 'square' -> 'disc'; new: disc; "
        "gone: circle)"
    )
    assert "\n" not in line
    one = dataclasses.replace(SERVED, class_names=("circle", "disc", "triangle"))
    assert contract_change("demo", "detector", SERVED, one).endswith("(class 1 'square' -> 'disc')")
    assert str(ContractChangeError(line)) == f"{line}; {REMEDY}" and ContractChangeError(line).change == line


def test_the_same_classes_in_another_order_are_a_change():
    line = contract_change(
        "prod", "detector", SERVED, dataclasses.replace(SERVED, class_names=("square", "circle", "triangle"))
    )
    assert line.startswith(
        "prod serves 'detector' with classes [circle, square, triangle]; the candidate has [square, circle, triangle]"
    )
    assert "(the same classes in another order: class 0 'circle' -> 'square', class 1 'square' -> 'circle')" in line


def test_more_classes_say_how_many():
    more = dataclasses.replace(SERVED, class_names=("circle", "square", "triangle", "star"))
    assert "(new: star; 3 classes -> 4)" in contract_change("demo", "detector", SERVED, more)


def test_an_output_key_or_an_input_signature_that_differs_is_named():
    fewer = changed(SERVED, "serving_default", outputs=("detection_boxes",))
    assert contract_change("staging", "detector", SERVED, fewer) == (
        "staging serves 'detector' with serving_default returning [detection_boxes, detection_class_names]; "
        "the candidate returns [detection_boxes]"
    )
    smaller = changed(SERVED, "serving_tensors", inputs={"images": "DT_FLOAT [-1, 128, 128, 3]"})
    assert contract_change("staging", "detector", SERVED, smaller) == (
        "staging serves 'detector' with serving_tensors taking images DT_FLOAT [-1, 256, 256, 3]; the candidate "
        "takes images DT_FLOAT [-1, 128, 128, 3]"
    )
    renamed_input = changed(SERVED, "serving_default", inputs={"bytes": "DT_STRING [-1]"})
    assert "the candidate takes bytes DT_STRING [-1]" in contract_change("demo", "d", SERVED, renamed_input)
    gone = dataclasses.replace(SERVED, signatures={"serving_default": SERVED.signatures["serving_default"]})
    assert "with signature serving_tensors; the candidate has none" in contract_change("demo", "d", SERVED, gone)
    assert "without signature serving_tensors; the candidate adds it" in contract_change("demo", "d", gone, SERVED)


def test_several_differences_are_one_line():
    both = changed(dataclasses.replace(SERVED, class_names=("a", "b", "c")), "serving_default", outputs=("x",))
    line = contract_change("demo", "detector", SERVED, both)
    assert line.count("; and with serving_default returning") == 1 and "\n" not in line


def test_class_names_are_compared_only_where_both_say_them():
    unknown = dataclasses.replace(SERVED, class_names=None)
    assert contract_change("demo", "d", SERVED, unknown) is None
    assert contract_change("demo", "d", unknown, SERVED) is None
    assert "class_names" not in unknown.to_dict()


ENTRY = {
    "action": "promote",
    "version": 2,
    "model_uri": "/runs/1/model",
    "model_name": "detector",
    "run": "run-1",
    "time": "2024-05-01T10:00:00+00:00",
    "checks": {"health": {"passed": True, "detail": "version 2 AVAILABLE"}},
    "metrics": {"ap50": 0.7},
    "task": "detection",
}


def test_an_entry_keeps_the_contract_and_the_change():
    entry = StageEntry.from_dict({**ENTRY, "contract": SERVED.to_dict(), "contract_change": "staging serves ..."})
    assert entry.contract == SERVED and entry.contract_change == "staging serves ..."
    data = json.loads(entry.to_json())
    assert data["contract"]["class_names"] == ["circle", "square", "triangle"]
    assert data["contract"]["signatures"]["serving_tensors"]["inputs"] == {"images": "DT_FLOAT [-1, 256, 256, 3]"}
    assert StageEntry.from_json(entry.to_json()) == entry


def test_an_old_history_without_the_fields_loads(tmp_path):
    registry = StageRegistry(str(tmp_path / "stages"))
    folder = tmp_path / "stages" / "staging" / "records" / "detector"
    folder.mkdir(parents=True)
    (folder / "history.jsonl").write_text(json.dumps(ENTRY) + "\n")
    (folder / "current.json").write_text(json.dumps(ENTRY, indent=1))
    [old] = registry.read_history("staging", "detector")
    assert old.contract is None and old.contract_change is None and old.task == "detection"
    assert registry.read_current("staging", "detector") == old
    assert "contract" not in old.to_dict() and "contract_change" not in old.to_dict()  # written back as read
    registry.record("staging", dataclasses.replace(old, version=3, contract=SERVED, contract_change="changed"))
    assert [e.contract_change for e in registry.read_history("staging", "detector")] == [None, "changed"]
    assert registry.read_current("staging", "detector").contract == SERVED


def test_a_contract_of_a_newer_version_keeps_its_unknown_keys():
    data = {**SERVED.to_dict(), "labels_digest": "abc"}
    read = ServingContract.from_dict(data)
    assert read.extra == {"labels_digest": "abc"} and read.to_dict() == data
    with pytest.raises(ValueError, match="signatures"):
        ServingContract.from_dict({"class_names": ["a"]})
