"""Image folders: every format and case of extension, bad files rejected with reasons, valid files
that TensorFlow cannot decode as stored converted so that every record decodes."""

import io
import json
import os

import numpy as np
import pytest
from PIL import Image

from components.convert import convert
from components.convert.config import ConvertConfig
from components.image_input import imaging
from trainer.tfrecord_wire import iter_records
from trainer.tfrecords import DatasetInfo


def _img(mode="RGB", size=(20, 16), seed=0):
    rng = np.random.default_rng(seed)
    if mode in ("L", "P"):
        arr = rng.integers(0, 255, (size[1], size[0]), dtype=np.uint8)
        im = Image.fromarray(arr, "L")
        return im.convert("P") if mode == "P" else im
    arr = rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    im = Image.fromarray(arr, "RGB")
    return im if mode == "RGB" else im.convert(mode)


def _save(im, fmt, **kw):
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _png16():
    arr = (np.arange(16 * 20, dtype=np.uint16).reshape(16, 20) * 200).astype(np.uint16)
    return _save(Image.fromarray(arr), "PNG")


def _animated_gif():
    frames = [_img("RGB", seed=i).convert("P") for i in range(3)]
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=50)
    return buf.getvalue()


GOOD = {
    "cat/a.jpg": lambda: _save(_img(), "JPEG"),
    "cat/B.JPEG": lambda: _save(_img(seed=1), "JPEG"),
    "cat/nested/deeper/c.Png": lambda: _save(_img(seed=2), "PNG"),
    "cat/gray.png": lambda: _save(_img("L"), "PNG"),
    "dog/still.gif": lambda: _save(_img("P"), "GIF"),
    "dog/d.bmp": lambda: _save(_img(), "BMP"),
}
CONVERTED = {
    "dog/cmyk.jpg": (lambda: _save(_img("CMYK"), "JPEG"), "CMYK JPEG"),
    "dog/palette.png": (lambda: _save(_img("P"), "PNG"), "palette PNG"),
    "dog/deep.png": (_png16, "16-bit PNG"),
    "dog/photo.webp": (lambda: _save(_img(), "WEBP"), "WebP"),
    "dog/anim.gif": (_animated_gif, "animated GIF"),
    "dog/pal8.bmp": (lambda: _save(_img("P"), "BMP"), "8-bit BMP (compression 0)"),
}
BAD = {
    "cat/truncated.jpg": (lambda: _save(_img(), "JPEG")[:300], "truncated JPEG"),
    "cat/truncated.png": (lambda: _save(_img(), "PNG")[:-30], "truncated PNG"),
    "cat/empty.jpg": (lambda: b"", "empty file"),
    "cat/liar.jpg": (lambda: _save(_img(), "PNG"), "extension says jpeg but the content is png"),
    "cat/text.png": (lambda: b"hello, not an image at all", "not an image"),
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    files = {**GOOD, **{k: v[0] for k, v in CONVERTED.items()}, **{k: v[0] for k, v in BAD.items()}}
    for rel, make in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(make())
    (root / "cat" / ".DS_Store").write_bytes(b"junk")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "x.jpg").write_bytes(_save(_img(), "JPEG"))
    (root / "dog" / "notes.txt").write_text("not an image")
    locked = root / "cat" / "locked.jpg"
    locked.write_bytes(_save(_img(), "JPEG"))
    locked.chmod(0)
    (root / "cat" / "gone.jpg").symlink_to(root / "nowhere.jpg")  # unreadable even for root
    return root


@pytest.fixture(scope="module")
def converted(folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    manifest = convert(ConvertConfig(source=str(folder), splits={"train": 1.0}, workers=2), str(out))
    return out, manifest


def test_folder_counts_classes_ignored_and_rejections(converted):
    out, manifest = converted
    assert manifest["classes"] == ["cat", "dog"]
    unreadable = 0 if os.geteuid() == 0 else 1  # root reads a chmod 0 file anyway
    assert manifest["splits"]["train"]["count"] == len(GOOD) + len(CONVERTED) + 1 - unreadable
    assert manifest["ignored"] == {"hidden": 2, "not_image": 1}
    assert manifest["converted"] == {reason: 1 for _, reason in CONVERTED.values()}
    rejected = [json.loads(line) for line in open(out / "rejected.jsonl")]
    by_key = {r["key"]: r["reason"] for r in rejected}
    for rel, (_, reason) in BAD.items():
        assert reason in by_key[rel], (rel, by_key.get(rel))
    assert by_key["cat/gone.jpg"].startswith("unreadable: No such file")
    assert manifest["rejected"] == len(BAD) + 1 + unreadable
    assert manifest["rejected_reasons"]["truncated JPEG"] == 1
    assert manifest["image"] is None  # sizes and channels differ


def test_every_record_decodes_with_tensorflow(converted):
    tf = pytest.importorskip("tensorflow")
    from trainer.tfrecords import decode_example

    out, manifest = converted
    shard = manifest["splits"]["train"]["shards"][0]["file"]
    seen = set()
    for record in iter_records((out / shard).read_bytes()):
        ex = decode_example(tf.constant(record))
        # expand_animations=False: TensorFlow returns every GIF, even a still one, as 4-D otherwise.
        image = tf.io.decode_image(ex["image/encoded"], expand_animations=False)
        assert image.shape.rank == 3, ex["image/source_key"]
        assert image.shape[2] == ex["image/channels"] or ex["image/format"] == b"gif"
        assert image.shape[0] == ex["image/height"] and image.shape[1] == ex["image/width"]
        assert ex["image/format"].numpy().decode() in ("png", "jpeg", "gif", "bmp")
        seen.add(ex["image/source_key"].numpy().decode())
    assert set(CONVERTED) <= seen and set(GOOD) <= seen


def test_verify_reads_everything_back(converted):
    pytest.importorskip("tensorflow")
    from components.convert import verify

    out, manifest = converted
    report = verify(str(out))
    assert report["records"] == manifest["splits"]["train"]["count"]


def test_verify_catches_a_modified_shard(converted, tmp_path):
    pytest.importorskip("tensorflow")
    import shutil

    from components.convert import VerifyError, verify

    out, manifest = converted
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    shard = copy / manifest["splits"]["train"]["shards"][0]["file"]
    data = bytearray(shard.read_bytes())
    data[-10] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(VerifyError, match="crc32c differs"):
        verify(str(copy))


def test_inspect_reads_sizes_from_headers():
    info = imaging.inspect(_save(_img(size=(33, 21)), "JPEG"), "jpeg")
    assert (info.format, info.height, info.width, info.channels, info.convert) == ("jpeg", 21, 33, 3, None)
    assert imaging.inspect(_save(_img("L", size=(5, 7)), "PNG")).channels == 1
    assert imaging.inspect(_save(_img(size=(5, 7)), "BMP")).height == 7


@pytest.mark.parametrize("mode", ["crop", "pad"])
def test_resize_gives_the_requested_size(folder, tmp_path, mode):
    manifest = convert(
        ConvertConfig(source=str(folder), splits={"train": 1.0}, resize=(12, 10), resize_mode=mode, workers=1),
        str(tmp_path),
    )
    assert manifest["image"] == {"height": 12, "width": 10, "channels": 3}


def test_the_trainer_reads_a_resized_folder_with_every_kind_of_image(folder, tmp_path):
    pytest.importorskip("tensorflow")
    from trainer.data import make_dataset
    from trainer.tasks import get_task

    config = ConvertConfig(source=str(folder), splits={"train": 1.0}, resize=(16, 16), compression="GZIP")
    manifest = convert(config.replace(workers=2), str(tmp_path))
    count = manifest["splits"]["train"]["count"]
    images, labels = next(
        iter(make_dataset(str(tmp_path), "train", batch_size=64, training=False, task=get_task("classification")))
    )
    assert images.shape == (count, 16, 16, 3)
    assert sorted(set(labels.numpy().tolist())) == [0, 1]


def test_a_written_shard_is_byte_identical_to_tfrecordwriter_output(converted, tmp_path):
    tf = pytest.importorskip("tensorflow")
    out, manifest = converted
    shard = (out / manifest["splits"]["train"]["shards"][0]["file"]).read_bytes()
    path = str(tmp_path / "tf.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for record in iter_records(shard):
            writer.write(record)
    assert open(path, "rb").read() == shard


def test_empty_class_folders_are_warned_about_counted_and_left_out(tmp_path, caplog, capsys):
    from components.convert.__main__ import main
    from components.convert.run import summarize

    src = tmp_path / "src"
    for cls in ("cat", "dog"):
        (src / cls).mkdir(parents=True)
        for i in range(3):
            (src / cls / f"{i}.png").write_bytes(_save(_img(seed=i), "PNG"))
    (src / "bird").mkdir()  # no files at all
    (src / "fish").mkdir()
    (src / "fish" / "notes.txt").write_text("no images here")  # files, but none an image
    (src / ".cache").mkdir()  # hidden: not a class folder
    config = ConvertConfig(source=str(src), splits={"train": 1.0}, workers=1)
    with caplog.at_level("WARNING", logger="components.image_input.sources"):
        manifest = convert(config, str(tmp_path / "out"))
    assert manifest["classes"] == ["cat", "dog"]  # a folder without images is no class
    assert manifest["empty_classes"] == ["bird", "fish"]
    warning = " ".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert f"{src}/bird" in warning and f"{src}/fish" in warning and "2 class folder(s) hold no images" in warning
    assert ".cache" not in warning
    metadata, metrics = summarize(DatasetInfo.from_json(manifest), str(tmp_path / "out"), verify=False, seconds=1.0)
    assert metrics["empty_classes"] == 2.0 and metadata["empty_classes"] == ["bird", "fish"]
    # Declared classes stay, with 0 images, and are reported the same way.
    declared = convert(config.replace(classes=("bird", "cat", "dog")), str(tmp_path / "declared"))
    assert declared["classes"] == ["bird", "cat", "dog"] and declared["empty_classes"] == ["bird"]
    assert declared["splits"]["train"]["class_counts"] == {"bird": 0, "cat": 3, "dog": 3}
    capsys.readouterr()
    assert main([str(src), str(tmp_path / "cli"), "--workers", "1"]) == 0
    assert "2 empty class folders: bird, fish" in capsys.readouterr().out


def test_an_empty_class_folder_added_later_reaches_the_manifest(tmp_path):
    src = tmp_path / "src"
    (src / "cat").mkdir(parents=True)
    (src / "cat" / "0.png").write_bytes(_save(_img(), "PNG"))
    config = ConvertConfig(source=str(src), splits={"train": 1.0}, workers=1)
    assert convert(config, str(tmp_path / "out"))["empty_classes"] == []
    (src / "dog").mkdir()
    lines = []
    manifest = convert(config, str(tmp_path / "out"), log=lines.append)
    assert manifest["empty_classes"] == ["dog"] and manifest["classes"] == ["cat"]
    assert "up to date" not in lines[0]  # the manifest would otherwise keep saying there is none
