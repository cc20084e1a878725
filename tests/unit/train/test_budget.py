"""Budgets without TensorFlow: reading them, pricing the step, laying the schedule out, the clock."""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainer.budget import layout as budget_layout
from trainer.budget.layout import (
    EVALUATION_SHARE,
    MARGIN,
    STEP_MARGIN,
    TARGET_EVALUATIONS,
    BudgetPlan,
    Deadline,
    lay_out,
    minimum_interval_s,
    plan,
)
from trainer.budget.limits import (
    AUTO,
    MIN_BUDGET_S,
    Budget,
    BudgetError,
    parse_cost_budget,
    parse_patience,
    parse_time_budget,
    resolve_patience,
)
from trainer.budget.pricing import (
    DEFAULT_PRICE_TABLE,
    PriceTableError,
    load_price_table,
    preset_price_key,
    price_key,
    price_of,
)
from trainer.config import ConfigError, TrainConfig

REPO = Path(__file__).resolve().parents[3]
# A calibration's figures: 20 s of start-up and calibration (5 s of it timing steps), 50 ms steps,
# 3 s evaluations, 10 s for the export.
MEASURED = {"elapsed_s": 20.0, "calibration_s": 5.0, "step_s": 0.05, "eval_s": 3.0, "export_s": 10.0}


def _one_line(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------------------------------------
# Reading the run form's text.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90.0), ("10m", 600.0), ("2h", 7200.0), ("1.5h", 5400.0), (" 45 S ", 45.0), (".5m", 30.0)],
)
def test_a_time_budget_reads_as_seconds(text, seconds):
    assert parse_time_budget(text) == seconds


@pytest.mark.parametrize("text", ["auto", "AUTO", "", None])
def test_auto_empty_or_none_is_no_time_budget(text):
    assert parse_time_budget(text) is None


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("5", "needs its unit"),
        ("-1m", "give a positive number with s, m or h"),
        ("10x", "give a positive number with s, m or h"),
        ("abc", "give a positive number with s, m or h"),
        ("10s", f"give at least {MIN_BUDGET_S:.0f}s"),
    ],
)
def test_a_bad_time_budget_is_one_line_naming_the_valid_form(text, named):
    with pytest.raises(BudgetError) as err:
        parse_time_budget(text)
    message = _one_line(err)
    assert message.startswith(f"train.time_budget: {text!r}")
    assert named in message


def test_a_number_without_a_unit_is_not_taken_as_seconds():
    with pytest.raises(BudgetError, match="a number needs its unit"):
        parse_time_budget("600")
    with pytest.raises(BudgetError) as err:
        parse_time_budget("10m0")
    assert "needs its unit" not in str(err.value)  # only a bare number gets the hint


def test_the_least_time_budget_is_accepted_and_just_under_it_is_not():
    assert parse_time_budget(f"{MIN_BUDGET_S:g}s") == MIN_BUDGET_S
    with pytest.raises(BudgetError, match="is under 30s"):
        parse_time_budget(f"{MIN_BUDGET_S - 0.5:g}s")


@pytest.mark.parametrize("value", ["2.50", "$2.50", " $ 2.5 ", 2.5, "2.5"])
def test_a_cost_budget_reads_as_dollars(value):
    assert parse_cost_budget(value) == 2.5


@pytest.mark.parametrize("value", ["auto", "", None])
def test_auto_is_no_cost_budget(value):
    assert parse_cost_budget(value) is None


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", "inf", "$-2"])
def test_a_bad_cost_budget_is_one_line_naming_us_dollars(value):
    with pytest.raises(BudgetError) as err:
        parse_cost_budget(value)
    message = _one_line(err)
    assert message.startswith("train.cost_budget: ")
    assert "US dollars" in message


@pytest.mark.parametrize(("value", "patience"), [("auto", AUTO), ("", AUTO), ("off", None), ("OFF", None), ("3", 3)])
def test_patience_reads_auto_off_or_a_number(value, patience):
    assert parse_patience(value) == patience


@pytest.mark.parametrize("value", ["-2", "0", "x", "1.5", "3 evaluations"])
def test_a_bad_patience_is_one_line_naming_the_choices(value):
    with pytest.raises(BudgetError) as err:
        parse_patience(value)
    message = _one_line(err)
    assert message.startswith(f"train.patience: {value!r}")
    assert "auto" in message and "off" in message


@pytest.mark.parametrize(("evaluations", "patience"), [(6, 3), (9, 3), (10, 4), (30, 10), (31, 11)])
def test_auto_patience_is_a_third_of_the_evaluations_at_least_three(evaluations, patience):
    assert resolve_patience(AUTO, evaluations) == patience


@pytest.mark.parametrize("evaluations", [1, 3, 5])
def test_auto_patience_is_off_for_a_run_of_few_evaluations(evaluations):
    assert resolve_patience(AUTO, evaluations) is None
    assert resolve_patience(2, evaluations) == 2  # a patience given is kept


def test_a_given_patience_is_kept_and_off_stays_off():
    assert resolve_patience(5, 30) == 5
    assert resolve_patience(1, 30) == 1
    assert resolve_patience(None, 30) is None


# ---------------------------------------------------------------------------------------------
# The budget: time and money.
# ---------------------------------------------------------------------------------------------


def test_no_budget_has_no_limit():
    assert Budget().limit_s is None


def test_the_tighter_of_time_and_money_holds():
    # $1 at $8.19/h buys 439.6 s: tighter than 10 minutes, looser than 5.
    money = 1.0 / 8.19 * 3600.0
    cost_holds = Budget(seconds=600.0, dollars=1.0, price_key="tpu-v3-8", price_per_hour=8.19)
    assert cost_holds.limit_s == pytest.approx(money)
    assert cost_holds.describe().startswith("cost_budget $1 at tpu-v3-8 ($8.19/h): ")
    time_holds = Budget(seconds=300.0, dollars=1.0, price_key="tpu-v3-8", price_per_hour=8.19)
    assert time_holds.limit_s == 300.0
    assert time_holds.describe() == "time_budget 5m"
    assert Budget(dollars=1.0, price_key="tpu-v3-8", price_per_hour=8.19).limit_s == pytest.approx(money)
    assert Budget(seconds=90.0).describe() == "time_budget 90s"
    assert Budget(seconds=7200.0).describe() == "time_budget 2h"


def test_money_sets_no_limit_on_free_hardware():
    free = Budget(seconds=600.0, dollars=0.01, price_key="laptop", price_per_hour=0.0)
    assert free.limit_s == 600.0
    assert free.describe() == "time_budget 10m"
    assert free.cost(600.0) == 0.0


def test_a_cost_is_seconds_at_the_hourly_price():
    priced = Budget(dollars=1.0, price_key="tpu-v3-8", price_per_hour=8.19)
    assert priced.cost(3600.0) == pytest.approx(8.19)
    assert Budget(seconds=60.0).cost(60.0) is None  # no price known


# ---------------------------------------------------------------------------------------------
# Laying the training time out in evaluation intervals.
# ---------------------------------------------------------------------------------------------

LAYOUT_CASES = [
    # available_s, step_s, eval_s, steps_per_execution
    (600.0, 0.05, 3.0, 1),
    (600.0, 0.05, 3.0, 32),
    (3600.0, 0.2, 0.0, 1),
    (100.0, 0.01, 30.0, 1),  # evaluations are most of the time: one interval only
    (500.0, 0.01, 10.0, 8),  # evaluations limited by their share
    (4.0, 0.1, 2.5, 1),  # just over one interval (10 steps and a validation: 3.5 s)
    (86_400.0, 1.3, 45.0, 4),
]


@pytest.mark.parametrize(("available", "step", "evaluation", "per_execution"), LAYOUT_CASES)
def test_a_layout_fills_the_time_it_is_given(available, step, evaluation, per_execution):
    layout = lay_out(available, step, evaluation, per_execution)
    predicted = layout.seconds(step, evaluation)
    assert predicted <= available
    # Each interval loses less than one execution to whole steps.
    assert available - predicted < layout.evaluations * per_execution * step + 1e-9
    assert layout.steps == layout.evaluations * layout.steps_per_evaluation


@pytest.mark.parametrize(("available", "step", "evaluation", "per_execution"), LAYOUT_CASES)
def test_a_layout_is_whole_executions_in_at_most_the_target_evaluations(available, step, evaluation, per_execution):
    layout = lay_out(available, step, evaluation, per_execution)
    assert 1 <= layout.evaluations <= TARGET_EVALUATIONS
    assert layout.steps_per_evaluation % per_execution == 0
    assert layout.steps_per_evaluation >= budget_layout.MIN_STEPS_PER_EVALUATION


def test_a_long_budget_gets_the_target_evaluations():
    assert lay_out(3600.0, 0.05, 3.0).evaluations == TARGET_EVALUATIONS
    assert lay_out(3600.0, 0.05, 0.0).evaluations == TARGET_EVALUATIONS


def test_slow_evaluations_take_at_most_their_share_and_one_is_always_left():
    limited = lay_out(500.0, 0.01, 10.0)
    assert limited.evaluations == 7  # 15 % of 500 s is 75 s: 7 evaluations of 10 s
    assert limited.evaluations * 10.0 <= EVALUATION_SHARE * 500.0
    alone = lay_out(100.0, 0.01, 30.0)  # one evaluation is already 30 % of the time
    assert alone.evaluations == 1
    assert alone.seconds(0.01, 30.0) <= 100.0


def test_a_short_budget_gets_fewer_evaluations_of_at_least_the_least_steps():
    layout = lay_out(6.0, 0.1, 0.05)  # one interval at least 10 steps and a validation: 1.05 s
    assert layout.evaluations == 5
    assert layout.steps_per_evaluation == 11


def test_time_for_less_than_one_interval_names_what_one_needs():
    shortest = minimum_interval_s(0.1, 2.0)
    assert shortest == pytest.approx(3.0)
    with pytest.raises(BudgetError) as err:
        lay_out(2.5, 0.1, 2.0)
    message = _one_line(err)
    assert "leaves 2.5s for training" in message
    assert "10 steps" in message and "3.0s" in message
    # With 8 steps per execution an interval is 16 steps.
    with pytest.raises(BudgetError, match=r"16 steps at 0\.1s .*: 3\.6s\)"):
        lay_out(3.5, 0.1, 2.0, steps_per_execution=8)
    with pytest.raises(BudgetError, match="leaves 0.0s"):
        lay_out(-5.0, 0.1, 2.0)


def test_a_layout_needs_a_positive_step_time():
    with pytest.raises(ValueError, match="step time > 0"):
        lay_out(600.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="evaluation time >= 0"):
        lay_out(600.0, 0.1, -1.0)


# ---------------------------------------------------------------------------------------------
# The plan: what a budget buys once the calibration measured the step.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("per_execution", [1, 16])
def test_a_plan_predicts_a_time_just_under_the_budget(per_execution):
    budget = Budget(seconds=600.0)
    planned = plan(budget, steps_per_execution=per_execution, **MEASURED)
    aim = 600.0 * (1 - MARGIN)
    assert planned.predicted_s <= aim
    # Short of the aim by at most the whole executions each interval rounds away.
    assert aim - planned.predicted_s < planned.evaluations * per_execution * MEASURED["step_s"] * STEP_MARGIN + 1e-3
    assert planned.steps == planned.evaluations * planned.steps_per_evaluation
    assert planned.steps_per_evaluation % per_execution == 0
    # The prediction counts the steps STEP_MARGIN slower than measured.
    intervals = planned.evaluations * (planned.steps_per_evaluation * MEASURED["step_s"] * STEP_MARGIN + 3.0)
    assert planned.predicted_s == pytest.approx(20.0 + intervals + 10.0, abs=1e-3)


def test_a_plan_records_what_it_was_laid_out_from():
    planned = plan(Budget(seconds=600.0), **MEASURED)
    assert planned.limit == "time_budget 10m"
    assert planned.budget_s == 600.0
    assert planned.startup_s == 15.0  # elapsed less the calibration
    assert planned.calibration_s == 5.0
    assert (planned.step_s, planned.eval_s, planned.export_s) == (0.05, 3.0, 10.0)
    assert planned.spent_before_s == 0.0
    assert planned.price_key is None and planned.predicted_cost is None
    assert (
        f"{planned.steps} steps ({planned.evaluations} evaluations x {planned.steps_per_evaluation})" in planned.line()
    )


def test_a_resumed_run_plans_fewer_steps_than_a_fresh_one():
    fresh = plan(Budget(seconds=600.0), **MEASURED)
    resumed = plan(Budget(seconds=600.0), spent_before_s=200.0, **MEASURED)
    assert resumed.steps < fresh.steps
    assert resumed.spent_before_s == 200.0
    assert resumed.predicted_s <= 600.0 * (1 - MARGIN)  # the time spent before counts
    assert "200s spent before a restart" in resumed.line()


def test_a_cost_budget_predicts_its_cost_at_the_price():
    budget = Budget(dollars=1.0, price_key="tpu-v3-8", price_per_hour=8.19)
    planned = plan(budget, **MEASURED)
    assert planned.budget_s == pytest.approx(1.0 / 8.19 * 3600.0, abs=1e-3)
    assert planned.predicted_cost == pytest.approx(planned.predicted_s * 8.19 / 3600.0, abs=1e-5)
    assert planned.predicted_cost <= 1.0 * (1 - MARGIN)
    assert (planned.price_key, planned.price_per_hour) == ("tpu-v3-8", 8.19)
    assert planned.limit.startswith("cost_budget $1 at tpu-v3-8")


def test_a_plan_needs_a_budget():
    with pytest.raises(ValueError, match="no budget to plan"):
        plan(Budget(), **MEASURED)


@pytest.mark.parametrize(
    ("measured", "per_execution", "spent_before"),
    [
        (MEASURED, 1, 0.0),
        (MEASURED, 64, 0.0),
        (MEASURED, 1, 120.0),
        ({"elapsed_s": 41.7, "calibration_s": 9.2, "step_s": 0.731, "eval_s": 12.3, "export_s": 33.3}, 8, 17.9),
        ({"elapsed_s": 6.0, "calibration_s": 1.0, "step_s": 0.002, "eval_s": 0.0, "export_s": 0.4}, 1, 0.0),
    ],
)
def test_a_budget_too_small_names_the_least_budget_and_that_one_plans(measured, per_execution, spent_before):
    too_small = Budget(seconds=spent_before + measured["elapsed_s"] + measured["export_s"])
    with pytest.raises(BudgetError) as err:
        plan(too_small, steps_per_execution=per_execution, spent_before_s=spent_before, **measured)
    message = _one_line(err)
    assert message.startswith(f"{too_small.describe()} cannot buy one evaluation interval: ")
    least = int(re.search(r"Give at least (\d+)s$", message)[1])
    enough = plan(
        Budget(seconds=float(least)), steps_per_execution=per_execution, spent_before_s=spent_before, **measured
    )
    assert enough.evaluations >= 1 and enough.steps_per_evaluation >= 10
    with pytest.raises(BudgetError):  # and the least is the least, give or take the rounding up
        plan(Budget(seconds=least - 1.0), steps_per_execution=per_execution, spent_before_s=spent_before, **measured)


def test_a_cost_budget_alone_on_free_hardware_is_refused_with_a_message_not_a_crash(tmp_path):
    """Money sets no limit on free hardware, so a cost budget there buys unbounded time: the
    config or the plan must say so, not fail laying out infinite seconds."""
    table = tmp_path / "prices.yaml"
    table.write_text("accelerators:\n  gpu-2:\n    price_per_hour: 0\n    kind: gpu\n    cores: 2\n")
    try:
        config = TrainConfig(
            epochs=None, cost_budget="1", accelerator_type="nvidia.com/gpu", accelerator_count=2, price_table=str(table)
        )
    except ConfigError as err:
        assert "cost_budget" in str(err)
        return
    free = config.limits.budget
    assert (free.price_key, free.price_per_hour) == ("gpu-2", 0.0)
    with pytest.raises(BudgetError):
        plan(free, **MEASURED)


# ---------------------------------------------------------------------------------------------
# The plan as recorded in training.json.
# ---------------------------------------------------------------------------------------------


def test_a_plan_reads_back_from_its_json():
    planned = plan(Budget(dollars=1.0, price_key="tpu-v3-8", price_per_hour=8.19), spent_before_s=12.5, **MEASURED)
    again = BudgetPlan.from_dict(json.loads(json.dumps(planned.to_dict())))
    assert again == planned
    assert again.line() == planned.line()


def test_a_plan_written_by_a_newer_version_keeps_the_keys_it_does_not_know():
    data = plan(Budget(seconds=600.0), **MEASURED).to_dict()
    data["rung"] = {"name": "first", "steps": 100}
    read = BudgetPlan.from_dict(data)
    assert dict(read.extra) == {"rung": {"name": "first", "steps": 100}}
    assert read.to_dict() == data


# ---------------------------------------------------------------------------------------------
# The clock.
# ---------------------------------------------------------------------------------------------


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_deadline_counts_the_time_spent_before_and_since_the_start():
    clock = FakeClock(1000.0)
    deadline = Deadline(budget_s=600.0, started_at=990.0, spent_before_s=100.0, clock=clock)
    assert deadline.spent_s() == 110.0
    assert deadline.left_s() == 490.0
    clock.now = 1090.0
    assert deadline.spent_s() == 200.0
    assert deadline.left_s() == 400.0
    clock.now = 1600.0
    assert deadline.left_s() == -110.0  # over: negative


def test_the_process_started_before_now():
    assert budget_layout.process_started_at() <= time.time()


def test_the_process_start_is_read_to_about_a_second():
    # A fresh process: its start lies between this moment and its own first reading of the clock
    # (/proc counts the boot time in whole seconds).
    before = time.time()
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import time; from trainer.budget import layout; print(layout.process_started_at(), time.time())",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    started, now = map(float, out.split())
    assert before - 1.5 <= started <= now


# ---------------------------------------------------------------------------------------------
# The price key of the step's accelerator.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accelerator_type", "count", "key"),
    [
        ("", 0, "cpu-2"),
        ("nvidia.com/gpu", 0, "cpu-2"),
        ("cloud-tpus.google.com/v2", 8, "tpu-v2-8"),
        ("cloud-tpus.google.com/v3", 32, "tpu-v3-32"),
        ("cloud-tpus.google.com/preemptible-v2", 8, "preemptible-tpu-v2-8"),
        ("nvidia.com/gpu", 1, "gpu-1"),
        ("google.com/tpu", 4, "tpu-4"),
    ],
)
def test_the_price_key_of_a_pod_request(accelerator_type, count, key):
    assert price_key(accelerator_type, count, cpus=2) == key


@pytest.mark.parametrize(
    ("preset", "key"),
    [
        ("tpu-v3-8", "tpu-v3-8"),
        ("preemptible-v2-8", "preemptible-tpu-v2-8"),
        ("gpu-4-nvidia-tesla-v100", "gpu-4"),
        ("gpu-1", "gpu-1"),
        ("gke-tpu-v5e-2x4", "gke-tpu-v5e-2x4"),
        ("cpu", "cpu"),
    ],
)
def test_the_price_key_of_a_preset(preset, key):
    assert preset_price_key(preset) == key


def test_a_legacy_tpu_or_gpu_preset_is_priced_as_its_pod_request():
    from pipelines.accelerators import GKE_TPU_RESOURCE, PRESETS

    for name, preset in PRESETS.items():
        if preset.accelerator_type in (None, GKE_TPU_RESOURCE):
            continue  # CPU only, or a GKE TPU whose generation is in node selectors
        assert price_key(preset.accelerator_type, preset.accelerator_count) == preset_price_key(name), name


def test_every_accelerator_preset_has_a_price_in_the_default_table():
    from pipelines.accelerators import PRESETS

    table = load_price_table()
    unpriced = [name for name in PRESETS if preset_price_key(name) not in table]
    assert unpriced == []


def test_a_price_includes_the_host_a_tpu_slice_needs():
    table = load_price_table()
    key, per_hour = price_of("cloud-tpus.google.com/v3", 32)
    assert key == "tpu-v3-32"
    assert per_hour == pytest.approx(table["tpu-v3-32"].price_per_hour + table["cpu-4"].price_per_hour)
    assert price_of("cloud-tpus.google.com/v3", 8) == ("tpu-v3-8", 8.19)


def test_an_unpriced_accelerator_names_the_table_and_the_key(tmp_path):
    with pytest.raises(PriceTableError) as err:
        price_of("nvidia.com/gpu", 16)
    message = _one_line(err)
    assert "'gpu-16'" in message and str(DEFAULT_PRICE_TABLE) in message
    own = tmp_path / "mine.yaml"
    own.write_text("accelerators:\n  laptop:\n    price_per_hour: 0\n    kind: cpu\n")
    with pytest.raises(PriceTableError) as err:
        price_of("google.com/tpu", 4, price_table=str(own))
    assert f"{own} over {DEFAULT_PRICE_TABLE}" in str(err.value) and "'tpu-4'" in str(err.value)


# ---------------------------------------------------------------------------------------------
# TrainConfig's budget fields.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"time_budget": "5"}, "train.time_budget: '5'"),
        ({"time_budget": "-1m"}, "train.time_budget: '-1m'"),
        ({"cost_budget": "abc"}, "train.cost_budget: 'abc'"),
        ({"patience": "-2"}, "train.patience: '-2'"),
        ({"patience": 0}, "train.patience: '0'"),
        ({"cost_budget": "1", "accelerator_type": "google.com/tpu", "accelerator_count": 4}, "train.cost_budget: "),
    ],
)
def test_a_bad_budget_in_the_config_is_one_line_naming_the_field(fields, named):
    with pytest.raises(ConfigError) as err:
        TrainConfig(epochs=None, **fields)
    assert _one_line(err).startswith(named)


def test_a_cost_budget_on_an_unpriced_accelerator_names_the_price_table():
    with pytest.raises(ConfigError) as err:
        TrainConfig(epochs=None, cost_budget="1", accelerator_type="google.com/tpu", accelerator_count=4)
    message = _one_line(err)
    assert "'tpu-4'" in message and "price table" in message and str(DEFAULT_PRICE_TABLE) in message


def test_an_unpriced_accelerator_is_fine_without_a_cost_budget():
    config = TrainConfig(epochs=None, time_budget="2m", accelerator_type="google.com/tpu", accelerator_count=4)
    assert config.limits.budget == Budget(seconds=120.0)


def test_a_budget_and_epochs_together_name_both():
    with pytest.raises(ConfigError) as err:
        TrainConfig(epochs=3, time_budget="2m")
    message = _one_line(err)
    assert message.startswith("train.time_budget: ")
    assert "epochs 3" in message and "null" in message
    with pytest.raises(ConfigError, match="steps_per_epoch 50"):
        TrainConfig(
            epochs=None, steps_per_epoch=50, cost_budget="1", accelerator_type="nvidia.com/gpu", accelerator_count=1
        )


def test_a_time_budget_with_the_schedule_left_open_is_accepted():
    config = TrainConfig(epochs=None, time_budget="2m")
    assert config.limits.budgeted
    assert config.limits.budget.limit_s == 120.0


def test_a_cost_budget_read_from_yaml_as_a_float_is_accepted():
    config = TrainConfig.from_yaml(
        "epochs: null\ncost_budget: 0.5\npatience: 4\n"
        "accelerator_type: cloud-tpus.google.com/v2\naccelerator_count: 8\n"
    )
    assert (config.cost_budget, config.patience) == ("0.5", "4")
    assert config.limits.budgeted
    budget = config.limits.budget
    assert (budget.dollars, budget.price_key, budget.price_per_hour) == (0.5, "tpu-v2-8", 4.5)
    assert budget.limit_s == pytest.approx(400.0)


def test_a_cost_budget_on_a_cpu_step_is_priced_by_its_cores():
    if price_key("", 0) not in load_price_table():
        pytest.skip(f"the default price table has no {price_key('', 0)!r} for this machine's cores")
    config = TrainConfig(epochs=None, cost_budget=0.5)
    assert config.limits.budget.price_key == price_key("", 0)
    assert config.limits.budget.dollars == 0.5


def test_the_defaults_have_no_budget():
    config = TrainConfig()
    assert not config.limits.budgeted
    assert config.limits.budget.limit_s is None
    assert not TrainConfig(time_budget="", cost_budget="AUTO").limits.budgeted


def test_a_cap_keeps_the_task_s_own_schedule_where_it_fits_and_fills_where_it_does_not():
    cap = Budget(seconds=300.0, cap=True)
    numbers = dict(elapsed_s=30.0, calibration_s=10.0, eval_s=2.0, export_s=4.0, steps_per_execution=4)
    fits = plan(cap, step_s=0.06, own_steps=1184, **numbers)
    assert fits.steps <= 1184 and fits.steps > 1184 - 4 * fits.evaluations  # its own steps, in whole executions
    assert fits.predicted_s < 0.6 * 300  # not filled: the schedule took what it needs
    slow = plan(cap, step_s=0.3, own_steps=1184, **numbers)
    assert slow.steps < 1184 and slow.predicted_s > 0.9 * 300  # too long for the cap: laid out over it
    filled = plan(Budget(seconds=300.0), step_s=0.06, own_steps=1184, **numbers)
    assert filled.steps > 1184  # a budget, not a cap, fills the time
    assert parse_time_budget("<=5m") == 300.0 and Budget(300.0, cap=True).describe() == "time_budget <=5m"


def test_a_plan_is_laid_out_again_from_its_own_intervals_either_way_never_past_a_cap():
    numbers = dict(elapsed_s=30.0, calibration_s=10.0, eval_s=2.0, export_s=4.0, steps_per_execution=4)
    planned = plan(Budget(seconds=300.0), step_s=0.3, **numbers)
    per_interval = planned.steps_per_evaluation * 0.3 + 2.0  # as calibrated, without the step margin

    def again(done, interval_s, left_s, of=planned):
        return budget_layout.replanned(of, done=done, interval_s=interval_s, left_s=left_s, steps_per_execution=4)

    def last_interval(p):
        return p.steps - (p.evaluations - 1) * p.steps_per_evaluation

    # Two intervals ran at the calibrated speed: the 15% margin it planned with is given back.
    left = 300.0 - 30.0 - 2 * per_interval
    longer = again(2, per_interval, left)
    assert longer.steps > planned.steps and longer.replanned_from == planned.steps
    assert (
        longer.steps % 4 == 0
        and longer.steps_per_evaluation <= last_interval(longer) < 2 * planned.steps_per_evaluation
    )
    assert longer.predicted_s <= 300.0 * (1 - budget_layout.MARGIN) + 1e-6
    # The time it lays out is what is left, to within one execution and the replan's margin: no
    # part of an interval left unused at the end.
    unused = 300.0 * (1 - budget_layout.MARGIN) - longer.predicted_s
    assert unused <= (budget_layout.REPLAN_MARGIN - 1) * left + 4 * 0.3 * budget_layout.REPLAN_MARGIN
    assert "laid out again from" in longer.line()
    # A third slower than calibrated: fewer steps, so the schedule ends (and decays) in time.
    slow = 1.33 * per_interval
    shorter = again(2, slow, 300.0 - 30.0 - 2 * slow)
    assert 2 < shorter.evaluations < planned.evaluations and shorter.steps < planned.steps
    assert shorter.predicted_s <= 300.0
    # Out of time: one short interval more (the guard stops it if it must).
    out = again(2, per_interval, 0.0)
    assert out.evaluations == 3 and last_interval(out) == 4
    # A cap's own schedule bounds it.
    capped = plan(Budget(seconds=300.0, cap=True), step_s=0.3, own_steps=planned.steps + 8, **numbers)
    within = again(2, per_interval, left, of=capped)
    assert capped.own_steps == planned.steps + 8 and within.steps <= planned.steps + 8
    assert plan(Budget(seconds=300.0), step_s=0.3, **numbers).own_steps is None
    # Laid out again after the next interval too: the machine sped up, the steps come back.
    faster = again(3, per_interval, 300.0 - 30.0 - 3 * slow, of=shorter)
    assert faster.steps > shorter.steps and faster.replanned_from == planned.steps
    # A schedule whose intervals are all done is not laid out again.
    assert again(planned.evaluations, 1.0, 250.0) is planned


def test_a_budget_or_a_notebook_timeout_cannot_outlast_the_pipeline_s_deadline():
    from components.notebook.config import NotebookConfig
    from pipelines.platform import LONG_DEADLINE_S
    from trainer.budget.limits import MAX_BUDGET_S, BudgetError, parse_time_budget

    assert parse_time_budget("168h") == MAX_BUDGET_S < LONG_DEADLINE_S
    with pytest.raises(BudgetError, match="over 168h"):
        parse_time_budget("169h")
    with pytest.raises(ValueError, match="timeout_s: must be 1..604800"):
        NotebookConfig(notebook="a.ipynb", timeout_s=MAX_BUDGET_S + 1)


def test_a_mounted_service_account_key_is_used_where_no_credentials_are_set(tmp_path):
    from trainer.runtime import use_mounted_credentials

    environ = {}
    assert use_mounted_credentials(environ, str(tmp_path)) is None and environ == {}  # Workload Identity
    (tmp_path / "gcp-key.json").write_text("{}")
    assert use_mounted_credentials(environ, str(tmp_path)) == str(tmp_path / "gcp-key.json")
    assert environ["GOOGLE_APPLICATION_CREDENTIALS"] == str(tmp_path / "gcp-key.json")
    mine = {"GOOGLE_APPLICATION_CREDENTIALS": "/etc/mine.json"}
    assert use_mounted_credentials(mine, str(tmp_path)) == "/etc/mine.json"  # the user's wins
