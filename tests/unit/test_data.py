"""tf.data input from a TFRecord dataset folder: shapes, values, order, and bad folders."""

import dataclasses
import gzip

import numpy as np
import pytest

from tests.datasets import dataset_info, make_images, write_test_dataset
from trainer import data
from trainer.tasks import get_task
from trainer.tfrecords import DatasetError, ShardInfo, SplitInfo, load_dataset_info, write_dataset_info

CLASSIFIER = get_task("classification")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_test_dataset(tmp_path_factory.mktemp("ds"), {"train": 40, "validation": 10}, num_classes=4, shards=2)


def _all(ds):
    images, labels = [], []
    for x, y in ds:
        images.append(x.numpy())
        labels.append(y.numpy())
    return np.concatenate(images), np.concatenate(labels)


def test_evaluation_pass_returns_every_image_scaled_and_labelled(dataset):
    ds = data.make_dataset(str(dataset), "validation", batch_size=4, training=False, task=CLASSIFIER)
    images, labels = _all(ds)
    assert images.dtype == np.float32 and images.shape == (10, 28, 28, 1)
    assert labels.dtype == np.int32
    # Compare with what was written: shards interleave examples i, i+2, ... of each of 2 shards.
    expected_images, expected_labels = make_images(10, 4, seed=1)
    order = [j for i in range(2) for j in range(i, 10, 2)]
    written = {tuple(expected_images[j].ravel()): int(expected_labels[j]) for j in order}
    pixels = np.rint(images * 255).astype(np.uint8)
    got = {tuple(img.ravel()): int(lbl) for img, lbl in zip(pixels, labels, strict=True)}
    assert got == written
    assert 0.0 <= images.min() and images.max() <= 1.0


def test_cached_pass_gives_the_same_examples(dataset):
    streamed = _all(data.make_dataset(str(dataset), "train", batch_size=8, training=False, task=CLASSIFIER))
    cached = data.make_dataset(
        str(dataset), "train", batch_size=8, training=False, cache=True, repeat=True, task=CLASSIFIER
    )
    images, labels = _all(cached.take(10))  # two passes of 40: the second comes from memory
    for part in (slice(0, 40), slice(40, 80)):
        np.testing.assert_array_equal(images[part], streamed[0])
        np.testing.assert_array_equal(labels[part], streamed[1])
    assert data.cached_size_mb(load_dataset_info(str(dataset)), "train") == 40 * 28 * 28 / 1e6


def test_training_stream_repeats_with_fixed_batches(dataset):
    ds = data.make_dataset(
        str(dataset), "train", batch_size=16, training=True, drop_remainder=True, seed=1, task=CLASSIFIER
    )
    batches = list(ds.take(5))  # 80 examples from a 40-example split: it repeats
    assert all(tuple(x.shape) == (16, 28, 28, 1) for x, _ in batches)
    assert ds.element_spec[0].shape.as_list() == [16, 28, 28, 1]
    # model.fit drops its input after each evaluation interval: an autotuned one made that wait
    # out tf.data's optimization period (seconds each interval), so a training's input is not tuned.
    assert ds.options().autotune.enabled is False
    evaluation = data.make_dataset(str(dataset), "validation", batch_size=4, training=False, task=CLASSIFIER)
    assert evaluation.options().autotune.enabled is not False


def test_augment_keeps_shape_and_range(dataset):
    ds = data.make_dataset(str(dataset), "train", batch_size=8, training=True, augment=True, seed=3, task=CLASSIFIER)
    x, _ = next(iter(ds))
    assert tuple(x.shape) == (8, 28, 28, 1) and float(x.numpy().max()) <= 1.0


def test_gzip_shards(tmp_path):
    folder = write_test_dataset(tmp_path / "ds", {"train": 6}, shards=1)
    info = load_dataset_info(str(folder))
    (shard,) = info.splits["train"].shards
    raw = (folder / shard.file).read_bytes()
    (folder / shard.file).unlink()
    gz = dataclasses.replace(shard, file=shard.file + ".gz")
    (folder / gz.file).write_bytes(gzip.compress(raw))
    split = dataclasses.replace(info.splits["train"], shards=(gz,))
    write_dataset_info(str(folder), dataclasses.replace(info, compression="GZIP", splits={"train": split}))
    images, _ = _all(data.make_dataset(str(folder), "train", batch_size=4, training=False, task=CLASSIFIER))
    assert images.shape == (6, 28, 28, 1)


def test_steps_per_epoch():
    info = dataset_info({"train": SplitInfo(100, {}, (ShardInfo("x", 100, 1),))})
    assert data.steps_per_epoch(info, "train", 32, drop_remainder=False) == 4
    assert data.steps_per_epoch(info, "train", 32, drop_remainder=True) == 3
    with pytest.raises(DatasetError, match="fewer than one global batch of 128"):
        data.steps_per_epoch(info, "train", 128, drop_remainder=True)


def test_folder_without_manifest(tmp_path):
    with pytest.raises(DatasetError, match="has no dataset.json"):
        data.make_dataset(str(tmp_path), "train", 8, training=True, task=CLASSIFIER)


def test_missing_and_empty_splits(tmp_path):
    folder = write_test_dataset(tmp_path / "ds", {"train": 8, "validation": 0})
    with pytest.raises(DatasetError, match="split 'test' is not in"):
        data.make_dataset(str(folder), "test", 8, training=False, task=CLASSIFIER)
    with pytest.raises(DatasetError, match="split 'validation' of .* is empty"):
        data.make_dataset(str(folder), "validation", 8, training=False, task=CLASSIFIER)


def test_images_of_mixed_sizes_need_a_resize_where_no_task_fits_them(tmp_path):
    folder = write_test_dataset(tmp_path / "ds", {"train": 4})
    write_dataset_info(str(folder), dataclasses.replace(load_dataset_info(str(folder)), image=None))
    with pytest.raises(DatasetError, match="convert it again with resize"):
        data.image_shape_of(load_dataset_info(str(folder)))


def test_bad_batch_size(dataset):
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        data.make_dataset(str(dataset), "train", 0, training=True, task=CLASSIFIER)
