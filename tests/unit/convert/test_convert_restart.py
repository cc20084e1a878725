"""Kill-and-restart safety: a killed conversion resumes into the same dataset, never a half one."""

import os
import signal
import subprocess
import sys
import time

import pytest

from components.convert import convert
from components.convert.config import ConvertConfig

CONFIG = dict(source="fashion-mnist", limit_per_split=1500, target_shard_mb=0.05, workers=1)


def _shas(manifest):
    return {s["file"]: s["crc32c"] for v in manifest["splits"].values() for s in v["shards"]}


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_killed_conversion_resumes_to_the_same_dataset(tmp_path, workers):
    out = tmp_path / "killed"
    config = {**CONFIG, "workers": workers}
    code = (
        "from components.convert import convert; from components.convert.config import ConvertConfig; "
        f"convert(ConvertConfig(**{config!r}), {str(out)!r})"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=os.getcwd())
    deadline = time.monotonic() + 60
    markers = out / "_convert"
    while time.monotonic() < deadline and not (markers.exists() and len(os.listdir(markers)) >= 2):
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (out / "dataset.json").exists(), "the conversion finished before it could be killed"
    done_before = len(os.listdir(markers))

    lines = []
    resumed = convert(ConvertConfig(**config), str(out), log=lines.append)
    assert any("already done" in line for line in lines), lines
    clean = convert(ConvertConfig(**CONFIG), str(tmp_path / "clean"))
    assert _shas(resumed) == _shas(clean)
    assert done_before >= 2
    leftovers = sorted(n for n in os.listdir(out) if n.startswith("."))
    assert leftovers == [] and not markers.exists()
    assert sorted(n for n in os.listdir(out) if n.endswith(".tfrecord")) == sorted(_shas(clean))


def test_changed_config_replaces_the_dataset_and_its_stale_shards(tmp_path):
    many = convert(ConvertConfig(source="digits", limit_per_split=60, target_shard_mb=0.005, workers=1), str(tmp_path))
    assert len(many["splits"]["train"]["shards"]) > 1
    one = convert(ConvertConfig(source="digits", limit_per_split=60, workers=1), str(tmp_path))
    assert [s["file"] for s in one["splits"]["train"]["shards"]] == ["train-00000-of-00001.tfrecord"]
    files = sorted(n for n in os.listdir(tmp_path) if ".tfrecord" in n)
    assert files == sorted(_shas(one))
