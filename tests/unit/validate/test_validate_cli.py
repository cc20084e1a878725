"""``python -m components.validate``: the files it publishes and its exit statuses."""

from __future__ import annotations

import json

import pytest

from components.validate.__main__ import main
from components.validate.run import publish, validate
from tests.validate_fixtures import Rec, balanced, write_dataset


@pytest.fixture
def leaky(tmp_path):
    test = [Rec("test/dup", 1, image=b"image of train/1"), *balanced("test", 4, 4)]
    return str(write_dataset(tmp_path / "leaky", {"train": balanced("train", 8, 4), "test": test}))


def test_a_clean_dataset_passes_and_publishes_three_files(tmp_path, capsys):
    folder = write_dataset(tmp_path / "d", {"train": balanced("train", 8, 4)})
    out = tmp_path / "out"
    assert main(["--dataset", str(folder), "--output-dir", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["report.md", "stats.json", "validation.json"]
    validation = json.loads((out / "validation.json").read_text())
    assert validation["passed"] is True and validation["findings"] == [] and validation["counts"]["error"] == 0
    assert json.loads((out / "stats.json").read_text())["splits"]["train"]["count"] == 8
    assert "# Dataset validation: passed" in (out / "report.md").read_text()
    assert "passed: 0 error, 0 warn, 0 ignore" in capsys.readouterr().out


def test_an_error_finding_exits_1_and_the_policy_and_allowlist_change_it(leaky, tmp_path, capsys):
    out = str(tmp_path / "out")
    assert main(["--dataset", leaky, "--output-dir", out]) == 1
    printed = capsys.readouterr().out
    assert "error: leakage (2 records)" in printed and "FAILED" in printed
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| severity | kind | split | records | examples | finding |" in report and "| error | leakage |" in report
    assert main(["--dataset", leaky, "--output-dir", out, "--policy", "leakage=warn", "rare_class=ignore"]) == 0
    assert main(["--dataset", leaky, "--output-dir", out, "--allow", "train/1", "--allow", "test/dup"]) == 0
    assert json.loads((tmp_path / "out" / "validation.json").read_text())["findings"] == []


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--policy", "leak=warn"],
            "error: validate.validation_policy: unknown kind 'leak'; valid kinds: leakage, label_conflict",
        ),
        (["--policy", "leakage"], "error: --policy 'leakage': expected name=value"),
        (["--min-class-share", "2"], "error: validate.min_class_share: must be a share in [0, 1], got 2.0"),
    ],
)
def test_bad_arguments_exit_2_with_one_error_line(leaky, tmp_path, capsys, args, message):
    assert main(["--dataset", leaky, "--output-dir", str(tmp_path / "out"), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_a_missing_dataset_exits_2(tmp_path, capsys):
    assert main(["--dataset", str(tmp_path / "nope"), "--output-dir", str(tmp_path / "out")]) == 2
    assert "does not exist or is not a folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["--dataset", str(tmp_path / "empty"), "--output-dir", str(tmp_path / "out")]) == 2
    assert "has no dataset.json" in capsys.readouterr().err


def test_a_baseline_from_the_command_line(leaky, tmp_path, capsys):
    first = validate(leaky)
    publish(first, str(tmp_path / "v1"))
    args = ["--dataset", leaky, "--output-dir", str(tmp_path / "v2"), "--policy", "leakage=ignore"]
    assert main([*args, "--baseline", str(tmp_path / "v1")]) == 0
    validation = json.loads((tmp_path / "v2" / "validation.json").read_text())
    assert validation["baseline"] == str(tmp_path / "v1" / "stats.json") and validation["notes"] == []
    assert [f["severity"] for f in validation["findings"]] == ["ignore"]
    assert main([*args, "--baseline", str(tmp_path / "missing.json"), "--policy", "baseline_unreadable=error"]) == 1
    assert "missing.json" in capsys.readouterr().out


def test_a_config_file_with_flags_on_top(leaky, tmp_path):
    config = tmp_path / "validate.yaml"
    config.write_text("validation_policy: {leakage: warn}\nmax_records: 1\n")
    out = tmp_path / "out"
    assert main(["--dataset", leaky, "--output-dir", str(out), "--config", str(config)]) == 0
    assert json.loads((out / "validation.json").read_text())["findings"][0]["records"] == ["train/1"]
    assert (
        main(["--dataset", leaky, "--output-dir", str(out), "--config", str(config), "--policy", "leakage=error"]) == 1
    )
