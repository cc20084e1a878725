"""Worker processes writing chunks in place: the same bytes as one process, and clean failures."""

import os

import google_crc32c
import pytest

from components.convert import convert, pool
from components.convert.config import ConvertConfig
from components.convert.plan import make_plan
from trainer.tfrecord_wire import crc32c_b64, iter_records

# Fashion-MNIST in three splits, several shards each, each shard written as several chunks.
CONFIG = ConvertConfig(source="fashion-mnist", limit_per_split=2500, target_shard_mb=0.4)


def _files(folder):
    return {n: (folder / n).read_bytes() for n in sorted(os.listdir(folder)) if n.endswith(".tfrecord")}


def test_workers_write_the_same_bytes_as_one_process(tmp_path):
    plan = make_plan(CONFIG)
    assert all(len(shards) >= 2 for shards in plan.splits.values())
    one = convert(CONFIG.replace(workers=1), str(tmp_path / "one"))
    three = convert(CONFIG.replace(workers=3), str(tmp_path / "three"))
    assert _files(tmp_path / "three") == _files(tmp_path / "one")
    assert one["splits"] == three["splits"]
    for info in three["splits"].values():
        for shard in info["shards"]:
            data = (tmp_path / "three" / shard["file"]).read_bytes()
            # The checksum the parent combined from the workers' chunks is the file's, as GCS computes it.
            assert shard["crc32c"] == crc32c_b64(google_crc32c.value(data))
            assert len(list(iter_records(data))) == shard["count"]
    assert sorted(n for n in os.listdir(tmp_path / "three") if n.startswith(".")) == []


def _fail_on(monkeypatch, key, action):
    """Makes the workers (forked after this) fail on the chunk that holds ``key``."""
    real = pool.encode_chunk

    def encode(items, opts):
        if any(it.key == key for it in items):
            action()
        return real(items, opts)

    monkeypatch.setattr(pool, "encode_chunk", encode)


def _boom():
    raise MemoryError("simulated")


@pytest.mark.parametrize(
    "action, message",
    [(_boom, r"(?s)failed on chunk \d+:\n.*MemoryError: simulated"), (lambda: os._exit(3), r"died \(exit code 3\)")],
    ids=["raises", "dies"],
)
def test_a_failing_worker_stops_the_conversion_and_a_rerun_completes_it(tmp_path, monkeypatch, action, message):
    config = CONFIG.replace(workers=2)
    plan = make_plan(config)
    victim = plan.splits["train"][1].items[10].key  # inside the second shard of train
    out = tmp_path / "out"
    _fail_on(monkeypatch, victim, action)
    with pytest.raises(pool.WorkerError, match=message):
        convert(config, str(out))
    assert not (out / "dataset.json").exists()
    assert sorted(n for n in os.listdir(out) if n.startswith(".")) == []  # no temporary file left behind
    assert plan.splits["train"][1].file not in os.listdir(out)  # the shard being written is not published

    monkeypatch.undo()
    resumed = convert(config, str(out))
    clean = convert(config, str(tmp_path / "clean"))
    assert _files(out) == _files(tmp_path / "clean")
    assert resumed["splits"] == clean["splits"]


def test_spawned_workers_where_fork_is_unavailable(tmp_path, monkeypatch):
    # macOS and Windows start workers with spawn: the chunks travel pickled, the arrays are re-read.
    monkeypatch.setattr(pool, "FORK", False)
    config = ConvertConfig(source="fashion-mnist", limit_per_split=600, target_shard_mb=0.1)
    spawned = convert(config.replace(workers=2), str(tmp_path / "spawned"))
    monkeypatch.undo()
    one = convert(config.replace(workers=1), str(tmp_path / "one"))
    assert _files(tmp_path / "spawned") == _files(tmp_path / "one")
    assert spawned["splits"] == one["splits"]
