"""The retrain pipeline: its condition in the compiled DAG, and ``make retrain``'s no-op and drift
paths under kfp.local (the decide step alone runs: seconds, no accelerator asked for).
"""

import json

import pytest
import yaml

from pipelines.tools import run_retrain
from pipelines.tools.compile import compile_pipeline
from tests.retrain_stage import served_stage


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    path = compile_pipeline("retrain", tmp_path_factory.mktemp("compiled"))
    spec, kube = [d for d in yaml.safe_load_all(path.read_text()) if d]
    return spec, kube


def test_the_condition_is_in_the_dag_and_only_it_holds_the_accelerator_steps(compiled):
    spec, _ = compiled
    root = spec["root"]["dag"]["tasks"]
    assert set(root) == {"decide-retrain", "condition-1"}  # nothing else at the top
    condition = root["condition-1"]
    assert condition["taskInfo"]["name"] == "new-data"
    assert condition["triggerPolicy"]["condition"] == (
        "inputs.parameter_values['pipelinechannel--decide-retrain-Output'] == 'retrain'"
    )
    inside = spec["components"]["comp-condition-1"]["dag"]["tasks"]
    assert {"convert-to-tfrecords", "validate-dataset", "train-model", "evaluate-model"} <= set(inside)
    # the conversion is a delta of the served model's dataset, as the decision names it
    parent = inside["convert-to-tfrecords"]["inputs"]["parameters"]["parent"]
    assert parent == {"componentInputParameter": "pipelinechannel--decide-retrain-parent_dataset"}
    executors = spec["deploymentSpec"]["executors"]
    with_accelerator = {name for name, e in executors.items() if "accelerator" in e["container"].get("resources", {})}
    assert with_accelerator == {"exec-train-model"}
    # Promoted to demo when blessed; further only as promote_to asks (default: demo).
    components = spec["components"]
    blessed = components["comp-condition-2"]["dag"]["tasks"]
    assert blessed["promote-model"]["inputs"]["parameters"]["stage"]["runtimeValue"]["constant"] == "demo"
    assert blessed["condition-3"]["triggerPolicy"]["condition"].endswith("['pipelinechannel--promote_to'] != 'demo'")
    further = components["comp-condition-3"]["dag"]["tasks"]
    assert further["promote-model-2"]["inputs"]["parameters"]["stage"]["runtimeValue"]["constant"] == "staging"
    assert further["condition-4"]["triggerPolicy"]["condition"].endswith("['pipelinechannel--promote_to'] == 'prod'")
    defaults = spec["root"]["inputDefinitions"]["parameters"]
    assert defaults["promote_to"]["defaultValue"] == "demo" and defaults["retrain_budget"]["defaultValue"] == "10m"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """``make retrain`` three times on one served model: unchanged, a drift alarm, no served model."""
    import contextlib
    import io

    root = tmp_path_factory.mktemp("retrain")
    served = served_stage(root / "served")
    found = {}
    for case in ("nothing", "drift", "no model"):
        if case == "drift":
            folder = served.stages / "prod" / "drift" / "classifier"
            folder.mkdir(parents=True)
            alarm = {"alarm": True, "checks": [{"name": "brightness", "alarm": True}]}
            (folder / "2026-01-02T00.json").write_text(json.dumps(alarm))
        stages = served.stages if case != "no model" else root / "empty"
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = run_retrain.main(["--stages", str(stages), "--pipeline-root", str(root / "runs")])
        found[case] = (code, out.getvalue())
    return found


def test_make_retrain_on_unchanged_data_says_nothing_to_do_at_no_cost(runs):
    code, out = runs["nothing"]
    assert code == 0, out
    assert "ok Decide" in out and "-- not run: Convert to TFRecords, Validate the data, Train" in out
    assert (
        "decision: nothing to do: " in out and "prod's classifier version 1 was trained on, and no drift alarm" in out
    )
    assert "accelerator time: $0.00 (no step asked for one); nothing trained, nothing promoted" in out
    record = next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("decision record: "))
    assert json.loads(open(record).read())["action"] == "nothing"


def test_make_retrain_with_a_drift_alarm_and_no_new_data_records_it_and_ends(runs):
    code, out = runs["drift"]
    assert code == 0, out
    assert "decision: drift alarm on prod's classifier version 1 (brightness;" in out
    assert "retraining on the same data cannot fix drift" in out and "-- not run: Convert to TFRecords" in out


def test_make_retrain_without_a_served_model_fails_in_the_decide_step_with_one_line(runs):
    code, out = runs["no model"]
    assert code == 1
    assert "no model 'classifier' at prod or staging under" in out and "run the main pipeline first (make run)" in out


def test_a_local_source_that_is_not_there_stops_before_anything_runs(tmp_path, capsys):
    assert run_retrain.main(["--data", str(tmp_path / "nope"), "--pipeline-root", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"error: DATA {tmp_path / 'nope'}: no such file or folder on this machine"
    assert not list(tmp_path.iterdir())


def test_a_retraining_s_last_lines_say_how_it_trained_and_what_demo_serves(tmp_path):
    from components.promote.component import promote_model
    from components.retrain.component import decide_retrain
    from pipelines.tools.runner import Finished

    decision = tmp_path / decide_retrain.name / "decision"
    decision.mkdir(parents=True)
    record = {"action": "retrain", "reason": "retrain: photos/ changed", "warm": "warm start from prod's classifier"}
    (decision / "decision.json").write_text(json.dumps(record))
    decided = {
        "parameterValues": {"Output": "retrain"},
        "artifacts": {"decision": {"artifacts": [{"uri": str(decision)}]}},
    }
    (tmp_path / decide_retrain.name / "executor_output.json").write_text(json.dumps(decided))
    done = Finished(console=None, error=None, folder=tmp_path, failure=None, started=0.0)
    lines = run_retrain.last_lines(done).lines
    assert lines[0] == "decision: retrain: photos/ changed" and "training: warm start from prod's classifier" in lines
    assert lines[-1] == "not blessed against prod: demo unchanged (see the evaluation's reasons)"
    (tmp_path / promote_model.name).mkdir()
    (tmp_path / promote_model.name / "executor_output.json").write_text(json.dumps({"parameterValues": {"Output": 3}}))
    assert run_retrain.last_lines(done).lines[-1] == (
        "demo now serves version 3 (staging, prod unchanged: the promote pipeline moves it on)"
    )
