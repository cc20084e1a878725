"""``make schedule`` / ``make unschedule``: kfp's real client over HTTP against a loopback fake of
Kubeflow Pipelines' REST API (``fake_kfp_api.py``), the retrain pipeline compiled for real.
"""

import pytest

from pipelines.tools import schedule
from tests.integration.fake_kfp_api import serve

pytestmark = pytest.mark.integration


@pytest.fixture
def kfp_host():
    with serve() as (host, fake):
        yield host, fake


def _run(host, tmp_path, *args):
    return schedule.main(["--host", host, "--dir", str(tmp_path / "dist"), *args])


def test_scheduling_twice_leaves_one_recurring_run_with_the_second_cron_and_no_gap(kfp_host, tmp_path, capsys):
    host, fake = kfp_host
    assert _run(host, tmp_path, "--cron", "0 0 3 * * *") == 0
    first = capsys.readouterr().out
    assert _run(host, tmp_path, "--cron", "0 30 */6 * * MON-FRI", "--set", "retrain_budget=20m") == 0
    second = capsys.readouterr().out
    (run,) = fake.recurring.values()
    assert run["trigger"]["cron_schedule"]["cron"] == "0 30 */6 * * MON-FRI" and run["mode"] == "ENABLE"
    assert int(run["max_concurrency"]) == 1 and run["no_catchup"] is True
    assert run["display_name"] == schedule.NAME and run["runtime_config"]["parameters"] == {"retrain_budget": "20m"}
    assert run["pipeline_spec"]["pipeline_spec"]["pipelineInfo"]["name"] == "retrain"
    # Replaced without a gap: the new one made disabled, the old deleted, then the new enabled.
    old, new = "rr-2", run["recurring_run_id"]
    assert fake.events[-3:] == [("create", new, "DISABLE"), ("delete", old), ("enable", new)]
    assert fake.enabled_at_each_step(schedule.NAME) == [0, 1, 1, 0, 1]
    assert f"recurring run '{schedule.NAME}': {old}," in first and f"replaced {old}" in second
    assert (tmp_path / "dist" / "retrain.yaml").is_file()


def test_a_host_that_refuses_to_delete_the_old_schedule_keeps_it_and_only_it(kfp_host, tmp_path, capsys):
    host, fake = kfp_host
    assert _run(host, tmp_path, "--cron", "0 0 3 * * *") == 0
    (old,) = fake.recurring
    fake.refuse_delete.add(old)
    assert _run(host, tmp_path, "--cron", "0 0 4 * * *") == 1
    assert capsys.readouterr().err.startswith(f"error: the Kubeflow Pipelines API at {host} did not take the schedule")
    (run,) = fake.recurring.values()  # the new one was taken back
    assert run["recurring_run_id"] == old and run["mode"] == "ENABLE"
    assert run["trigger"]["cron_schedule"]["cron"] == "0 0 3 * * *"


def test_unschedule_removes_it_and_says_so_when_there_is_none(kfp_host, tmp_path, capsys):
    host, fake = kfp_host
    assert _run(host, tmp_path, "--cron", "@daily") == 0
    assert _run(host, tmp_path, "--remove") == 0 and not fake.recurring
    assert "removed recurring run rr-" in capsys.readouterr().out
    assert _run(host, tmp_path, "--remove") == 0
    assert capsys.readouterr().out.strip() == f"no recurring run '{schedule.NAME}' to remove"


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--cron", "0 3 * * *"],
            "has 5 fields; KFP's cron has 6, seconds first: give '0 0 3 * * *' for the same times",
        ),
        (["--cron", "0 0 25 * * *"], "hours '25' is not a value in 0-23"),
        (["--cron", "* * *"], "has 3 fields"),
        (["--cron", "@sometimes"], "unknown descriptor"),
        (["--set", "retrain_budget=5s"], "retrain_budget: '5s' is under 30s"),
    ],
)
def test_bad_input_is_one_line_and_asks_nothing_of_the_host(kfp_host, tmp_path, capsys, args, message):
    host, fake = kfp_host
    assert _run(host, tmp_path, *args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert fake.events == []


def test_a_missing_kfp_host_is_one_line_naming_it(tmp_path, capsys):
    assert schedule.main(["--cron", "0 0 3 * * *"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: KFP_HOST is not set: give the Kubeflow Pipelines endpoint, e.g. make schedule KFP_HOST=http://localhost:8080"
    )


def test_the_cron_check_takes_kfp_s_forms():
    for good in ("0 0 3 * * *", "*/30 * * * * ?", "0 0 9 ? * 2-6", "0 0 0 1 JAN,JUL *", "@every 1h30m", "@weekly"):
        assert schedule.check_cron(good) == good
