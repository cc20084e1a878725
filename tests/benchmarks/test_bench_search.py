"""The search against the full grid (``make bench``): the same 12 trials on the same data, once by
successive halving (``make search``'s local search: rungs of 30 s, 90 s and 270 s, eta 3) and once
every trial trained to the end (the same search file with one rung of 270 s), both under kfp.local
two trials at a time.

Printed side by side: each run's best trial and quality, billed time (start-up, about the import
of TensorFlow per task, shown apart) and cost at the price table's CPU price; the search's share of
the grid's billed time (target: at most 40%); whether the search picked the grid's best trial, and
the trials of the bad region (the learning rate 0.2, ten to a hundred times too high) that reached
a second rung (target: none). Knobs: ``LTP_BENCH_SEARCH_SOURCE`` (fashion-mnist),
``LTP_BENCH_SEARCH_LIMIT`` (images per split, 5000). About 35 minutes on 2 cores.

Prints; asserts only what must hold whatever the speed (both runs finished every trial).
"""

from __future__ import annotations

import json
import os
import time

import pytest
import yaml

from tests.benchmarks.cpu import versus

pytestmark = pytest.mark.benchmark

SOURCE = os.environ.get("LTP_BENCH_SEARCH_SOURCE", "fashion-mnist")
LIMIT = int(os.environ.get("LTP_BENCH_SEARCH_LIMIT", "5000"))
BAD_LEARNING_RATE = 0.2


def _run(root, spec) -> tuple[dict, float]:
    from pipelines.tools import run_search

    path = root / "search.yaml"
    path.write_text(yaml.safe_dump(spec))
    started = time.monotonic()
    code = run_search.main(
        ["--search", str(path), "--set", f"source={SOURCE} limit_per_split={LIMIT}", "--pipeline-root", str(root)]
    )  # make search's own search, as make search runs it
    wall = time.monotonic() - started
    assert code == 0
    (folder,) = root.glob("sweep-rows/search-*")
    return json.loads((folder / "search.json").read_text()), wall


def _settings(trial: dict) -> str:
    return trial["name"].split(" ", 1)[1]  # without the trial's index: the same settings in both runs


def _totals(record: dict) -> tuple[float, float, float]:
    trials = record["trials"]
    return (sum(t["seconds"] for t in trials), sum(t["startup_s"] for t in trials), sum(t["cost"] for t in trials))


def test_the_search_against_every_trial_trained_to_the_end(tmp_path):
    from pipelines.search import LOCAL_SEARCH

    search_root, grid_root = tmp_path / "search", tmp_path / "grid"
    search_root.mkdir()
    grid_root.mkdir()
    searched, search_wall = _run(search_root, LOCAL_SEARCH)
    full = {**LOCAL_SEARCH, "rungs": 1, "max_budget": LOCAL_SEARCH["max_budget"]}
    full.pop("min_budget", None)
    grid, grid_wall = _run(grid_root, full)
    assert len(searched["trials"]) == len(grid["trials"]) == 12

    print(f"\nsource {SOURCE}, {LIMIT} images per split; 12 trials; two at a time under kfp.local")
    for name, record, wall in (("search", searched, search_wall), ("full grid", grid, grid_wall)):
        billed, startup, cost = _totals(record)
        best = next(t for t in record["trials"] if t["key"] == record["choice"]["key"])
        print(
            f"{name:>9}: best {_settings(best)} accuracy {best['quality']:.4f}; billed {billed:.0f} s "
            f"(start-up {startup:.0f} s of it), ${cost:.4f}; wall {wall:.0f} s"
        )
    s_billed, s_startup, _ = _totals(searched)
    g_billed, g_startup, _ = _totals(grid)
    print(versus("search / full grid, billed time", s_billed / g_billed, "<= 0.40"))
    print(versus("  less start-up", (s_billed - s_startup) / (g_billed - g_startup), "n/a"))
    grid_rank = sorted(grid["trials"], key=lambda t: -(t.get("quality") or 0.0))
    picked = next(t for t in searched["trials"] if t["key"] == searched["choice"]["key"])
    place = [_settings(t) for t in grid_rank].index(_settings(picked)) + 1
    print(
        f"the search's pick is the full grid's #{place} of 12 (grid accuracy {grid_rank[place - 1]['quality']:.4f}, "
        f"the grid's best {grid_rank[0]['quality']:.4f}, spread of the grid's top 3 "
        f"{grid_rank[0]['quality'] - grid_rank[2]['quality']:.4f})"
    )
    bad = [t for t in searched["trials"] if f"learning_rate={BAD_LEARNING_RATE:g}" in t["name"]]
    print(f"bad region (learning rate {BAD_LEARNING_RATE:g}): {len(bad)} trials, reached rung 1: "
          f"{sum(t['rung'] >= 1 for t in bad)} (target 0)")  # fmt: skip
    for t in sorted(searched["trials"], key=lambda t: (-t["rung"], -(t.get("quality") or 0.0))):
        full_run = next(g for g in grid["trials"] if _settings(g) == _settings(t))
        print(
            f"  {_settings(t):<45} rung {t['rung']} {t['status']:<7} steps {t.get('steps') or 0:>5} "
            f"search {t.get('quality') or 0:.4f} | grid {full_run.get('quality') or 0:.4f} ({full_run['status']})"
        )
