"""The converter's core on built-in sources and the one-line errors of a bad image folder."""

import json
import os

import pytest

from components.convert import ConvertError, convert
from components.convert.config import ConvertConfig
from trainer.tfrecord_wire import iter_records
from trainer.tfrecords import load_dataset_info


def _records(folder, split):
    out = []
    for path in load_dataset_info(str(folder)).shard_paths(split):
        out.extend(iter_records(open(path, "rb").read()))
    return out


def test_fashion_mnist_subset_has_three_splits_and_the_manifest_of_the_contract(tmp_path):
    manifest = convert(ConvertConfig(source="fashion-mnist", limit_per_split=60, workers=1), str(tmp_path))
    assert list(manifest["splits"]) == ["train", "validation", "test"]
    assert {s: v["count"] for s, v in manifest["splits"].items()} == {"train": 60, "validation": 60, "test": 60}
    assert manifest["classes"][0] == "T-shirt/top" and manifest["classes"][9] == "Ankle boot"
    assert manifest["image"] == {"height": 28, "width": 28, "channels": 1}
    assert manifest["source"]["format"] == "fashion-mnist"
    shard = manifest["splits"]["train"]["shards"][0]
    assert shard["file"] == "train-00000-of-00001.tfrecord"
    assert os.path.getsize(tmp_path / shard["file"]) == shard["bytes"]
    assert sum(manifest["splits"]["test"]["class_counts"].values()) == 60
    assert json.load(open(tmp_path / "dataset.json"))["plan_key"] == manifest["plan_key"]
    # The test split comes from the t10k file, validation is carved out of the train file.
    keys = [r for r in _records(tmp_path, "test")]
    assert all(b"fashion-mnist:test:" in r for r in keys)
    assert all(b"fashion-mnist:train:" in r for r in _records(tmp_path, "validation"))


def test_same_input_same_bytes_and_rerun_is_a_noop(tmp_path):
    config = ConvertConfig(source="digits", limit_per_split=30, workers=1)
    first = convert(config, str(tmp_path / "a"))
    second = convert(config.replace(workers=2), str(tmp_path / "b"))
    sha = lambda m: [s["crc32c"] for v in m["splits"].values() for s in v["shards"]]  # noqa: E731
    assert sha(first) == sha(second)  # workers do not change the bytes
    mtime = os.path.getmtime(tmp_path / "a" / "dataset.json")
    lines = []
    again = convert(config, str(tmp_path / "a"), log=lines.append)
    assert again["plan_key"] == first["plan_key"]
    assert os.path.getmtime(tmp_path / "a" / "dataset.json") == mtime
    assert "up to date" in lines[0]


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda p: p / "missing", "source not found: .*expected an image folder"),
        (lambda p: p, "no images in .*the folder is empty; expected one subfolder per class"),
        (
            lambda p: (p / "docs").mkdir() or (p / "docs" / "a.txt").write_text("x") and p,
            r"no images in .*found 1 files \(extensions: 1 .txt.*expected .*/<class>/<image>",
        ),
    ],
    ids=["missing", "empty", "no-images"],
)
def test_bad_image_folder_fails_in_one_line_and_writes_nothing(tmp_path, setup, message):
    src = tmp_path / "src"
    src.mkdir()
    source = setup(src)
    out = tmp_path / "out"
    with pytest.raises(ConvertError, match=message) as err:
        convert(ConvertConfig(source=str(source)), str(out))
    assert "\n" not in str(err.value)
    assert not out.exists()


def test_progress_lines_say_done_total_rate_and_eta():
    from components.convert.write import Progress

    lines = []
    progress = Progress(total=200, every_s=0.0, log=lines.append)
    progress.add(50)
    progress.finish()
    assert lines[0].startswith("convert: 50/200 images (25%), ")
    assert "img/s, ETA " in lines[0]
    assert lines[-1].startswith("convert: 50/200")


def test_command_line_converts_and_reports_bad_input_in_one_line(tmp_path, capsys):
    from components.convert.__main__ import main

    assert main(["digits", str(tmp_path / "d"), "--limit-per-split", "10", "--workers", "1"]) == 0
    assert "train=10, validation=10, test=10" in capsys.readouterr().out
    assert main([str(tmp_path / "missing"), str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: source not found:") and "\n" not in err
