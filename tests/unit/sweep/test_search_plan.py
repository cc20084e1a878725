"""The search's planning library: its file, the trials drawn, the rungs priced, the selection between
rungs, the frontier, the pick and the savings (pure functions: no training, no TensorFlow)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from components.sweep.search.plan import SearchPlan, describe_plan, plan_search, rung_sizes, rung_stops
from components.sweep.search.selection import TrialRow, pareto_frontier, pick, rank, savings, select_next
from components.sweep.search.space import Objective, SearchError, SearchSpec
from trainer.budget.pricing import hourly_cost, load_price_table

ROOT = Path(__file__).resolve().parents[3]
CASE_STUDY = ROOT / "components" / "sweep" / "case_study_search.yaml"
TPU3 = {"accelerator": "tpu-v3-8", "accelerator_type": "cloud-tpus.google.com/v3", "accelerator_count": 8}
TPU2 = {"accelerator": "tpu-v2-8", "accelerator_type": "cloud-tpus.google.com/v2", "accelerator_count": 8}
# No entry of the default price table: neither its name nor its request's key (gpu-16).
UNPRICED = {"accelerator": "a100-x16", "accelerator_type": "nvidia.com/gpu", "accelerator_count": 16}
BASE = {
    "space": {
        "accelerator": [TPU2, TPU3],
        "learning_rate": {"low": 1e-4, "high": 1e-2, "log": True},
        "image_size": [256, 384],
    },
    "trials": 9,
    "seed": 7,
    "rungs": 3,
    "eta": 3,
    "max_budget": "9m",
    "objective": {"kind": "best_within", "cost": 5},
}


def spec(**changes):
    return SearchSpec.from_dict({**BASE, **changes})


def plan(task_name="detection", price_table=None, **changes):
    return plan_search(spec(**changes), task_name, price_table)


def price(name):
    return sum(hourly_cost(load_price_table(), name))


def floated(data):
    """What kfp.local makes of a dict parameter: every int a float."""
    if isinstance(data, dict):
        return {k: floated(v) for k, v in data.items()}
    if isinstance(data, list):
        return [floated(v) for v in data]
    return float(data) if isinstance(data, int) and not isinstance(data, bool) else data


# ---------------------------------------------------------------------------------------------
# The file
# ---------------------------------------------------------------------------------------------


def test_a_search_file_reads_from_yaml_text_and_files_and_round_trips(tmp_path):
    text = (
        "space:\n  image_size: [256, 384]\n  accelerator: [cpu]\ntrials: 2\nrungs: 1\nmax_budget: 2m\n"
        "objective: frontier\n"
    )
    (tmp_path / "s.yaml").write_text(text)
    from_text, from_file = SearchSpec.from_yaml(text), SearchSpec.from_yaml(str(tmp_path / "s.yaml"))
    assert from_text == from_file and from_text.objective == Objective(kind="frontier")
    assert SearchSpec.from_dict(json.loads(json.dumps(from_text.to_dict()))) == from_text
    with pytest.raises(SearchError, match="unknown key in search; known keys: space, max_budget"):
        SearchSpec.from_dict({**BASE, "trails": 9})
    with pytest.raises(SearchError, match="expected a mapping"):
        SearchSpec.from_yaml("- a list\n- of things\n")


def test_objectives_take_what_their_kind_needs():
    assert Objective.from_dict({"kind": "best_within", "cost": "$40"}).dollars == 40.0
    assert Objective.from_dict({"kind": "best_within", "time": "2h"}).axis == "seconds"
    assert Objective.from_dict({"kind": "cheapest_reaching", "quality": 0.7, "x": "seconds"}).axis == "seconds"
    with pytest.raises(SearchError, match="best_within needs one budget"):
        Objective.from_dict({"kind": "best_within"})
    with pytest.raises(SearchError, match="best_within needs one budget"):
        Objective.from_dict({"kind": "best_within", "cost": 4, "time": "1h"})
    with pytest.raises(SearchError, match="cheapest_reaching needs quality"):
        Objective.from_dict({"kind": "cheapest_reaching"})
    with pytest.raises(SearchError, match="frontier takes no quality"):
        Objective.from_dict({"kind": "frontier", "quality": 0.5})
    with pytest.raises(SearchError, match="not an amount"):
        Objective.from_dict({"kind": "best_within", "cost": "lots"})
    with pytest.raises(SearchError, match="search.objective.kind: expected one of"):
        spec(objective="fastest")


# ---------------------------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------------------------


def test_random_trials_are_the_same_for_the_same_seed_with_stable_keys_and_typed_values():
    first, again = plan(), plan()
    assert [t.key for t in first.trials] == [t.key for t in again.trials]
    assert len({t.key for t in first.trials}) == 9
    assert [t.key for t in plan(seed=8).trials] != [t.key for t in first.trials]
    for trial in first.trials:
        assert 1e-4 <= trial.settings["learning_rate"] <= 1e-2
        assert trial.settings["image_size"] in (256, 384) and type(trial.settings["image_size"]) is int
        assert trial.cell.learning_rate == trial.settings["learning_rate"]
        assert trial.cell.accelerator == trial.settings["accelerator"] and trial.cell.strategy == "tpu"
    # kfp.local's floats for ints plan the same trials
    assert [t.key for t in plan_search(SearchSpec.from_dict(floated(BASE)), "detection").trials] == [
        t.key for t in first.trials
    ]
    # the budget is part of a key: a schedule laid out for another budget is another training
    assert plan(max_budget="18m").trials[0].key != first.trials[0].key


def test_grid_sampling_is_the_product_in_order_or_a_seeded_subset_of_it():
    space = {"accelerator": [TPU3], "image_size": [256, 512], "epochs": {"low": 4, "high": 10, "points": 3}}
    whole = plan(space=space, sampling="grid", trials=None, rungs=2, max_budget="3m")
    assert [(t.settings["epochs"], t.settings["image_size"]) for t in whole.trials] == [
        (4, 256), (4, 512), (7, 256), (7, 512), (10, 256), (10, 512)
    ]  # fmt: skip
    assert whole.trials[0].name == "t00 tpu-v3-8 epochs=4 image_size=256"
    subset = plan(space=space, sampling="grid", trials=4, rungs=2, max_budget="3m")
    keys = {t.key for t in whole.trials}
    assert len(subset.trials) == 4 and {t.key for t in subset.trials} <= keys
    assert [t.key for t in subset.trials] == [t.key for t in plan(space=space, sampling="grid", trials=4, rungs=2,
                                                                    max_budget="3m").trials]  # fmt: skip
    with pytest.raises(SearchError, match="the grid has 6 points; give at most 6"):
        plan(space=space, sampling="grid", trials=7, rungs=2, max_budget="3m")
    with pytest.raises(SearchError, match="learning_rate: grid sampling needs a list, or points: N"):
        plan(sampling="grid")


def test_log_ranges_of_whole_numbers_stay_whole_and_options_are_the_task_s():
    space = {
        "accelerator": ["cpu"],
        "batch_size_per_replica": {"low": 8, "high": 64, "log": True},
        "model_options.head": ["anchors"],  # the anchor head's own option below
        "model_options.anchor_size": {"low": 2, "high": 6},
        "model_options.head_convs": [1, 2],
    }
    drawn = plan(space=space, objective="frontier")
    for trial in drawn.trials:
        assert type(trial.cell.batch_size_per_replica) is int and 8 <= trial.cell.batch_size_per_replica <= 64
        assert isinstance(trial.cell.model_options["anchor_size"], float)  # a float option: a float range
        assert trial.cell.model_options["head_convs"] in (1, 2)
    assert len({t.cell.model_options["anchor_size"] for t in drawn.trials}) > 1


def test_fixed_settings_and_the_pipeline_s_defaults_reach_every_trial():
    fixed = {"model": "retinanet", "model_options": {"preset": "tpu-512"}, "batch_size_per_replica": 8}
    defaults = {"model_options": {"warmup_steps": 2}, "epochs": 3, "learning_rate": 0.008}
    drawn = plan_search(spec(fixed=fixed), "detection", defaults=defaults, context={"source": "shapes"})
    for trial in drawn.trials:
        assert trial.cell.model == "retinanet" and trial.cell.batch_size_per_replica == 8
        assert trial.cell.model_options == {"warmup_steps": 2, "preset": "tpu-512"}
    other = plan_search(spec(fixed=fixed), "detection", defaults=defaults, context={"source": "coco.json"})
    assert other.trials[0].key != drawn.trials[0].key  # other data, other trials


# ---------------------------------------------------------------------------------------------
# Rungs and their cost
# ---------------------------------------------------------------------------------------------


def test_rung_sizes_shrink_by_eta_and_budgets_grow_by_it():
    assert rung_sizes(12, 3, 3) == (12, 4, 2)
    assert rung_sizes(27, 4, 3) == (27, 9, 3, 1)
    assert rung_sizes(10, 2, 2) == (10, 5)
    assert rung_stops("seconds", 60.0, 540.0, 3, 3) == (60.0, 180.0, 540.0)
    assert rung_stops("seconds", None, 540.0, 3, 3) == (60.0, 180.0, 540.0)
    assert rung_stops("steps", None, 1000, 3, 3) == (111, 333, 1000)
    assert rung_stops("steps", 100, 400, 3, 2) == (100, 200, 400)
    with pytest.raises(SearchError, match="would not shrink.*12, 4, 2, 1, 1 trials.*rungs <= 4, or at least 28"):
        rung_sizes(12, 5, 3)
    with pytest.raises(
        SearchError,
        match=r"30s x eta\^\(rungs-1\) \(3\^2\) is 270s, but max_budget is 600s: set min_budget to 66.67s or "
        "max_budget to 270s",
    ):
        rung_stops("seconds", 30.0, 600.0, 3, 3)
    with pytest.raises(SearchError, match="first rung's budget, 20.0s, is under 30s.*max_budget >= 270s"):
        rung_stops("seconds", None, 180.0, 3, 3)
    with pytest.raises(SearchError, match="leaves the first rung no step; give max_budget >= 9 steps"):
        rung_stops("steps", None, 8, 3, 3)


def test_the_plan_prices_each_rung_s_worst_case_and_the_whole_grid():
    p = plan()
    assert [(r.trials, r.stop_s) for r in p.rungs] == [(9, 60.0), (3, 180.0), (1, 540.0)]
    prices = sorted((price(t.cell.accelerator) for t in p.trials), reverse=True)
    assert {t.price_per_hour for t in p.trials} <= {price("tpu-v2-8"), price("tpu-v3-8")}
    expected = [sum(prices) * 60 / 3600, sum(prices[:3]) * 120 / 3600, prices[0] * 360 / 3600]
    assert [r.worst_case_cost for r in p.rungs] == pytest.approx(expected)
    assert p.worst_case_cost == pytest.approx(sum(expected))
    assert p.grid_cost == pytest.approx(sum(prices) * 540 / 3600)
    assert p.worst_case_s == 9 * 60 + 3 * 120 + 360 and p.grid_s == 9 * 540
    assert p.time_budget == "540s"  # filled: no epochs searched
    # the plan travels between pipeline steps as JSON, ints as floats under kfp.local
    assert SearchPlan.from_dict(floated(json.loads(json.dumps(p.to_dict())))) == p


def test_budgets_in_steps_plan_rungs_without_prices():
    p = plan(max_budget=900, objective={"kind": "cheapest_reaching", "quality": 0.5, "x": "seconds"})
    assert p.unit == "steps" and p.stops == (100, 300, 900) and p.worst_case_cost is None and p.time_budget is None
    assert "budgets in steps are priced once the trials have run" in describe_plan(p)
    assert plan(max_budget="900 steps", min_budget=100).stops == (100, 300, 900)


def test_the_case_study_search_plans_and_prices_its_rungs_in_a_dry_run():
    p = plan_search(SearchSpec.from_yaml(str(CASE_STUDY)))
    assert p.task == "detection" and p.objective.metric == "ap50" and p.objective.higher_is_better
    assert len(p.trials) == 2 * 4 * 3 and len({t.key for t in p.trials}) == 24
    assert {t.cell.accelerator_type for t in p.trials} == {"cloud-tpus.google.com/v2", "cloud-tpus.google.com/v3"}
    assert {t.settings["image_size"] for t in p.trials} == {256, 384, 512, 640}
    assert {t.settings["epochs"] for t in p.trials} == {4, 7, 10}
    assert [(r.trials, r.stop_s) for r in p.rungs] == [(24, 600.0), (8, 1800.0), (3, 5400.0)]
    v2, v3 = price("tpu-v2-8"), price("tpu-v3-8")
    first, second, third = 12 * (v2 + v3) * 600 / 3600, 8 * v3 * 1200 / 3600, 3 * v3 * 3600 / 3600
    assert p.worst_case_cost == pytest.approx(first + second + third)
    assert p.grid_cost == pytest.approx(12 * (v2 + v3) * 5400 / 3600)
    assert p.worst_case_cost < p.spend_cap < p.grid_cost
    assert p.time_budget == "<=5400s"  # epochs is searched: a cap over each trial's own schedule
    text = describe_plan(p)
    for trial in p.trials:
        assert f"{trial.name}  [{trial.key}]" in text
    assert f"${p.worst_case_cost:.2f}" in text and f"${p.grid_cost:.2f}" in text
    assert "Rung 1: the best 8 of rung 0 (8 trials)" in text and "worst case 8 x tpu-v3-8" in text


# ---------------------------------------------------------------------------------------------
# Bad input: each a planning error that says what to change
# ---------------------------------------------------------------------------------------------

BAD = [
    ({"space": {}}, "detection", "expected a non-empty mapping of dimension"),
    ({"space": {"image_size": []}}, "detection", "expected a non-empty list or a range"),
    ({"space": {"learning_rate": {"low": 0.1, "high": 0.01}}}, "detection", "low 0.1 is above high 0.01; swap"),
    ({"space": {"learning_rate": {"low": 0, "high": 0.1, "log": True}}}, "detection", "a log range needs low > 0"),
    ({"space": {"dropout_rate": [0.1]}}, "detection", "unknown dimension; known: accelerator, model"),
    ({"space": {"accelerator": [TPU3], "image_size": [64]}}, "classification", "trains at the dataset's image size"),
    (
        {"space": {"accelerator": [TPU3], "model_options.anchor_size": [2.0]}},
        "classification",
        "classification's model has no option 'anchor_size'; its options: backbone, weights",
    ),
    ({"space": {"accelerator": [TPU3], "model_options.block_type": {"low": 1, "high": 2}}}, "detection", "no range"),
    ({"trials": 3, "rungs": 3}, "detection", "rungs <= 2, or at least 4 trials"),
    ({"eta": 1}, "detection", "search.eta: 1; give 2 or more"),
    ({"rungs": 0}, "detection", "search.rungs: 0; give 1 or more"),
    ({"metric": "accuracy"}, "detection", "task 'detection' reports no metric 'accuracy'; its metrics: ap, ap50"),
    (
        {"space": {**BASE["space"], "accelerator": [TPU3, UNPRICED]}},
        "detection",
        r"the objective \(best ap50 within \$5\) weighs dollars, and the price table has no 'gpu-16' "
        r"\(a100-x16: nvidia.com/gpu x 16\); add it to a price table of your own",
    ),
    (
        {
            "space": {**BASE["space"], "accelerator": [UNPRICED]},
            "objective": {"kind": "frontier", "x": "seconds"},
            "spend_cap": 100,
        },
        "detection",
        "spend_cap weighs dollars",
    ),  # fmt: skip
    ({"spend_cap": 0.5}, "detection", r"spend_cap \$0.5 is below the first rung alone: 9 trials x 1min 00s .* cost"),
    ({"max_budget": 900, "spend_cap": 50}, "detection", "budgets in steps cannot be priced"),
    ({"min_budget": "2m"}, "detection", "min_budget 120s x eta.*set min_budget to 60s or max_budget to 1080s"),
    ({"min_budget": "2m", "max_budget": 900}, "detection", "give both as durations"),
    ({"max_budget": "<=9m"}, "detection", "is a cap"),
    ({"max_budget": 900, "fixed": {"epochs": 3}}, "detection", "budgets in steps set each trial's length"),
    ({"sampling": "random", "trials": None}, "detection", "random sampling needs the number of trials"),
    ({"space": {"accelerator": [TPU3], "image_size": [256, 384]}}, "detection", "only 2 distinct points"),
    ({"space": {"image_size": [256]}, "trials": 1, "rungs": 1}, "detection", "no accelerator; give space.accelerator"),
    ({"space": {"accelerator": [{"accelerator": "x", "gpus": 2}]}}, "detection", "a CPU's name or a mapping"),
    ({"fixed": {"image_size": 512}}, "detection", r"\['image_size'\] given in both space and fixed"),
    ({"fixed": {"repeats": 3}}, "detection", "unknown setting"),
    ({"task": "classification"}, "detection", "written for task 'classification'"),
    (
        {
            "space": {"accelerator": [TPU3], "model_options.head": ["anchors"], "model_options.box_loss": ["l1", "l3"]},
            "trials": 2,
            "rungs": 1,
        },
        "detection",
        "search trial t01 tpu-v3-8 box_loss=l3 head=anchors: model_options.box_loss: unknown 'l3'; choose one of l1",
    ),
    ({"space": {"accelerator": [TPU3], "model_options.head_convs": ["two"]}}, "detection", "expected an integer"),
]


@pytest.mark.parametrize(("changes", "task", "message"), BAD, ids=[m[:40] for _, _, m in BAD])
def test_bad_input_is_a_planning_error_that_names_the_fix(changes, task, message):
    with pytest.raises(SearchError, match=message):
        plan(task, **changes)


def test_an_accelerator_the_price_table_lacks_is_fine_unless_dollars_are_weighed(tmp_path):
    unpriced = plan(
        space={**BASE["space"], "accelerator": [TPU3, UNPRICED]}, objective={"kind": "frontier", "x": "seconds"}
    )
    assert unpriced.worst_case_cost is None and "a100-x16" in unpriced.unpriced
    assert "no price for a100-x16" in describe_plan(unpriced)
    # ... and a price table of one's own prices it (its request's key, the train step's)
    table = tmp_path / "prices.yaml"
    table.write_text("accelerators:\n  gpu-16:\n    price_per_hour: 40.0\n    kind: gpu\n    cores: 16\n")
    priced = plan(price_table=str(table), space={**BASE["space"], "accelerator": [TPU3, UNPRICED]})
    assert {t.price_key for t in priced.trials} == {"tpu-v3-8", "gpu-16"} and priced.worst_case_cost is not None


# ---------------------------------------------------------------------------------------------
# Selection between rungs
# ---------------------------------------------------------------------------------------------


def rows_of(p, qualities, costs=None, status=None, rung=0):
    return [
        {
            "key": t.key,
            "status": (status or {}).get(i, "ok"),
            "quality": q,
            "cost": (costs or {}).get(i, 1.0),
            "seconds": 60.0,
            "rung": rung,
        }
        for i, (t, q) in enumerate(zip(p.trials, qualities, strict=True))
    ]


def test_the_best_third_go_on_failed_and_stopped_trials_never_do():
    p = plan()
    rows = rows_of(p, [0.1, 0.9, 0.5, 0.8, 0.3, 0.7, 0.2, 0.6, 0.4], status={1: "failed", 3: "stopped"})
    rows[1]["reason"] = "OOM"
    keys = [t.key for t in p.trials]
    assert select_next(p, 0, rows) == [keys[5], keys[7], keys[2]]
    # a trial without a quality cannot be ranked, and a rung short of ok trials promotes fewer
    few = rows_of(p, [None, 0.9, None, None, None, None, None, None, 0.4])
    assert select_next(p, 0, few) == [keys[1], keys[8]]
    # ties go the same way every time: lower cost, then the smaller key
    tied = rows_of(p, [0.5] * 9, costs={4: 0.5})
    assert select_next(p, 0, tied)[0] == keys[4]
    assert select_next(p, 0, tied)[1:] == sorted(k for k in keys if k != keys[4])[:2]
    assert select_next(p, 0, list(reversed(tied))) == select_next(p, 0, tied)


def test_the_objective_decides_the_order():
    p = plan(objective={"kind": "cheapest_reaching", "quality": 0.6})
    k = [t.key for t in p.trials]
    rows = rows_of(p, [0.9, 0.65, 0.7, 0.5, 0.55, 0.1, 0.2, 0.3, 0.4], costs={0: 3.0, 1: 1.0, 2: 2.0})
    # reaching 0.6: cheapest first (t1, t2, t0), then the rest by quality
    assert [r.key for r in rank(p.objective, rows)][:5] == [k[1], k[2], k[0], k[4], k[3]]
    within = plan(objective={"kind": "best_within", "cost": 2.5})
    assert [r.key for r in rank(within.objective, rows)][:3] == [k[2], k[1], k[4]]  # t0 costs 3: last of its peers
    frontier = plan(objective="frontier")
    # the frontier of quality against cost: t1 (0.65, $1), t2 (0.7, $2), t0 (0.9, $3); by quality
    assert [r.key for r in rank(frontier.objective, rows)][:3] == [k[0], k[2], k[1]]
    # a metric where lower is better (a loss): 0.1 and 0.2 reach 0.2, $1 each; 0.1 is the better
    loss = Objective(kind="cheapest_reaching", quality=0.2, metric="loss", higher_is_better=False)
    assert [r.key for r in rank(loss, rows)][:2] == [k[5], k[6]]


def test_a_spend_cap_stops_promotions_it_cannot_afford():
    p = plan(spend_cap=2.2)  # 9 x $0.20 spent leaves $0.40: not three more rungs, at least one
    rows = rows_of(p, [0.1, 0.9, 0.5, 0.8, 0.3, 0.7, 0.2, 0.6, 0.4], costs=dict.fromkeys(range(9), 0.2))
    promoted = select_next(p, 0, rows)
    ranked = [r["key"] for r in sorted(rows, key=lambda r: -r["quality"])][:3]
    added = [p.trial(key).price_per_hour * 120 / 3600 for key in ranked]
    left = 2.2 - 9 * 0.2
    expected = [key for i, key in enumerate(ranked) if sum(added[: i + 1]) <= left]
    assert promoted == expected and 1 <= len(promoted) < 3
    assert select_next(p, 0, rows, spent=0.0) == ranked  # nothing spent yet: all three fit


def test_selection_refuses_what_is_not_the_plan_s():
    p = plan()
    rows = rows_of(p, [0.5] * 9)
    with pytest.raises(SearchError, match="rung 2; the selection runs after rungs 0 to 1"):
        select_next(p, 2, rows)
    with pytest.raises(SearchError, match="no trial of this search has the key 'nope'"):
        select_next(p, 0, [*rows[:3], {"key": "nope", "status": "ok", "quality": 1.0}])
    with pytest.raises(SearchError, match="given more than once"):
        select_next(p, 0, [rows[0], rows[0]])
    with pytest.raises(SearchError, match=r"rows\[0\].status: expected one of"):
        select_next(p, 0, [{**rows[0], "status": "running"}])
    with pytest.raises(SearchError, match="metric and direction are unset"):
        rank(Objective(kind="frontier"), rows)


# ---------------------------------------------------------------------------------------------
# The frontier, the pick, the savings
# ---------------------------------------------------------------------------------------------

ROWS = [
    TrialRow("a", "ok", quality=0.50, cost=1.0, seconds=300.0, metrics={"ap": 0.30}),
    TrialRow("b", "ok", quality=0.70, cost=2.0, seconds=200.0, metrics={"ap": 0.35}),
    TrialRow("c", "ok", quality=0.60, cost=3.0, seconds=900.0, metrics={"ap": 0.50}),
    TrialRow("d", "stopped", quality=0.90, cost=5.0, seconds=1000.0),
    TrialRow("e", "failed", cost=0.1, seconds=20.0, reason="ResourceExhaustedError: OOM"),
]


def test_the_pareto_frontier_against_cost_and_time():
    assert [r.key for r in pareto_frontier(ROWS)] == ["a", "b", "d"]
    assert [r.key for r in pareto_frontier(ROWS, x="seconds")] == ["b", "d"]
    assert [r.key for r in pareto_frontier(ROWS, metric="ap")] == ["a", "b", "c"]
    assert [r.key for r in pareto_frontier(ROWS, higher_is_better=False)] == ["a"]
    with pytest.raises(SearchError, match="x must be cost or seconds"):
        pareto_frontier(ROWS, x="dollars")


def resolved(**data):
    return Objective.from_dict({"metric": "ap50", "higher_is_better": True, **data})


def test_the_pick_is_the_objective_s_choice_or_none_with_the_reason():
    best = pick(resolved(kind="best_within", cost=3), ROWS)
    assert best.key == "b" and "best ap50 within $3: b, ap50 0.7 for $2.00" == best.reason
    assert pick(resolved(kind="best_within", time="10m"), ROWS).key == "b"
    none = pick(resolved(kind="best_within", cost=0.5), ROWS)
    assert none.key is None and none.reason == "no trial within $0.5: the least was a at $1.00"
    assert pick(resolved(kind="cheapest_reaching", quality=0.55), ROWS).key == "b"
    assert pick(resolved(kind="cheapest_reaching", quality=0.55, x="seconds"), ROWS).key == "b"
    missed = pick(resolved(kind="cheapest_reaching", quality=0.95), ROWS)
    assert missed.key is None and missed.reason == "no trial reached ap50 0.95; the best was d at 0.9"
    frontier = pick(resolved(kind="frontier"), ROWS)
    assert frontier.key == "d" and "frontier" in frontier.reason
    assert pick(resolved(kind="frontier"), ROWS[-1:]).key is None


def test_savings_count_what_stopping_early_did_not_spend():
    p = plan()  # stops at 60s, 180s, 540s
    k = [t.key for t in p.trials]
    rows = [
        {"key": k[0], "status": "ok", "quality": 0.9, "cost": 0.5, "seconds": 540.0, "rung": 2},
        {"key": k[1], "status": "ok", "quality": 0.5, "cost": 0.1, "seconds": 70.0, "rung": 0},
        {"key": k[2], "status": "failed", "seconds": 10.0, "rung": 0, "reason": "OOM"},
    ]
    result = savings(rows, p)
    assert result.trials == 3 and result.spent_s == 620.0
    assert result.full_s == 540.0 + (70.0 + 480.0) + 10.0  # the failed trial would have failed the same way
    price_1, price_2 = p.trial(k[1]).price_per_hour, p.trial(k[2]).price_per_hour
    assert result.spent_cost == pytest.approx(0.5 + 0.1 + 10 * price_2 / 3600)
    assert result.full_cost == pytest.approx(result.spent_cost + 480 * price_1 / 3600)
    assert result.saved_s == 480.0 and "of the billed time" in result.line()
    steps = plan(max_budget=900)  # stops at 100, 300, 900 steps: the rest at the trial's own pace
    row = {"key": steps.trials[0].key, "status": "ok", "quality": 0.5, "seconds": 50.0, "rung": 0}
    assert savings([row], steps).full_s == 450.0
    with pytest.raises(SearchError, match="savings need the rung"):
        savings([{**rows[0], "rung": None}], p)


def test_planning_imports_no_tensorflow():
    code = (
        "import sys, components.sweep.search.plan, components.sweep.search.selection; "
        "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
