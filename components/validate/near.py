"""Near-duplicates across splits: the same photo re-encoded, resized or lightly edited (opt-in).

Exact copies share an ``image/sha256`` and are the leakage check's. A copy saved again as JPEG,
scaled or brightened has other bytes; its perceptual hash (``imagehash.phash``: the low
frequencies of the image's DCT, 64 bits) stays within a few bits of the original's. Every image
is decoded, so this runs only when asked (``near_duplicates``).

Pairs within ``bits`` are found without comparing every pair: the 64 bits are cut into
``bits + 1`` blocks, and two hashes that differ in at most ``bits`` bits agree on at least one
whole block (pigeonhole), so only images sharing a block are compared.
"""

from __future__ import annotations

import collections
import io
import time
from collections.abc import Callable, Iterator
from typing import Optional

from components.validate import policy as kinds
from components.validate.checks import Findings
from trainer.tfrecord_read import iter_split_features
from trainer.tfrecords import DatasetInfo

HASH_BITS = 64


def perceptual_hash(encoded: bytes) -> int:
    """An image's 64-bit perceptual hash (``imagehash.phash``) as an int."""
    import imagehash
    from PIL import Image

    with Image.open(io.BytesIO(encoded)) as image:
        return int(str(imagehash.phash(image)), 16)


def _blocks(bits: int) -> list[tuple[int, int]]:
    """``bits + 1`` (shift, mask) pairs cutting 64 bits into near-equal blocks."""
    count = bits + 1
    edges = [round(i * HASH_BITS / count) for i in range(count + 1)]
    return [(low, (1 << (high - low)) - 1) for low, high in zip(edges, edges[1:], strict=False)]


def close_pairs(hashes: list[int], bits: int) -> Iterator[tuple[int, int, int]]:
    """Every pair of positions whose hashes differ in at most ``bits`` bits: (i, j, distance), i < j, once each."""
    seen: set[tuple[int, int]] = set()
    for shift, mask in _blocks(bits):
        buckets: dict[int, list[int]] = collections.defaultdict(list)
        for position, value in enumerate(hashes):
            buckets[(value >> shift) & mask].append(position)
        for members in buckets.values():
            for a in range(len(members)):
                for b in range(a + 1, len(members)):
                    i, j = members[a], members[b]
                    distance = (hashes[i] ^ hashes[j]).bit_count()
                    if distance <= bits and (i, j) not in seen:
                        seen.add((i, j))
                        yield i, j, distance


def _text(values: Optional[list]) -> str:
    value = values[0] if values else b""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


def find_near_duplicates(
    info: DatasetInfo,
    bits: int,
    findings: Findings,
    on_progress: Optional[Callable[[int, int], None]] = None,
) -> None:
    """Adds a ``near_duplicate`` finding for images in two splits whose hashes are within ``bits``.

    Exact copies (equal sha256) are left to the leakage check. ``on_progress(done, total)`` is told
    the images hashed, at most every few seconds.
    """
    total = sum(s.count for s in info.splits.values())
    hashes: list[int] = []
    where: list[tuple[str, str, str]] = []  # (split, key, sha256)
    last = time.monotonic()
    for split in info.splits:
        for features in iter_split_features(info, split, skip=()):
            encoded = features.get("image/encoded", [b""])[0]
            try:
                hashes.append(perceptual_hash(bytes(encoded)))
            except OSError:
                continue  # an image PIL cannot decode: the converter verified it; nothing to compare
            where.append((split, _text(features.get("image/source_key")), _text(features.get("image/sha256"))))
            if on_progress is not None and time.monotonic() - last > 5:
                on_progress(len(where), total)
                last = time.monotonic()
    if on_progress is not None:
        on_progress(len(where), total)
    keys, flagged, order = findings.keys(), set(), list(info.splits)
    pairs: collections.Counter = collections.Counter()
    example = ""
    for i, j, distance in close_pairs(hashes, bits):
        (split_a, key_a, sha_a), (split_b, key_b, sha_b) = where[i], where[j]
        if split_a == split_b or sha_a == sha_b:
            continue
        pairs[" / ".join(sorted((split_a, split_b), key=order.index))] += 1
        for key in (key_a, key_b):
            if key not in flagged:
                flagged.add(key)
                keys.add(key)
        example = example or f"{key_a} ({split_a}) ~ {key_b} ({split_b}), {distance} bits apart"
    if pairs:
        counts = ", ".join(f"{pair}: {n:,}" for pair, n in pairs.most_common())
        findings.add(
            kinds.NEAR_DUPLICATE,
            f"{sum(pairs.values()):,} pair(s) of near-identical images in two splits ({counts}; perceptual hashes "
            f"within {bits} of 64 bits), e.g. {example}: likely the same photo saved twice; look at them, then "
            "remove one or allow the keys",
            keys=keys,
        )
