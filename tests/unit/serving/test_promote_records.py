"""The promote step's typed results, its task lookup and its command line's parsing (no TensorFlow)."""

import dataclasses
import json
import subprocess
import sys

import pytest

from components.cli import flags_to_fields, load_section
from components.promote import __main__ as cli
from components.promote.result import PromotionResult, render_report
from components.serving.checks import CheckResult
from components.serving.config import STAGES, PromoteConfig
from trainer.config import ConfigError

CHECKS = (
    CheckResult("health", True, "version 3 AVAILABLE", {"version": 3}),
    CheckResult("prediction", False, "2/16 right | low", {"accuracy": 0.125}),
)


def result(**kw):
    fields = dict(action="promote", stage="staging", version=3, previous_version=2, no_op=False, model_uri="/m")
    return PromotionResult(**{**fields, "target": "local", "checks": CHECKS, "accuracy": 0.125, **kw})


def test_promotion_result_round_trips_through_json():
    original = result(metrics={"accuracy": 0.9}, source_stage="demo", source_version=5)
    data = json.loads(json.dumps(original.to_dict()))
    assert data["checks"]["prediction"] == {
        "passed": False,
        "detail": "2/16 right | low",
        "figures": {"accuracy": 0.125},
    }
    assert PromotionResult.from_dict(data) == original
    assert original.check("health").figures == {"version": 3}
    with pytest.raises(KeyError, match="no check 'load' ran"):
        original.check("load")


def test_report_shows_the_version_the_checks_and_where_it_came_from():
    text = render_report(result(metrics={"accuracy": 0.9}, source_stage="demo", source_version=5))
    assert text.startswith("# Promote: staging serves version 3\n")
    assert "- from: demo version 5" in text and "- recorded metrics: accuracy=0.9" in text
    assert "| health | yes | version 3 AVAILABLE |" in text
    assert "| prediction | NO | 2/16 right \\| low |" in text  # a | in a detail does not break the table
    assert "nothing was changed" in render_report(result(no_op=True))


def test_config_fields_and_validation():
    with pytest.raises(ConfigError, match="promote.task: expected one of"):
        PromoteConfig(task="segmentation")
    with pytest.raises(ConfigError, match=r"promote.target: expected a serving target's name"):
        PromoteConfig(target="")
    with pytest.raises(ConfigError, match=r"promote.stage: expected one of \['demo', 'staging', 'prod'\], got 'qa'"):
        PromoteConfig(stage="qa")
    with pytest.raises(ConfigError, match="promote.load_test.max_requests: must be >= 1"):
        PromoteConfig(load_test={"max_requests": 0})
    with pytest.raises(ConfigError, match="promote.load_test.max_p99_ms: must be > 0"):
        PromoteConfig(load_test={"max_p99_ms": 0})
    # Per-stage defaults: demo minimal, staging prod's profile scaled down, prod prod's; local loose.
    kube = {s: PromoteConfig(stage=s, target="kubernetes").effective_load_test("cluster") for s in STAGES}
    assert kube["demo"].clients < kube["staging"].clients < kube["prod"].clients
    assert kube["demo"].max_requests < kube["staging"].max_requests < kube["prod"].max_requests
    assert kube["staging"].max_p99_ms == kube["prod"].max_p99_ms and kube["prod"].max_p99_ms <= 300
    local = PromoteConfig(stage="prod").effective_load_test("loopback")
    assert local.max_p99_ms >= 10 * kube["prod"].max_p99_ms and local.max_errors == 0
    mine = PromoteConfig(load_test={"clients": 3, "max_p99_ms": 12.5})
    assert mine.effective_load_test("cluster").objectives() == {"max_p99_ms": 12.5, "max_errors": 0.0}
    assert PromoteConfig.from_yaml(mine.to_yaml()) == mine


def test_cli_flags_are_the_config_fields(tmp_path, capsys):
    path = tmp_path / "run.yaml"
    path.write_text("promote:\n  stage: prod\n  model_name: clf\n  load_test: {clients: 2}\n")
    config = load_section(PromoteConfig, str(path), {"model_name": "other", "smoke_examples": None})
    assert (config.stage, config.model_name, config.load_test.clients, config.smoke_examples) == (
        "prod",
        "other",
        2,
        16,
    )
    # The task's defaults lie under the file and the flags: a detector is served as "detector"
    # unless the file or a flag names it.
    detector = {"model_name": "detector"}
    assert load_section(PromoteConfig, str(path), {}, detector).model_name == "clf"
    assert load_section(PromoteConfig, None, {}, detector).model_name == "detector"
    assert load_section(PromoteConfig, None, {"model_name": "mine"}, detector).model_name == "mine"
    path.write_text("stage: staging\nnot_a_field: 1\n")
    with pytest.raises(ConfigError, match="not_a_field: unknown key"):
        load_section(PromoteConfig, str(path), {})
    parser = cli._parser()
    args = parser.parse_args(
        ["rollback", "--stage", "prod", "--load-test", "{max_seconds: 0.5}", "--task", "classification"]
    )
    assert (args.stage, args.load_test, args.task) == ("prod", {"max_seconds": 0.5}, "classification")
    # The target's own settings are NAME=VALUE pairs, read into the config's serving_options.
    args = parser.parse_args(["rollback", "--target", "kserve", "--serving-options", "mode=standard"])
    assert load_section(PromoteConfig, None, flags_to_fields(args)).serving_options == {"mode": "standard"}
    with pytest.raises(SystemExit):
        cli.main(["promote", "--help"])
    text = capsys.readouterr().out
    for field in dataclasses.fields(PromoteConfig):
        assert f"--{field.name.replace('_', '-')}" in text


@pytest.mark.parametrize(
    "argv", [["--help"], ["promote", "--help"], ["rollback", "--help"], ["promote-version", "--help"]]
)
def test_help_works_without_tensorflow(argv):
    code = (
        "import runpy, sys; sys.argv = ['x', *sys.argv[1:]]\n"
        "try:\n    runpy.run_module('components.promote', run_name='__main__')\n"
        "except SystemExit as e:\n    assert e.code == 0, e.code\n"
        "assert 'tensorflow' not in sys.modules, 'help imported TensorFlow'\n"
    )
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True).stdout
    assert "usage: python -m components.promote" in out


def test_model_server_help():
    out = subprocess.run(
        [sys.executable, "-m", "components.serving.server", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "--model-base-path" in out and "--model-name" in out


def test_bad_input_exits_2_with_one_line(tmp_path, capsys):
    assert cli.main(["rollback", "--stage", "demo", "--stages-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot roll back demo: versions in service are []") and err.count("\n") == 1
    assert cli.main(["promote", "--model-dir", str(tmp_path), "--dataset", str(tmp_path), "--stages-root", "x"]) == 2
    assert "not a model folder" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        cli.main(["promote-version", "--source-stage", "prod", "--stage", "prod"])
    assert exit_.value.code == 2  # argparse: prod has no next stage
    # A setting the target does not take: one line naming the ones it does.
    assert cli.main(["rollback", "--stages-root", str(tmp_path), "--serving-options", "mode=standard"]) == 2
    err = capsys.readouterr().err
    assert "serving target 'local': serving_options.mode: unknown key in LocalOptions; known keys: host, port" in err
