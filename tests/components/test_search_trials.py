"""A search's rungs trained for real, in this process, through ``python -m components.sweep search``
(budgets in steps, so the rungs are short): each trial continues its own schedule from its own
checkpoints, a trial that fails is a failed row and the search goes on, the selection reads the
rows, the join picks and publishes, a re-run reuses what finished; a dry run trains nothing."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from components.sweep.__main__ import main
from components.sweep.search import folder as search_folder
from components.sweep.search.run import run_trial
from tests.datasets import write_test_dataset
from trainer import storage

SPEC = {
    "space": {"learning_rate": [0.01, 0.003, 0.001]},
    "sampling": "grid",
    "rungs": 2,
    "eta": 3,
    "max_budget": "12 steps",
    "objective": "frontier",
    "metric": "accuracy",
    "fixed": {"accelerator": "cpu"},
}


@pytest.mark.slow
def test_a_search_runs_here_and_a_promoted_trial_continues_its_own_schedule(tmp_path, capsys):
    dataset = write_test_dataset(tmp_path / "ds", {"train": 64, "validation": 16, "test": 32})
    search_file = tmp_path / "search.yaml"
    search_file.write_text(yaml.safe_dump(SPEC))
    out, rows = tmp_path / "out", tmp_path / "rows"
    args = ["search", "--search", str(search_file), "--dataset", str(dataset), "--output-dir", str(out),
            "--rows-root", str(rows), "--batch-size-per-replica", "16"]  # fmt: skip

    assert main([*args, "--dry-run"]) == 0
    assert "Rung 0: every trial (3 trials) to 4 steps each" in capsys.readouterr().out
    assert not (out / "models").exists()  # planned, nothing trained
    (folder,) = [str(p) for p in rows.glob("search-*")]
    plan = search_folder.read_plan(folder)
    keys = [t.key for t in plan.trials]
    # The third trial's checkpoint folder holds another training: its training fails, it is a row.
    broken = storage.join(search_folder.trial_dir(folder, keys[2]), "checkpoints")
    storage.write_json(storage.join(broken, "state.json"), {"config_fingerprint": "another"})

    assert main(args) == 0
    printed = capsys.readouterr().out
    first = {key: search_folder.read_result(folder, key, 0) for key in keys}
    for key in keys[:2]:
        row = first[key]
        assert (row.status, row.steps) == ("ok", 4) and 0 <= row.quality <= 1
        assert row.seconds == row.rung_s > 0 and row.cost > 0  # billed at the CPU's price
    failed = first[keys[2]]
    assert failed.status == "failed" and "holds checkpoints of another config" in failed.reason
    assert failed.quality is None and f"rung 0: {plan.trial(keys[2]).name}: failed" in printed

    # 3 trials, eta 3: one went on, never the failed one, and the best at rung 0.
    (best,) = storage.read_json(f"{folder}/rung-1.json")
    assert best in keys[:2] and first[best].quality == max(first[k].quality for k in keys[:2])
    second = search_folder.read_result(folder, best, 1)
    assert second.status == "ok" and second.steps == 12  # from step 4, to the schedule's end
    training = json.loads((out / "models" / best / "rung-1" / "training.json").read_text())
    assert training["resumed_from_step"] == 4 and training["stopping"]["reason"] == "completed"
    assert [h["step"] for h in training["history"]] == [4, 8, 12]  # epochs of 4: each rung ends on one
    assert second.seconds == pytest.approx(first[best].seconds + second.rung_s)

    record = json.loads((out / "search.json").read_text())
    assert record["complete"] and record["notes"] == [] and record["reached_rung"] == 1
    assert record["choice"]["key"] in keys[:2]
    assert {t["key"]: t["status"] for t in record["trials"]} == {keys[0]: "ok", keys[1]: "ok", keys[2]: "failed"}
    assert record["savings"]["spent_s"] < record["savings"]["full_s"]
    config = yaml.safe_load(storage.read_text(storage.join(folder, search_folder.BEST_CONFIG)))
    assert (config["epochs"], config["steps_per_epoch"], config["time_budget"]) == (3, 4, "auto")
    assert (out / "chart.html").read_text().count("<svg") == 2 and "| trial |" in (out / "report.md").read_text()
    # A re-run of a rung (an interrupted search) gets the finished rows back without training.
    again = run_trial((str(dataset),) * 2, (str(tmp_path / "x"),) * 2, folder, keys[0], 0, time.time())
    assert again == first[keys[0]] and not (tmp_path / "x").exists()


def test_a_bad_search_file_is_one_error_line_and_status_2(tmp_path, capsys):
    dataset = write_test_dataset(tmp_path / "ds", {"train": 8, "test": 8})
    search_file = tmp_path / "search.yaml"
    search_file.write_text(yaml.safe_dump({**SPEC, "eta": 1}))
    code = main(["search", "--search", str(search_file), "--dataset", str(dataset), "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: search.eta: 1; give 2 or more") and err.count("\n") == 1
