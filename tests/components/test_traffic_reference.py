"""The traffic reference is made from the evaluation's own answers, and is the one the served path makes.

The evaluation scores the split through ``serving_default`` in process; the reference used to be
made by a second pass over the same images through the served path (``components.serving.model``,
base64 bodies). Both run the same signature on the same batches (256 images, the split smaller),
so the answers are the same float32 values and the references are equal, byte for byte.
"""

import base64
import json
import os
from pathlib import Path

import numpy as np
import pytest

from components.evaluate.run import REFERENCE_IMAGES, run_evaluation, served_answers, write_traffic_reference
from tests.detection_fixtures import tiny_detection
from tests.eval_bench_fixtures import tiny_assets
from trainer.config import EvaluateConfig

pytestmark = pytest.mark.slow


def _model_copy(model_dir: str, folder: Path) -> str:
    """The model folder's SavedModel (linked) and training.json (a bare export has none: a classifier's);
    the references are written beside them, not in the shared folder."""
    folder.mkdir()
    os.symlink(os.path.join(model_dir, "saved_model"), folder / "saved_model")
    if Path(model_dir, "training.json").exists():
        (folder / "training.json").write_bytes(Path(model_dir, "training.json").read_bytes())
    return str(folder)


def _rest_answers(model_dir: str, images: list[bytes]) -> list[dict]:
    """The server's REST answer on the images, as a client reads it (its JSON bytes, parsed)."""
    from components.serving.model import Model
    from components.serving.rest import _encode_json
    from components.serving.traffic import answer_rows

    model = Model("reference", 1, Path(model_dir, "saved_model"), 256, None)
    body = {"instances": [{"b64": base64.b64encode(b).decode()} for b in images]}
    return answer_rows(_encode_json(model.predict(body)))


def _shape(value):
    """The JSON shape of a value: types, and the length of lists."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [len(value), *sorted({json.dumps(_shape(v)) for v in value})]
    return type(value).__name__


@pytest.mark.parametrize("assets", [tiny_assets, tiny_detection], ids=["classifier", "detector"])
def test_the_reference_from_the_evaluation_s_answers_is_the_served_path_s(tmp_path, assets):
    paths = assets()
    model, dataset = _model_copy(paths["model"], tmp_path / "model"), paths["dataset"]
    outcome = run_evaluation(model, dataset, EvaluateConfig())
    kept = outcome.answers
    count = int(outcome.metrics["num_examples"])
    assert kept is not None and len(kept.images) == len(kept.answers) == min(count, REFERENCE_IMAGES)
    # the same images, in the split's order, as the served path reads them
    images, _ = served_answers(model, dataset, "test")
    assert kept.images == images
    # each answer has the JSON shape of the server's answer, and its values, to float32
    rest = _rest_answers(model, images)
    assert [_shape(a) for a in kept.answers] == [_shape(dict(a)) for a in rest]
    for ours, theirs in zip(kept.answers, rest, strict=True):
        for key, value in ours.items():
            if isinstance(value, str) or (isinstance(value, list) and value and isinstance(value[0], str)):
                assert value == theirs[key]
            else:
                np.testing.assert_array_equal(np.float32(value), np.float32(theirs[key]), err_msg=key)
    # the reference, written both ways: equal
    second_pass = json.loads(Path(write_traffic_reference(model, dataset, "test")).read_text())
    from_evaluation = json.loads(Path(write_traffic_reference(model, dataset, "test", kept)).read_text())
    assert from_evaluation == second_pass and from_evaluation["count"] == len(images)
