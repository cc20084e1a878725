"""``TrainConfig.warm_start``: a model starts from an earlier training's ``model.keras``; a misfit is one line."""

import numpy as np
import pytest

from trainer.config import TrainConfig
from trainer.errors import TrainingError
from trainer.training.setup import warm_start


def _cnn(classes):
    from trainer.tasks.classification.model import build_classifier

    return build_classifier("mnist_cnn", (28, 28, 1), [str(c) for c in range(classes)], {})


def test_a_model_starts_from_a_model_folder_s_weights_and_refuses_what_does_not_fit(tmp_path):
    trained = _cnn(3)
    trained.save(tmp_path / "model.keras")
    fresh = _cnn(3)
    assert not all(np.array_equal(a, b) for a, b in zip(fresh.get_weights(), trained.get_weights(), strict=True))
    warm_start(fresh, str(tmp_path))
    assert all(np.array_equal(a, b) for a, b in zip(fresh.get_weights(), trained.get_weights(), strict=True))
    with pytest.raises(
        TrainingError, match=r"train.warm_start: .*model.keras does not fit this model \(.*\); start"
    ) as err:
        warm_start(_cnn(5), str(tmp_path))
    assert "\n" not in str(err.value)
    with pytest.raises(TrainingError, match=r"train.warm_start: no .*nowhere/model.keras; give a model folder"):
        warm_start(fresh, str(tmp_path / "nowhere"))


def test_warm_start_joins_the_fingerprint_only_when_set():
    plain = TrainConfig()
    assert "warm_start" in plain.to_dict() and plain.fingerprint() == TrainConfig(warm_start=None).fingerprint()
    assert TrainConfig(warm_start="gs://b/run/model").fingerprint() != plain.fingerprint()
