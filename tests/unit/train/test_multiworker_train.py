"""Two real TensorFlow workers on loopback (the local launcher): the same weights on both, the same
as one process with the same global batch; one killed after the first checkpoint, the set
restarting and resuming to the same weights on both; and two detector workers, whose weights and
batch-norm statistics agree across the set."""

import json
import os
import sys
import tempfile
import textwrap

import numpy as np
import pytest

from components.launchers.training import run_training
from tests.comparable import make_comparable
from tests.datasets import write_test_dataset
from trainer.config import TrainConfig

pytestmark = pytest.mark.slow

# Unshuffled (one shard, a shuffle buffer of 1), float32, 2 epochs x 4 steps of a global batch of 16.
BASE = dict(epochs=2, validation_steps=1, shuffle_buffer=1, precision="float32", checkpoint_every_steps=2)
TWO_WORKERS = TrainConfig(workers=2, launcher="local", batch_size_per_replica=8, **BASE)

# The worker, as trainer.worker runs it, made comparable (tests/comparable.py), with every worker's
# final weights saved. With LTP_TEST_DIE=1, worker 1 kills itself once, after the chief's first
# checkpoint.
WORKER = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    from tests.comparable import make_comparable
    make_comparable()
    from trainer import callbacks, train as T
    out, index = os.environ["LTP_TEST_OUT"], os.environ["LTP_WORKER_INDEX"]
    open(f"{out}/tmpdir-{index}", "w").write(os.environ["TMPDIR"])
    export = T.export
    def saving_export(model, *args):
        np.savez(f"{out}/weights-{index}.npz", *model.get_weights())
        export(model, *args)
    T.export = saving_export
    if os.environ.get("LTP_TEST_DIE") and index == "1" and not os.path.exists(f"{out}/died"):
        save = callbacks.Checkpointer.save
        def dying_save(self, step):
            save(self, step)
            while not os.path.exists(f"{out}/model/checkpoints/checkpoint"):
                time.sleep(0.05)
            open(f"{out}/died", "w").close()
            os.kill(os.getpid(), 9)
        callbacks.Checkpointer.save = dying_save
    from trainer.worker import main
    sys.exit(main(sys.argv[1:] + ["--log-level", "WARNING"]))
    """
)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return str(write_test_dataset(tmp_path_factory.mktemp("mw") / "ds", {"train": 64, "validation": 16}, shards=1))


def _weights(path):
    with np.load(path) as f:
        return [f[k] for k in sorted(f.files, key=lambda k: int(k.split("_")[1]))]


def _one_process(dataset, out, monkeypatch):
    """The same training in this process with the same global batch (16), made comparable as the workers are."""
    from trainer import train as T

    export = T.export
    make_comparable(monkeypatch.setattr)
    monkeypatch.setattr(
        T, "export", lambda model, *a: (np.savez(out / "weights.npz", *model.get_weights()), export(model, *a))
    )
    T.train(dataset, str(out), TrainConfig(batch_size_per_replica=16, **BASE))
    return json.loads((out / "training.json").read_text())


def _two_workers(dataset, out, monkeypatch, **env):
    monkeypatch.setenv("LTP_TEST_OUT", str(out))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return run_training(dataset, str(out / "model"), TWO_WORKERS, worker_command=(sys.executable, "-c", WORKER))


def _finished_set(summary, tmp_path):
    """What every two-worker classifier set leaves (its record, model, card; the same weights on
    both workers), asserted; returns the training record and the chief's weights.
    """
    assert (summary.workers, summary.replicas, summary.strategy) == (2, 2, "MultiWorkerMirroredStrategy")
    assert (summary.global_batch_size, summary.steps, summary.steps_per_execution) == (16, 8, 1)
    recorded = json.loads((tmp_path / "model" / "training.json").read_text())
    assert recorded["workers"] == 2 and recorded["replicas"] == 2
    assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(recorded["history"][-1])
    assert (tmp_path / "model" / "saved_model" / "saved_model.pb").exists()
    assert "2 replicas over 2 workers" in (tmp_path / "model" / "model_card.md").read_text()
    assert not (tmp_path / "model" / "checkpoints" / "worker-job.yaml").exists()  # the set's job file went
    chief, other = _weights(tmp_path / "weights-0.npz"), _weights(tmp_path / "weights-1.npz")
    for a, b in zip(chief, other, strict=True):
        np.testing.assert_array_equal(a, b)
    return recorded, chief


def test_two_workers_train_the_weights_one_process_trains(dataset, tmp_path, monkeypatch):
    summary = _two_workers(dataset, tmp_path, monkeypatch)
    recorded, chief = _finished_set(summary, tmp_path)
    assert [row["epoch"] for row in recorded["history"]] == [1, 2]

    single = _one_process(dataset, tmp_path / "one", monkeypatch)
    for a, b in zip(chief, _weights(tmp_path / "one" / "weights.npz"), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert recorded["learning_rate"] == single["learning_rate"]
    assert recorded["train_loss"] == pytest.approx(single["train_loss"], rel=1e-4)


def test_a_killed_worker_restarts_the_set_which_resumes_to_the_same_weights_on_both(dataset, tmp_path, monkeypatch):
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # where the launcher makes the set's
    summary = _two_workers(dataset, tmp_path, monkeypatch, LTP_TEST_DIE="1")
    assert (tmp_path / "died").exists()  # worker 1 died after the chief's first checkpoint
    recorded, _ = _finished_set(summary, tmp_path)
    assert recorded["resumed_from_step"] >= 2 and [row["epoch"] for row in recorded["history"]][-1] == 2
    # The workers' temporary folders (the killed one's too) were in the set's, which is gone.
    assert (tmp_path / "tmpdir-1").read_text().startswith(str(tmp_path / "tmp" / "ltp-workers-"))
    assert os.listdir(tmp_path / "tmp") == []


def test_two_detector_workers_agree_on_every_weight_and_batch_norm_statistic(tmp_path, monkeypatch):
    from components.convert import convert
    from components.convert.config import ConvertConfig
    from components.image_input import shapes

    coco = shapes.generate(tmp_path / "coco", count=48, seed=3)
    convert(ConvertConfig(source=str(coco), workers=1), str(tmp_path / "ds"))
    # Four steps of a global batch of 4 at 64 px, a checkpoint every two: the detector's loss,
    # metrics and sync batch norm across the set (its moving statistics must agree too), then every
    # worker's export.
    config = TrainConfig(
        model="retinanet", workers=2, launcher="local", epochs=1, steps_per_epoch=4, batch_size_per_replica=2,
        validation_steps=1, shuffle_buffer=1, precision="float32", checkpoint_every_steps=2,
        model_options={"image_size": 64},
    )  # fmt: skip
    monkeypatch.setenv("LTP_TEST_OUT", str(tmp_path))
    model = tmp_path / "model"
    summary = run_training(str(tmp_path / "ds"), str(model), config, worker_command=(sys.executable, "-c", WORKER))
    assert (summary.task, summary.workers, summary.replicas, summary.steps) == ("detection", 2, 2, 4)
    assert (model / "saved_model" / "saved_model.pb").exists()
    chief, other = _weights(tmp_path / "weights-0.npz"), _weights(tmp_path / "weights-1.npz")
    assert len(chief) > 50  # the whole detector: backbone, FPN, both heads
    for a, b in zip(chief, other, strict=True):
        np.testing.assert_array_equal(a, b)
