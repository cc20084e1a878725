"""Converter speed against the usual script, measured in the same run (make bench).

(a) the 60,000 Fashion-MNIST training images from IDX, PNG-encoded: this converter (worker
    processes, hand-framed records) against a single-process loop building one tf.train.Example per
    image and writing it with tf.io.TFRecordWriter, both using the same PNG encoder.
(b) 20,000 generated JPEG photos (224x224 and larger, ~27 KB each, over 0.5 GB), bytes kept,
    headers validated, checksums: against the same TensorFlow loop, and against the I/O ceiling of
    merely concatenating the files into one file; plus the share of the disk's raw write bandwidth
    reached. At this scale each side runs for seconds, so process start and pool start-up no
    longer decide the ratio (at 2,000 photos, about 0.1 s, it ranged 0.31x-0.69x across runs).

The photos are generated once per run (a module fixture in a temporary folder, removed at the end)
and read once before any side is timed, so every side starts with the same warm page cache.

Every measurement runs in a fresh process, as each side runs for real: the baseline is a script
that imports TensorFlow (its import is not timed), the converter runs without it (as in its step
and its CLI). The whole comparison is repeated ``RUNS`` times; in each run every side first runs
once untimed (each side warmed the same way: its files in the page cache, its output folder's
pages freed and reused), then the sides alternate over ``ROUNDS`` rounds, the first side of each
round rotating, and the run's ratio is the ratio of its medians. Printed: the median ratio across
runs and its spread (lowest-highest), and CPU microseconds per photo (process CPU time, the
workers' included), which move less with the host's load than wall time. Each time is from the
start of the work to the last byte written, reading the source included.

Why rounds are bimodal and runs disagree (the ``cores`` figure of each round, CPU seconds per wall
second, shows it): a side's wall time is its CPU time divided by the cores it got, and on a shared
2-core host the other tenants decide that. The converter needs both cores for its two workers;
in a round where another process holds one, it takes about twice as long (the bimodal rounds seen
on the reference CPU, about 0.53 s and 1.0 s, differ by that factor), while the one-process
baseline and the copy, which need one core, move less. On this project's shared 2-core host at a
load average of 8-12, each side got a third of a core (median) and the rounds spread threefold
whichever side ran first. Worker start-up (a fork, milliseconds) and the page cache (warm for
every side, each warmed the same way) do not explain it. So the wall ratio convert / baseline is
about ``cores x baseline CPU per photo / convert CPU per photo``, and CPU per photo is the figure
to compare between runs and hosts.

Targets on 2 cores: (a) >= 1.8x the baseline; (b) >= 0.5x the concatenation rate and >= 1.3x the
baseline. The figures are printed next to their targets, not asserted.
"""

from __future__ import annotations

import io
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.benchmarks.cpu import versus

pytestmark = pytest.mark.benchmark

RUNS = 3  # whole comparisons: the host's noise moved one run's ratio threefold between runs
ROUNDS = 3  # alternating rounds per run, after one untimed warm-up of each side
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# --------------------------------------------------------------------------------------------
# The measured sides, each run as `python test_bench_convert.py <side> <source> <output>`
# --------------------------------------------------------------------------------------------


def _cpu() -> float:
    """CPU seconds of this process and its finished children (the worker processes)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _tf_loop(out_path: str, items) -> int:
    """The script people copy: one Example at a time, TFRecordWriter, one process."""
    import tensorflow as tf

    def b(v):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))

    def i(v):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))

    n = 0
    with tf.io.TFRecordWriter(out_path) as w:
        for encoded, label, fmt, h, wd, c in items:
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
    return n


def _baseline_idx(src: str, out: str) -> int:
    from components.image_input.imaging import encode_png
    from components.image_input.sources import read_idx

    images = read_idx(os.path.join(src, "train-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(src, "train-labels-idx1-ubyte.gz"))
    return _tf_loop(out, ((encode_png(x), int(y), b"png", 28, 28, 1) for x, y in zip(images, labels, strict=True)))


def _baseline_jpeg(src: str, out: str) -> int:
    def items():
        for cls in sorted(os.listdir(src)):
            for name in sorted(os.listdir(os.path.join(src, cls))):
                with open(os.path.join(src, cls, name), "rb") as fh:
                    yield fh.read(), int(cls[len("class") :]), b"jpeg", 224, 224, 3

    return _tf_loop(out, items())


def _convert(src: str, out: str) -> int:
    from components.convert import convert
    from components.convert.config import ConvertConfig

    manifest = convert(ConvertConfig(source=src, splits={"train": 1.0}), out, progress_every_s=1e9, log=lambda m: None)
    assert manifest["rejected"] == 0
    return manifest["splits"]["train"]["count"]


def _concat(src: str, out: str) -> int:
    files = [os.path.join(src, c, n) for c in sorted(os.listdir(src)) for n in sorted(os.listdir(os.path.join(src, c)))]
    with open(out, "wb") as f:
        for path in files:
            with open(path, "rb") as fh:
                f.write(fh.read())
    return len(files)


SIDES = {"baseline-idx": _baseline_idx, "baseline-jpeg": _baseline_jpeg, "convert": _convert, "concat": _concat}


def _main(side: str, src: str, out: str) -> None:
    # Imports come before the clock starts: TensorFlow for the baseline, this project for the converter.
    if side.startswith("baseline"):
        import tensorflow  # noqa: F401
    import components.convert  # noqa: F401
    import trainer.config  # noqa: F401

    c0, t0 = _cpu(), time.perf_counter()
    n = SIDES[side](src, out)
    seconds, cpu = time.perf_counter() - t0, _cpu() - c0
    size = os.path.getsize(out) if os.path.isfile(out) else sum(e.stat().st_size for e in os.scandir(out))
    print(json.dumps({"n": n, "seconds": seconds, "cpu": cpu, "bytes": size}))


# --------------------------------------------------------------------------------------------
# The benchmarks
# --------------------------------------------------------------------------------------------


def _measure(side: str, src, out) -> dict:
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), side, str(src), str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _run_once(side: str, src, out) -> dict:
    """One fresh-process run of ``side``; its output removed afterwards (every run writes anew)."""
    import shutil

    result = _measure(side, src, out)
    shutil.rmtree(out, ignore_errors=True) if out.is_dir() else out.unlink()
    return result


def _rounds(sides: list[str], src, tmp_path) -> list[dict[str, list[dict]]]:
    """``RUNS`` comparisons; in each, every side warmed once, then ``ROUNDS`` rotating rounds.

    Each timed result carries ``position``: where the side ran in its round (0 = first), to see
    whether the side that runs first is slower (a cold cache or frequency after another side).
    """
    runs = []
    for r in range(RUNS):
        for side in sides:
            _run_once(side, src, tmp_path / f"warm-{side}")
        timed: dict[str, list[dict]] = {s: [] for s in sides}
        for k in range(ROUNDS):
            shift = (r * ROUNDS + k) % len(sides)
            for position, side in enumerate(sides[shift:] + sides[:shift]):
                timed[side].append({**_run_once(side, src, tmp_path / f"{side}-{r}-{k}"), "position": position})
        runs.append(timed)
    return runs


def _median(results: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in results)


def _report(name: str, runs: list[dict[str, list[dict]]], side: str, nbytes: float | None = None) -> float:
    """Prints a side's rate (median over runs of each run's median); returns it in images/s."""
    all_results = [x for run in runs for x in run[side]]
    n = all_results[0]["n"]
    seconds = statistics.median(_median(run[side], "seconds") for run in runs)
    cpu_us = statistics.median(_median(run[side], "cpu") for run in runs) / n * 1e6
    mb = (nbytes if nbytes is not None else all_results[0]["bytes"]) / seconds / 1e6
    # Each round as seconds/cores: the rounds of a side that has two workers split in two groups,
    # those in which it got both cores and those in which another process held one (twice the time).
    per_run = " | ".join(
        ", ".join(f"{x['seconds']:.2f}/{x['cpu'] / x['seconds']:.1f}c" for x in run[side]) for run in runs
    )
    # CPU seconds per wall second: how many cores the side got (2 at most here, 1 for one process);
    # on a shared machine the other processes decide it, so it explains a low or a noisy rate.
    cores = statistics.median(x["cpu"] / x["seconds"] for x in all_results)
    first = [x["seconds"] for x in all_results if x["position"] == 0]
    later = [x["seconds"] for x in all_results if x["position"] != 0]
    order = f"first in its round {statistics.median(first):.2f}s, later {statistics.median(later):.2f}s"
    print(
        f"  {name:<38} {n / seconds:>8.0f} img/s {mb:>7.1f} MB/s  median {seconds:.3f}s of runs [{per_run}], "
        f"{cpu_us:.0f} us CPU/img, {cores:.2f} cores; {order}"
    )
    return n / seconds


def _ratio(
    runs: list[dict[str, list[dict]]], ours: str, theirs: str, key: str = "seconds"
) -> tuple[float, float, float]:
    """Median, lowest and highest across runs of ``theirs`` median / ``ours`` median (above 1: ours faster)."""
    ratios = sorted(_median(run[theirs], key) / _median(run[ours], key) for run in runs)
    return statistics.median(ratios), ratios[0], ratios[-1]


def _print_ratio(name: str, ratio: tuple[float, float, float], target: str) -> None:
    median, low, high = ratio
    print(f"  {versus(name, median, target)}; across {RUNS} runs {low:.2f}x-{high:.2f}x")


def _load_note() -> str:
    # Other processes on a shared machine take cores from the workers: say how busy it was.
    return (
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, {RUNS} runs of "
        f"{ROUNDS} alternating rounds after a warm-up of each side"
    )


def _raw_write_mb_s(folder, mb=256) -> float:
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


def test_bench_idx_to_png_records(tmp_path):
    from components.image_input.sources import FASHION_MNIST_DIR

    src = tmp_path / "idx"
    src.mkdir()
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
        os.symlink(os.path.join(FASHION_MNIST_DIR, name), src / name)
    runs = _rounds(["baseline-idx", "convert"], src, tmp_path)
    assert runs[0]["convert"][0]["n"] == runs[0]["baseline-idx"][0]["n"] == 60000

    print(f"\n(a) Fashion-MNIST IDX -> PNG records, 60000 images, {_load_note()}")
    _report("baseline (1 process, TFRecordWriter)", runs, "baseline-idx")
    _report("convert (workers, hand framing)", runs, "convert")
    _print_ratio("wall, convert / baseline", _ratio(runs, "convert", "baseline-idx"), ">= 1.8x on 2 cores")
    cpu = _ratio(runs, "convert", "baseline-idx", "cpu")
    print(f"  CPU per image, baseline / convert: {cpu[0]:.2f}x (CPU-bound work, split across workers)")


PHOTOS = 20_000
DISTINCT = 500  # distinct pictures; each is written PHOTOS // DISTINCT times with its own comment


def _photo(seed, size):
    from PIL import Image

    rng = np.random.default_rng(seed)
    h, w = size
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * (1 + seed % 5)) % 256, (y * 2) % 256, ((x + y) // 2) % 256], axis=-1)
    noise = rng.integers(0, 40, (h, w, 3))
    buf = io.BytesIO()
    Image.fromarray((base + noise).clip(0, 255).astype(np.uint8)).save(buf, "JPEG", quality=92)
    return buf.getvalue()


def _with_comment(jpeg: bytes, text: bytes) -> bytes:
    """The same JPEG with a COM segment after SOI: still a valid JPEG, with its own bytes (and sha256)."""
    return jpeg[:2] + b"\xff\xfe" + (len(text) + 2).to_bytes(2, "big") + text + jpeg[2:]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """PHOTOS distinct, valid JPEG files in 10 class folders, deterministic, read once (page cache warm).

    Encoding 20,000 pictures would take longer than the benchmark; DISTINCT pictures are encoded and
    each copy gets a different comment segment, which the converter reads, validates and hashes as a
    file of its own. The folder is removed at the end of the module.
    """
    import shutil

    from PIL import Image

    src = tmp_path_factory.mktemp("photos")
    bases = [_photo(i, (224 + (i % 3) * 32, 224 + (i % 5) * 16)) for i in range(DISTINCT)]
    total = 0
    for i in range(PHOTOS):
        cls = src / f"class{i % 10}"
        cls.mkdir(exist_ok=True)
        data = _with_comment(bases[i % DISTINCT], b"copy %08d" % i)
        (cls / f"{i:05d}.jpg").write_bytes(data)
        total += len(data)
    # Genuinely valid JPEGs: a sample decodes fully with Pillow.
    for i in range(0, PHOTOS, PHOTOS // 20):
        with Image.open(src / f"class{i % 10}" / f"{i:05d}.jpg") as im:
            im.load()
    assert total >= 0.5e9, f"the photos make {total / 1e9:.2f} GB, the benchmark needs >= 0.5 GB"
    # Read everything once: the first timed side must not pay for a cold cache the others do not.
    for cls in sorted(os.listdir(src)):
        for name in os.listdir(src / cls):
            (src / cls / name).read_bytes()
    yield src, total
    shutil.rmtree(src, ignore_errors=True)


def test_bench_jpeg_folder_bytes_kept(photos, tmp_path):
    src, total = photos
    runs = _rounds(["concat", "baseline-jpeg", "convert"], src, tmp_path)
    assert {x["n"] for run in runs for side in run.values() for x in side} == {PHOTOS}
    raw = _raw_write_mb_s(str(tmp_path))

    print(f"\n(b) JPEG folder, bytes kept, {PHOTOS} photos, {total / 1e6:.1f} MB, {_load_note()}")
    _report("concatenate files (I/O ceiling)", runs, "concat", total)
    _report("baseline (1 process, TFRecordWriter)", runs, "baseline-jpeg", total)
    ours = _report("convert (validate, sha256, workers)", runs, "convert", total)
    _print_ratio("wall, convert / concatenation", _ratio(runs, "convert", "concat"), ">= 0.5x")
    _print_ratio("wall, convert / baseline", _ratio(runs, "convert", "baseline-jpeg"), ">= 1.3x")
    cpu = _ratio(runs, "convert", "concat", "cpu")
    print(
        f"  CPU per image, convert / concatenation: {1 / cpu[0]:.2f}x "
        "(validating, sha256 and framing on top of the same reads and writes; two workers share it)"
    )
    ours_mb_s = total * ours / PHOTOS / 1e6
    print(
        f"  raw disk write (fsync'd, 256 MB): {raw:.0f} MB/s; convert reached {ours_mb_s / raw:.0%} of it "
        "(its writes land in the page cache, as the concatenation's do)"
    )


# --------------------------------------------------------------------------------------------
# (c) A source that grew by 10 %: a delta of the dataset converted before, against converting it all again
# --------------------------------------------------------------------------------------------

GROWN_FIRST, GROWN_NEW = 10_000, 1_000  # PNGs before, PNGs added (10 %)


def _write_pngs(folder, start: int, stop: int) -> None:
    from PIL import Image

    rng = np.random.default_rng(start)
    for i in range(start, stop):
        cls = folder / f"class{i % 10}"
        cls.mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 255, (48, 48, 3), dtype=np.uint8)).save(cls / f"{i:05d}.png")


def _timed_convert(config, out) -> tuple[float, list[str]]:
    import shutil

    from components.convert.convert import convert

    shutil.rmtree(out, ignore_errors=True)
    lines: list[str] = []
    t0 = time.perf_counter()
    convert(config, str(out), log=lines.append)
    return time.perf_counter() - t0, lines


def test_bench_delta_after_ten_percent_more(tmp_path):
    """Both sides in this process, alternating, after one untimed run each; medians of ``ROUNDS``."""
    from components.convert.config import ConvertConfig

    src = tmp_path / "photos"
    src.mkdir()
    _write_pngs(src, 0, GROWN_FIRST)
    _timed_convert(ConvertConfig(source=str(src)), tmp_path / "first")
    _write_pngs(src, GROWN_FIRST, GROWN_FIRST + GROWN_NEW)
    sides = {
        "whole": ConvertConfig(source=str(src)),
        "delta": ConvertConfig(source=str(src), parent=str(tmp_path / "first")),
    }
    times: dict[str, list[float]] = {name: [] for name in sides}
    last: dict[str, list[str]] = {}
    for rnd in range(ROUNDS + 1):
        for name in sorted(sides, reverse=rnd % 2 == 1):
            seconds, last[name] = _timed_convert(sides[name], tmp_path / name)
            if rnd:  # round 0 warms both sides
                times[name].append(seconds)
    whole, delta = (statistics.median(times[name]) for name in ("whole", "delta"))
    load = f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    print(f"\n(c) {GROWN_FIRST:,} PNGs (48x48) and {GROWN_NEW:,} more (10 %), {load}")
    print(f"  whole re-conversion: {whole:.3f} s (median of {ROUNDS}); {last['whole'][-1]}")
    print(f"  delta of the first dataset: {delta:.3f} s; {last['delta'][-1]}")
    # Bytes kept, these PNGs convert at memory speed: listing the 11,000 files, which both sides do, is
    # a third of the whole conversion, and so it bounds the ratio here; resized or larger images widen it.
    print("  " + versus("wall, whole / delta", whole / delta, "> 1x; the delta reads and writes a tenth"))
    assert "records written" in last["delta"][-1]


if __name__ == "__main__":
    _main(*sys.argv[1:4])
