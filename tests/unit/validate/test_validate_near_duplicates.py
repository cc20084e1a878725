"""The opt-in near-duplicate check: real images, re-encoded and edited, found across splits only."""

import io
import random

import numpy as np
import pytest
from PIL import Image, ImageEnhance

from components.validate.config import ValidateConfig
from components.validate.near import close_pairs, perceptual_hash
from components.validate.run import validate
from tests.validate_fixtures import Rec, write_dataset


def _photo(seed: int) -> Image.Image:
    """A smooth random picture (blobs of colour), as photos are: low frequencies carry it."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 255, size=(6, 6, 3), dtype=np.uint8)
    return Image.fromarray(small).resize((96, 96), Image.BICUBIC)


def _bytes(image: Image.Image, fmt: str = "PNG", **options) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **options)
    return buf.getvalue()


def _records(split: str, seeds: range) -> list[Rec]:
    return [Rec(f"{split}/{s}", s % 4, image=_bytes(_photo(s)), height=96, width=96) for s in seeds]


def test_a_photo_saved_again_as_jpeg_and_brightened_in_another_split_is_found(tmp_path):
    train = _records("train", range(40))
    edited = ImageEnhance.Brightness(_photo(7)).enhance(1.1).resize((80, 80))
    test = _records("test", range(100, 120)) + [Rec("test/copy-of-7", 3, image=_bytes(edited, "JPEG", quality=80))]
    folder = write_dataset(tmp_path / "d", {"train": train, "test": test})
    on = validate(str(folder), ValidateConfig(near_duplicates=True))
    near = [f for f in on.findings if f.kind == "near_duplicate"]
    assert len(near) == 1 and near[0].severity == "warn" and set(near[0].records) == {"train/7", "test/copy-of-7"}
    assert "train / test: 1" in near[0].message
    # off by default: nothing is decoded and nothing is found
    assert not [f for f in validate(str(folder)).findings if f.kind == "near_duplicate"]


def test_exact_copies_are_leakage_not_near_duplicates_and_one_split_is_not_compared_with_itself(tmp_path):
    train = _records("train", range(30)) + [Rec("train/again-3", 3, image=_bytes(_photo(3), "JPEG"))]
    test = _records("test", range(200, 220)) + [Rec("test/3", 3, image=_bytes(_photo(3)))]
    folder = write_dataset(tmp_path / "d", {"train": train, "test": test})
    kinds = sorted(f.kind for f in validate(str(folder), ValidateConfig(near_duplicates=True)).findings)
    # test/3 equals train/3 byte for byte: leakage; train/again-3 is near train/3 but in the same split
    assert "leakage" in kinds
    near = [
        f for f in validate(str(folder), ValidateConfig(near_duplicates=True)).findings if f.kind == "near_duplicate"
    ]
    assert all("train/3" not in f.records or "train/again-3" not in f.records for f in near)
    assert [set(f.records) for f in near] in ([], [{"train/again-3", "test/3"}])


@pytest.mark.parametrize("bits", [0, 2, 4, 8])
def test_the_block_search_finds_every_close_pair_a_full_comparison_finds(bits):
    rnd = random.Random(bits)
    hashes = [rnd.getrandbits(64) for _ in range(300)]
    hashes += [h ^ (1 << rnd.randrange(64)) ^ (1 << rnd.randrange(64)) for h in hashes[:100]]  # 0-2 bits off
    brute = {
        (i, j)
        for i in range(len(hashes))
        for j in range(i + 1, len(hashes))
        if (hashes[i] ^ hashes[j]).bit_count() <= bits
    }
    found = [(i, j) for i, j, _ in close_pairs(hashes, bits)]
    assert len(found) == len(set(found)) and set(found) == brute


def test_the_hash_is_imagehash_s_phash_as_an_int():
    import imagehash

    image = _photo(1)
    assert perceptual_hash(_bytes(image)) == int(str(imagehash.phash(image)), 16)
