"""Batch prediction from and to gs:// against a real local GCS emulator: images listed and read
through google-cloud-storage (TensorFlow's own gs:// reader ignores emulators), predictions written
there, a re-run reusing them."""

import json

import pytest

from components.batch_predict.__main__ import main
from tests.eval_bench_fixtures import tiny_assets
from tests.gcs_emulator import running_emulator
from trainer import storage

pytestmark = pytest.mark.integration

BUCKET = "photos"


@pytest.fixture(scope="module")
def gcs():
    with running_emulator(BUCKET):
        yield f"gs://{BUCKET}"


def test_a_gcs_prefix_is_scored_into_gcs(gcs, capsys):
    from trainer.evaluate import read_encoded_split

    assets = tiny_assets()
    encoded, _, _ = read_encoded_split(assets["dataset"], "test", 12)
    for i, data in enumerate(encoded):
        storage.write_bytes(f"{gcs}/in/{'ab'[i % 2]}/{i:02d}.png", data)
    storage.write_bytes(f"{gcs}/in/notes.txt", b"not an image")
    args = ["run", "--data", f"{gcs}/in", "--output-uri", f"{gcs}/out", "--model-dir", assets["model"],
            "--images-per-shard", "5"]  # fmt: skip
    assert main(args) == 0
    summary = storage.read_json(f"{gcs}/out/summary.json")
    assert (summary["scored"], summary["shards"], summary["complete"]) == (12, 3, True)
    lines = [json.loads(x) for i in range(3) for x in storage.read_text(f"{gcs}/out/shard-{i:05d}.jsonl").splitlines()]
    assert sorted(r["path"] for r in lines) == sorted(f"{'ab'[i % 2]}/{i:02d}.png" for i in range(12))
    first = storage.stat(f"{gcs}/out/shard-00001.json").version
    capsys.readouterr()
    assert main(args) == 0  # the same prediction again: nothing scored again
    assert storage.stat(f"{gcs}/out/shard-00001.json").version == first
