"""The pick: the images ranked (by their uncertainty, or at random), then kept apart (the diversity
step) until the count is reached. Pure functions on arrays and hashes; no model, no files.

The diversity step works on 64-bit perceptual hashes (``imagehash.phash``, what the validate step
finds near-duplicates with): two images whose hashes differ in at most ``near_bits`` bits are
near-copies, and one is enough.

- ``hash``: in rank order, an image that is a near-copy of one picked already is passed over.
- ``kcenter``: among the ``KCENTER_POOL x count`` best ranked images, the best ranked first, then
  each time the one farthest (in hash bits) from every pick so far, the better ranked on a tie;
  near-copies of a pick are never picked. The picks then cover the doubtful images' variety rather
  than the most doubtful corner of it.
- ``none``: the rank order as it is.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable, Sequence

import numpy as np

# kcenter's candidates: this many times the count, the best ranked.
KCENTER_POOL = 4


def rank(scores: Sequence[float], *, random_order: bool, seed: int) -> list[int]:
    """Positions in pick order: the highest score first (ties in a seeded random order), or all at random.

    Args:
        scores: each candidate's score.
        random_order: the baseline: a seeded random order, whatever the scores.
        seed: the random order's seed.
    """
    rng = np.random.default_rng(seed)
    shuffled = rng.permutation(len(scores))
    if random_order:
        return [int(i) for i in shuffled]
    tiebreak = np.empty(len(scores), dtype=np.int64)
    tiebreak[shuffled] = np.arange(len(scores))
    return [int(i) for i in np.lexsort((tiebreak, -np.asarray(scores, dtype=np.float64)))]


def perceptual_hash(encoded: bytes) -> int:
    """An image's 64-bit perceptual hash (``imagehash.phash``) as an int."""
    import imagehash
    from PIL import Image

    with Image.open(io.BytesIO(encoded)) as image:
        return int(str(imagehash.phash(image)), 16)


def distance(a: int, b: int) -> int:
    """The bits in which two hashes differ."""
    return (a ^ b).bit_count()


@dataclasses.dataclass(frozen=True)
class Picked:
    """The diversity step's outcome.

    Attributes:
        picks: positions picked, in pick order.
        near_copies: positions passed over as near-copies of a pick (``hash``; ``kcenter``: among its candidates).
    """

    picks: list[int]
    near_copies: list[int]


def spread(
    order: Sequence[int], hash_of: Callable[[int], int], count: int, *, diversity: str, near_bits: int
) -> Picked:
    """The first ``count`` positions of ``order`` kept apart as ``diversity`` says (module docstring).

    Args:
        order: positions in rank order (:func:`rank`).
        hash_of: a position's perceptual hash (called only for the positions looked at).
        count: how many to pick.
        diversity: ``hash``, ``kcenter`` or ``none``.
        near_bits: at most this many differing bits make two images near-copies.
    """
    if diversity == "none":
        return Picked(list(order[:count]), [])
    if diversity == "kcenter":
        return k_center(order[: KCENTER_POOL * count], hash_of, count, near_bits)
    picks, near, hashes = [], [], []
    for position in order:
        if len(picks) == count:
            break
        h = hash_of(position)
        if any(distance(h, other) <= near_bits for other in hashes):
            near.append(position)
            continue
        picks.append(position)
        hashes.append(h)
    return Picked(picks, near)


def k_center(candidates: Sequence[int], hash_of: Callable[[int], int], count: int, near_bits: int) -> Picked:
    """Greedy k-center on hash distance over ``candidates`` (in rank order); the first is picked first."""
    if not candidates:
        return Picked([], [])
    values = np.array([hash_of(p) for p in candidates], dtype=np.uint64)
    nearest = np.full(len(candidates), 65, dtype=np.int64)  # each candidate's distance to its nearest pick
    chosen: list[int] = []
    taken = np.zeros(len(candidates), dtype=bool)
    index = 0
    while len(chosen) < count:
        chosen.append(index)
        taken[index] = True
        bits = np.unpackbits(np.bitwise_xor(values, values[index]).view(np.uint8).reshape(-1, 8), axis=1).sum(axis=1)
        nearest = np.minimum(nearest, bits)
        open_ = ~taken & (nearest > near_bits)
        if not open_.any():
            break
        # The farthest from the picks; np.argmax takes the first, the better ranked, on a tie.
        index = int(np.argmax(np.where(open_, nearest, -1)))
    near = [candidates[i] for i in np.flatnonzero(~taken & (nearest <= near_bits))]
    return Picked([candidates[i] for i in chosen], near)
