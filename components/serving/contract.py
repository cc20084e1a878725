"""What a served model promises its clients, and the one line that says how a candidate breaks it (docs/promotion.md).

A client of ``/v1/models/<name>`` relies on what the name answers: every signature's inputs
(name, dtype, shape) and output keys, and the classes those outputs index, in their order. That is
a model's :class:`ServingContract`. A stage records the contract of the version it serves with its
history entry (``StageEntry.contract``); a promotion compares a candidate's with it
(:func:`contract_change`) and is refused on any difference (:class:`ContractChangeError`) unless
``PromoteConfig.allow_contract_change`` says to replace it. The first model under a name has no
contract to keep.

:func:`read_contract` reads a SavedModel's: the signatures from its ``saved_model.pb`` as
TensorFlow Serving's metadata names them (nothing is loaded or restored), the class names from
the model's task (its batch-prediction facet, ``Prediction.load``: what the SavedModel itself
records); a task that cannot say gives None, and class names are then not compared. TensorFlow is
imported inside it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from trainer import records, storage
from trainer.tasks import Task, TaskError
from trainer.tasks.base import prediction_of

log = logging.getLogger(__name__)

SAVED_MODEL_PB = "saved_model.pb"
REMEDY = "promote it under another model name, or set allow_contract_change: true to replace the contract"
SHOWN_CLASSES = 20
"""Class names a refusal lists before it says how many there are in all."""
SHOWN_MOVES = 4
"""Classes whose name changed at their index that a refusal names before ``...``."""


class ContractChangeError(ValueError):
    """A candidate would change what a stage serves under a model name: the change and the way out, one line.

    Attributes:
        change: the line of :func:`contract_change`.
    """

    def __init__(self, change: str):
        super().__init__(f"{change}; {REMEDY}")
        self.change = change


@dataclasses.dataclass(frozen=True)
class SignatureContract(records.Record):
    """One serving signature as clients see it (``signatures.<name>`` of a contract).

    Attributes:
        inputs: input name -> ``"<dtype> [<dims>]"`` as TensorFlow Serving's metadata gives them
            (``DT_STRING [-1]``, ``DT_FLOAT [-1, 8, 8, 1]``; -1 is any size).
        outputs: the output keys, sorted.
        extra: keys this code does not know, kept as they were.
    """

    _mode = records.FORWARD_COMPATIBLE
    _what = "signature contract"

    inputs: Mapping[str, str]
    outputs: tuple[str, ...]
    extra: Mapping[str, Any] = records.extra_field()


@dataclasses.dataclass(frozen=True)
class ServingContract(records.Record):
    """What clients of a served model rely on (``contract`` of a stage history entry).

    Attributes:
        signatures: signature name -> its inputs and output keys (``serving_default``,
            ``serving_tensors``).
        class_names: the classes in class-index order, as the SavedModel records them; None (left
            out of the JSON) where the model's task cannot say.
        extra: keys this code does not know, kept as they were.
    """

    _mode = records.FORWARD_COMPATIBLE
    _what = "serving contract"
    _omit_empty = ("class_names",)

    signatures: Mapping[str, SignatureContract]
    class_names: Optional[tuple[str, ...]] = None
    extra: Mapping[str, Any] = records.extra_field()


def _tensor_spec(info: Any) -> str:
    """A signature_def's TensorInfo as ``"<dtype> [<dims>]"``."""
    from tensorflow.core.framework import types_pb2

    dtype = types_pb2.DataType.Name(info.dtype)
    if info.tensor_shape.unknown_rank:
        return f"{dtype} [unknown rank]"
    return f"{dtype} [{', '.join(str(d.size) for d in info.tensor_shape.dim)}]"


def read_signatures(saved_model_dir: str) -> dict[str, SignatureContract]:
    """Every serving signature of a SavedModel (local or gs://), read from its ``saved_model.pb``.

    Raises:
        FileNotFoundError: the folder holds no ``saved_model.pb``.
    """
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(storage.read_bytes(storage.join(saved_model_dir, SAVED_MODEL_PB)))
    signatures = proto.meta_graphs[0].signature_def if proto.meta_graphs else {}
    return {
        name: SignatureContract(
            inputs={key: _tensor_spec(info) for key, info in sorted(sig.inputs.items())},
            outputs=tuple(sorted(sig.outputs)),
        )
        for name, sig in sorted(signatures.items())
        if not name.startswith("__")  # __saved_model_init_op: no signature a client calls
    }


def read_class_names(saved_model_dir: str, task: Task) -> Optional[tuple[str, ...]]:
    """The classes a SavedModel records, as its task reads them; None where the task cannot say."""
    try:
        return tuple(prediction_of(task).load(saved_model_dir).class_names)
    except TaskError as err:
        log.info("the class names of %s are not compared: %s", saved_model_dir, err)
        return None


def read_contract(saved_model_dir: str, task: Task) -> Optional[ServingContract]:
    """The contract of a SavedModel (local or gs://): its signatures and its task's class names.

    None where its ``saved_model.pb`` is no SavedModel: nothing could serve it, so it promises
    nothing (and its promotion fails at the serving checks).

    Raises:
        FileNotFoundError: the folder holds no ``saved_model.pb``.
    """
    from google.protobuf.message import DecodeError

    try:
        signatures = read_signatures(saved_model_dir)
    except DecodeError as err:
        log.warning("%s/%s is no SavedModel (%s): it has no contract to compare", saved_model_dir, SAVED_MODEL_PB, err)
        return None
    return ServingContract(signatures=signatures, class_names=read_class_names(saved_model_dir, task))


def _listed(names: Sequence[str]) -> str:
    shown = ", ".join(names[:SHOWN_CLASSES])
    return f"[{shown}, ... ({len(names)} in all)]" if len(names) > SHOWN_CLASSES else f"[{shown}]"


def _class_moves(served: Sequence[str], candidate: Sequence[str]) -> str:
    """How the candidate's classes differ: the indices whose name changed, and the names new or gone."""
    moves = [f"class {i} {a!r} -> {b!r}" for i, (a, b) in enumerate(zip(served, candidate, strict=False)) if a != b]
    said = ", ".join(moves[:SHOWN_MOVES]) + (", ..." if len(moves) > SHOWN_MOVES else "")
    if sorted(served) == sorted(candidate):
        return f"the same classes in another order: {said}"
    new = [n for n in candidate if n not in served]
    gone = [n for n in served if n not in candidate]
    parts = [said] if said else []
    if len(moves) > len(new) or len(served) != len(candidate):  # not renames alone: say what came and went
        parts += [f"new: {', '.join(new)}"] if new else []
        parts += [f"gone: {', '.join(gone)}"] if gone else []
    if len(served) != len(candidate):
        parts.append(f"{len(served)} classes -> {len(candidate)}")
    return "; ".join(parts)


def _class_difference(served: ServingContract, candidate: ServingContract) -> list[str]:
    a, b = served.class_names, candidate.class_names
    if a is None or b is None or tuple(a) == tuple(b):
        return []
    return [f"with classes {_listed(a)}; the candidate has {_listed(b)} ({_class_moves(a, b)})"]


def _inputs(signature: SignatureContract) -> str:
    return ", ".join(f"{name} {spec}" for name, spec in signature.inputs.items()) or "nothing"


def _signature_differences(served: ServingContract, candidate: ServingContract) -> list[str]:
    found = []
    for name in sorted({*served.signatures, *candidate.signatures}):
        ours, theirs = served.signatures.get(name), candidate.signatures.get(name)
        if theirs is None:
            found.append(f"with signature {name}; the candidate has none (it has {', '.join(candidate.signatures)})")
        elif ours is None:
            found.append(f"without signature {name}; the candidate adds it")
        else:
            if dict(ours.inputs) != dict(theirs.inputs):
                found.append(f"with {name} taking {_inputs(ours)}; the candidate takes {_inputs(theirs)}")
            if tuple(ours.outputs) != tuple(theirs.outputs):
                found.append(
                    f"with {name} returning [{', '.join(ours.outputs)}]; the candidate returns "
                    f"[{', '.join(theirs.outputs)}]"
                )
    return found


def contract_change(stage: str, model_name: str, served: ServingContract, candidate: ServingContract) -> Optional[str]:
    """The one line that names how ``candidate`` differs from what ``stage`` serves as ``model_name``
    (what a refusal says before :data:`REMEDY`, and what a stage entry's ``contract_change`` keeps).

    The same classes in the same order, the same signatures with the same inputs and the same
    output keys are the same contract: None. Class names are compared only where both contracts
    hold them.
    """
    differences = [*_class_difference(served, candidate), *_signature_differences(served, candidate)]
    if not differences:
        return None
    return f"{stage} serves {model_name!r} {'; and '.join(differences)}"
