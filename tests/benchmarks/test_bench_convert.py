"""Converter speed against the usual script, measured in the same run (make bench).

(a) the 60,000 Fashion-MNIST training images from IDX, PNG-encoded: this converter (worker
    processes, hand-framed records) against a single-process loop building one tf.train.Example per
    image and writing it with tf.io.TFRecordWriter, both using the same PNG encoder.
(b) ~2,000 generated JPEG photos (256x256 and larger), bytes kept, headers validated, checksums:
    against the same TensorFlow loop, and against the I/O ceiling of merely concatenating the files
    into one file; plus the share of the disk's raw write bandwidth reached.

Targets on 2 cores: (a) >= 1.8x the baseline; (b) >= 0.5x the concatenation rate. The figures are
printed, not asserted (timings on a shared machine are noisy).
"""

import io
import os
import resource
import time

import numpy as np
import pytest
from PIL import Image

from components.convert import convert
from components.convert.imaging import encode_png
from components.convert.sources import FASHION_MNIST_DIR, read_idx
from trainer.config import ConvertConfig

pytestmark = pytest.mark.benchmark


def _tf_baseline(out_path, items):
    """The script people copy: one Example at a time, TFRecordWriter, one process."""
    import tensorflow as tf

    def b(v):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))

    def i(v):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))

    t0 = time.perf_counter()
    n = 0
    with tf.io.TFRecordWriter(out_path) as w:
        for encoded, label, fmt, h, wd, c in items():
            ex = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "image/encoded": b(encoded),
                        "image/format": b(fmt),
                        "image/height": i(h),
                        "image/width": i(wd),
                        "image/channels": i(c),
                        "image/class/label": i(label),
                    }
                )
            )
            w.write(ex.SerializeToString())
            n += 1
    return n, time.perf_counter() - t0


def _cpu():
    """CPU seconds of this process and its finished children (the worker processes)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _report(name, n, seconds, nbytes, cpu=None):
    cpu_part = f", {cpu / n * 1e6:.0f} us CPU/img" if cpu is not None else ""
    print(f"  {name:<40} {n / seconds:>10.0f} img/s {nbytes / seconds / 1e6:>8.1f} MB/s ({seconds:.2f}s{cpu_part})")
    return n / seconds


def _load_note():
    # Other processes on a shared machine take cores from the workers: say how busy it was.
    return f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


def _raw_write_mb_s(folder, mb=256):
    block = os.urandom(8 << 20)
    path = os.path.join(folder, "raw.bin")
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(mb // 8):
            f.write(block)
        f.flush()
        os.fsync(f.fileno())
    seconds = time.perf_counter() - t0
    os.remove(path)
    return mb * (1 << 20) / seconds / 1e6


def _dir_bytes(folder):
    return sum(e.stat().st_size for e in os.scandir(folder) if e.name.endswith(".tfrecord"))


def test_bench_idx_to_png_records(tmp_path):
    src = tmp_path / "idx"
    src.mkdir()
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
        os.symlink(os.path.join(FASHION_MNIST_DIR, name), src / name)
    images = read_idx(str(src / "train-images-idx3-ubyte.gz"))
    labels = read_idx(str(src / "train-labels-idx1-ubyte.gz"))

    def items():
        for x, y in zip(images, labels, strict=True):
            yield encode_png(x), int(y), b"png", 28, 28, 1

    c0 = _cpu()
    n, base_s = _tf_baseline(str(tmp_path / "baseline.tfrecord"), items)
    base_cpu = _cpu() - c0
    base_bytes = os.path.getsize(tmp_path / "baseline.tfrecord")

    out = tmp_path / "ours"
    c0, t0 = _cpu(), time.perf_counter()
    manifest = convert(ConvertConfig(source=str(src), splits={"train": 1.0}), str(out), progress_every_s=1e9)
    ours_s, ours_cpu = time.perf_counter() - t0, _cpu() - c0
    assert manifest["splits"]["train"]["count"] == n == 60000

    print(f"\n(a) Fashion-MNIST IDX -> PNG records, {n} images, {_load_note()}")
    base = _report("baseline (1 process, TFRecordWriter)", n, base_s, base_bytes, base_cpu)
    ours = _report("convert (workers, hand framing)", n, ours_s, _dir_bytes(out), ours_cpu)
    print(f"  ratio convert / baseline: {ours / base:.2f}x (target >= 1.8x on 2 cores)")
    cores = os.cpu_count()
    print(
        f"  CPU per image, baseline / convert: {base_cpu / ours_cpu:.2f}x; on {cores} idle cores that "
        f"projects to {base_cpu / ours_cpu * cores:.1f}x (the work is CPU-bound and splits across workers)"
    )


def _photo(seed, size):
    rng = np.random.default_rng(seed)
    h, w = size
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * (1 + seed % 5)) % 256, (y * 2) % 256, ((x + y) // 2) % 256], axis=-1)
    noise = rng.integers(0, 40, (h, w, 3))
    buf = io.BytesIO()
    Image.fromarray((base + noise).clip(0, 255).astype(np.uint8)).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def test_bench_jpeg_folder_bytes_kept(tmp_path):
    src = tmp_path / "photos"
    files = []
    for i in range(2000):
        cls = src / f"class{i % 10}"
        cls.mkdir(parents=True, exist_ok=True)
        path = cls / f"{i:05d}.jpg"
        path.write_bytes(_photo(i, (224 + (i % 3) * 32, 224 + (i % 5) * 16)))
        files.append(str(path))
    total = sum(os.path.getsize(f) for f in files)

    t0 = time.perf_counter()  # the I/O ceiling: concatenate the files into one
    with open(tmp_path / "concat.bin", "wb") as out:
        for f in files:
            with open(f, "rb") as fh:
                out.write(fh.read())
    concat_s = time.perf_counter() - t0

    def items():
        for f in files:
            with open(f, "rb") as fh:
                data = fh.read()
            yield data, int(f.split("class")[1].split("/")[0]), b"jpeg", 224, 224, 3

    c0 = _cpu()
    n, base_s = _tf_baseline(str(tmp_path / "baseline.tfrecord"), items)
    base_cpu = _cpu() - c0

    out = tmp_path / "ours"
    c0, t0 = _cpu(), time.perf_counter()
    manifest = convert(ConvertConfig(source=str(src), splits={"train": 1.0}), str(out), progress_every_s=1e9)
    ours_s, ours_cpu = time.perf_counter() - t0, _cpu() - c0
    assert manifest["splits"]["train"]["count"] == 2000 and manifest["rejected"] == 0
    raw = _raw_write_mb_s(str(tmp_path))

    print(f"\n(b) JPEG folder, bytes kept, {n} photos, {total / 1e6:.1f} MB, {_load_note()}")
    ceiling = _report("concatenate files (I/O ceiling)", n, concat_s, total)
    base = _report("baseline (1 process, TFRecordWriter)", n, base_s, total, base_cpu)
    ours = _report("convert (validate, sha256, workers)", n, ours_s, total, ours_cpu)
    print(f"  ratio convert / concatenation: {ours / ceiling:.2f}x (target >= 0.5x)")
    print(f"  ratio convert / baseline: {ours / base:.2f}x")
    print(f"  raw disk write (fsync'd, 256 MB): {raw:.0f} MB/s; convert reached {total / ours_s / 1e6 / raw:.0%} of it")
