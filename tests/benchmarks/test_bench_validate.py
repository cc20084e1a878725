"""The validate step's library call against reading the same records with TensorFlow (``make bench``).

On Fashion-MNIST's 70,000 records and on the shapes (3,000 detection images): the checks and the
statistics of :func:`components.validate.run.validate` (records decoded without TensorFlow), next
to a baseline that only reads the same small features with ``tf.data`` (``tf.io.parse_example``)
in a fresh process, TensorFlow's import included, as a step that used TensorFlow would pay it.
The opt-in near-duplicate check (every image decoded and hashed) is timed apart. Alternating runs,
medians of three. Target: the library call under 10 s on both datasets, with no TensorFlow import.

Prints; asserts only what holds whatever the speed (no leakage or label conflict on either clean
dataset). tests/unit/validate/test_validate_read.py shows the library call imports no TensorFlow.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import textwrap
import time

import pytest

from tests.benchmarks.cpu import versus

pytestmark = pytest.mark.benchmark

_TF_READ = textwrap.dedent(
    """
    import sys, time
    started = time.monotonic()
    import tensorflow as tf
    from trainer import tfrecords
    info = tfrecords.load_dataset_info(sys.argv[1])
    spec = {k: tf.io.FixedLenFeature([], tf.string) for k in ("image/sha256", "image/source_key", "image/format")}
    spec.update({k: tf.io.FixedLenFeature([], tf.int64) for k in ("image/height", "image/width", "image/channels")})
    spec["image/class/label"] = tf.io.FixedLenFeature([], tf.int64, default_value=-1)
    n = 0
    for split in info.splits:
        files = info.shard_paths(split)
        for batch in tf.data.TFRecordDataset(files).batch(1024).map(lambda s: tf.io.parse_example(s, spec)):
            n += int(batch["image/height"].shape[0])
    print(n, time.monotonic() - started)
    """
)


def _tf_read(dataset: str) -> float:
    done = subprocess.run([sys.executable, "-c", _TF_READ, dataset], capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def _validate(dataset: str, **settings) -> tuple[float, object]:
    from components.validate.config import ValidateConfig
    from components.validate.run import validate

    started = time.monotonic()
    result = validate(dataset, ValidateConfig(**settings))
    return time.monotonic() - started, result


@pytest.mark.parametrize("source", ["fashion-mnist", "shapes"])
def test_the_library_call_against_a_tensorflow_read_of_the_same_records(tmp_path, source, capsys):
    from components.convert.config import ConvertConfig
    from components.convert.convert import convert

    dataset = str(tmp_path / "dataset")
    convert(ConvertConfig(source=source), dataset, log=lambda _: None)
    ours, theirs = [], []
    for _ in range(3):  # alternating, on a noisy machine
        seconds, result = _validate(dataset)
        ours.append(seconds)
        theirs.append(_tf_read(dataset))
    near_s, near = _validate(dataset, near_duplicates=True)
    records = sum(s.count for s in result.stats.splits.values())
    assert result.passed and not [f for f in result.findings if f.kind in ("leakage", "label_conflict")]
    with capsys.disabled():
        print(f"\n{source}: {records:,} records")
        print(f"  validate (library, no TensorFlow): median {statistics.median(ours):.2f} s of {ours}")
        print(f"  tf.data read of the same features, import included: median {statistics.median(theirs):.2f} s")
        print("  " + versus("validate / tf.data read", statistics.median(ours) / statistics.median(theirs), "< 1"))
        print(f"  target: under 10 s -> {'met' if statistics.median(ours) < 10 else 'MISSED'}")
        found = [f"{f.kind} ({f.count})" for f in near.findings if f.kind == "near_duplicate"] or ["none"]
        print(f"  with near_duplicates (every image decoded and hashed): {near_s:.1f} s; found: {', '.join(found)}")
