"""Adaptive benchmark rounds: stop once the rounds agree, with a cap; the progress count over the paths."""

import pytest

from components.benchmark.run import BatchCount, rounds_text
from trainer.benchmark import TimingStats, enough_rounds, round_spread, summarize, time_batches


def test_the_spread_is_the_range_over_the_median():
    assert round_spread([]) is None and round_spread([1.0]) is None
    assert round_spread([1.0, 1.1, 1.02]) == pytest.approx(0.1 / 1.02)
    assert round_spread([0.0, 0.0]) == 0.0


def test_rounds_stop_at_the_target_spread_from_the_second_on_or_at_the_cap():
    assert not enough_rounds([], 0.05, 5)
    assert not enough_rounds([1.0], 0.05, 5)  # one round agrees with itself: not enough
    assert enough_rounds([1.0, 1.04], 0.05, 5)
    assert not enough_rounds([1.0, 1.2], 0.05, 5)
    assert not enough_rounds([1.0, 1.2, 1.01], 0.05, 5)  # the slow round still counts
    assert enough_rounds([1.0, 1.2, 1.01, 1.1, 1.3], 0.05, 5)  # the cap
    assert not enough_rounds([1.0, 1.0], None, 3)  # no target: always the cap
    assert enough_rounds([1.0], None, 1)


class _Clock:
    """Each round's batches take the round's time; the run advances the clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _timed(round_seconds, target_spread, cap, batches=4):
    clock, calls, ticks = _Clock(), [], []
    per_batch = iter([s / batches for s in round_seconds for _ in range(batches)])

    def run(batch):
        calls.append(batch)
        clock.now += next(per_batch)

    stats = time_batches(
        run, list(range(batches)), [8] * batches, 0, cap, lambda: ticks.append(1), target_spread, clock=clock
    )
    return stats, len(calls), len(ticks)


def test_time_batches_stops_once_the_rounds_agree_and_records_rounds_and_spread():
    stats, calls, ticks = _timed([2.0, 1.0, 1.03, 5.0, 5.0], target_spread=0.05, cap=5)
    # (2.0, 1.0): 100% apart; (2.0, 1.0, 1.03): the slow first round still counts; then (.., 5.0)
    # and (.., 5.0, 5.0) reach the cap
    assert stats.rounds == 5 and calls == ticks == 20
    stats, calls, _ = _timed([1.0, 1.02, 9.0], target_spread=0.05, cap=5)
    assert stats.rounds == 2 and calls == 8 and stats.num_batches == 4
    assert stats.round_spread == pytest.approx(0.02 / 1.01)
    assert stats.total_s == pytest.approx(1.01) and stats.images_per_sec == pytest.approx(32 / 1.01)
    stats, _, _ = _timed([1.0, 1.0, 1.0], target_spread=None, cap=3)
    assert stats.rounds == 3 and stats.round_spread == 0.0


def test_one_round_has_no_spread_and_old_records_still_load():
    stats, _, _ = _timed([1.0], target_spread=0.05, cap=1)
    assert stats.rounds == 1 and stats.round_spread is None
    assert "round_spread" not in stats.to_dict()  # written only when there is one
    old = summarize([0.01, 0.02], images=16, batch_size=8, rounds=2).to_dict()
    old.pop("round_spread", None)
    assert TimingStats.from_dict(old).round_spread is None
    assert rounds_text(stats) == "one timed round"
    two = summarize([0.01, 0.02], images=16, batch_size=8, rounds=2, spread_of_rounds=0.031)
    assert TimingStats.from_dict(two.to_dict()).round_spread == 0.031
    assert rounds_text(two) == "the median of 2 timed rounds, within 3.1% of each other"


def test_progress_counts_batches_against_the_cap_and_ends_at_the_total():
    calls = []
    count = BatchCount(per_path=12, paths=2, on_progress=lambda done, total: calls.append((done, total)))
    for _ in range(8):  # the in-process path stopped after 2 of 3 rounds of 4 batches
        count.batch()
    count.end_path()
    assert calls[-1] == (12, 24)
    for _ in range(12):  # the served path ran all its rounds
        count.batch()
    count.end_path()
    assert calls[-1] == (24, 24) and [c[0] for c in calls].count(24) == 1
    BatchCount(4, 1, None).batch()  # no callback: nothing to call
