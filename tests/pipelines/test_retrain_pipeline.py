"""The retrain pipeline: its condition in the compiled DAG, and ``make retrain``'s three paths under
kfp.local: no-op and drift (the decide step alone runs: seconds, no accelerator asked for), and new
data (a real served classifier, its folder grown: a delta converted, a warm-started budgeted
training, the gate against prod, demo), then the next scheduled run, which has nothing to do.
"""

import json
import re
from pathlib import Path

import pytest
import yaml

from pipelines.tools import run_retrain
from pipelines.tools.compile import compile_pipeline
from tests.retrain_stage import grow, served_stage, trained_stage


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


@pytest.fixture(scope="module")
def new_data(tmp_path_factory):
    """``make retrain BUDGET=30s`` after 20 new images joined prod's 80, then the same again."""
    import contextlib
    import io

    root = tmp_path_factory.mktemp("retrain-new")
    served = trained_stage(root / "served")
    grow(served, per_class=10, start=100)
    argv = ["--stages", str(served.stages), "--pipeline-root", str(root / "runs"), "--budget", "30s"]
    argv += ["--set", "value_thresholds.accuracy=0.3", "--set", "change_thresholds.accuracy=-0.5"]
    found = []
    for _ in range(2):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            found.append((run_retrain.main(argv), out.getvalue()))
    return served, found


def test_new_data_converts_a_delta_trains_warm_within_the_budget_and_promotes_to_demo_only(new_data):
    from components.serving.stages import StageRegistry

    served, [(code, out), _] = new_data
    assert code == 0, out
    assert (
        "ok Decide" in out and f"retrain: {served.source} changed since prod's classifier version 1 was trained" in out
    )
    assert "20 images converted (a delta: 80 reused, not read)" in out
    assert "converted: 20 records read and written, 80 reused from the parent (not read)" in out
    assert f"training: warm start from prod's classifier version 1 ({served.model_dir})" in out
    assert "-- not run: Promote to staging, Promote to prod" in out
    assert "demo now serves version 1 (staging, prod unchanged" in out
    registry = StageRegistry(str(served.stages))
    demo, prod = registry.read_current("demo", "classifier"), registry.read_current("prod", "classifier")
    assert (prod.version, prod.model_uri) == (1, str(served.model_dir))  # prod untouched
    assert registry.read_current("staging", "classifier") is None
    model = Path(demo.model_uri)
    training = json.loads((model / "training.json").read_text())
    assert yaml.safe_load((model / "config.yaml").read_text())["warm_start"] == str(served.model_dir)
    budget = training["budget"]
    assert budget["limit"] == "time_budget 30s" and budget["predicted_s"] <= 30 and training["steps"] >= 1
    dataset = json.loads((Path(training["dataset"]) / "dataset.json").read_text())
    assert dataset["parent"]["uri"] == str(served.model_dir.parent / "dataset") and dataset["parent"]["records"] == 80
    assert sum(split["count"] for split in dataset["splits"].values()) == 100
    # The gate saw prod's whole test split again, with the new test images.
    reasons = demo_blessing(Path(demo.model_uri).parents[1])
    here, there, both = map(int, re.search(r"(\d+) images here, (\d+) there, (\d+) in both", reasons).groups())
    assert there == both < here and demo.metrics["num_examples"] == here


def demo_blessing(run_dir: Path) -> str:
    """The evaluation's reasons in a retrain run's folder, one per line."""
    output = json.loads((run_dir / "evaluate-model" / "executor_output.json").read_text())
    return "\n".join(output["artifacts"]["blessing"]["artifacts"][0]["metadata"]["reasons"])


def test_the_next_scheduled_run_sees_the_candidate_waiting_and_does_nothing(new_data):
    _, [_, (code, out)] = new_data
    assert code == 0, out
    assert "decision: nothing to do: demo's classifier version 1 was trained on this data already" in out
    assert "accelerator time: $0.00 (no step asked for one)" in out and "-- not run: Convert to TFRecords" in out
