"""``make run CONFIG=... SET=...`` (and ``make sweep``): the run form's parameters from a file and
pairs, checked by type and by the steps' own configs, and what differs recorded in the report.

Library calls only: nothing runs a pipeline.
"""

import json

import pytest

from components.report.local import PARAMETERS_FILE, inputs_from_run_dir
from components.report.run import ReportInputs, render
from pipelines import detection, end_to_end
from pipelines.tools import params, run_local, run_sweep
from pipelines.tools.params import Layer, ParameterError


def _resolve(*layers, pipeline=detection.pipeline):
    return params.resolve(params.run_form(pipeline), layers, "detection")


def _problems(*layers, pipeline=detection.pipeline, task="detection"):
    with pytest.raises(ParameterError) as caught:
        resolved = _resolve(*layers, pipeline=pipeline)
        params.check_steps(pipeline, resolved.values, task)
    return caught.value.problems


def test_the_form_is_the_compiled_pipeline_s_names_types_and_defaults():
    form = params.run_form(detection.pipeline)
    assert list(form) == list(detection.pipeline.component_spec.inputs)
    assert (form["epochs"].type, form["model_options"].type, form["learning_rate"].type) == ("Integer", "Dict", "Float")
    assert form["value_thresholds"].default == detection.FORM["value_thresholds"]


def test_set_wins_over_config_over_the_defaults_and_dotted_names_merge(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("epochs: 20\nlearning_rate: 0.004\nmodel_options: {image_size: 128, max_boxes: 8}\n")
    resolved = _resolve(params.read_config(config), params.parse_set("epochs=30 model_options.anchor_size=2.5"))
    values = resolved.values
    assert values["epochs"] == 30 and values["learning_rate"] == 0.004
    assert values["model_options"] == {"image_size": 128, "max_boxes": 8, "anchor_size": 2.5}
    assert values["batch_size_per_replica"] == detection.FORM["batch_size_per_replica"]  # untouched: the default
    assert resolved.origins["epochs"] == "SET" and resolved.origins["learning_rate"] == f"CONFIG {config}"
    assert resolved.origins["model_options"] == f"CONFIG {config} + SET"
    # a dotted key merges into the default mapping too; a plain name replaces it whole
    merged = _resolve(params.parse_set("value_thresholds.ap=0.3")).values["value_thresholds"]
    assert merged == {**detection.FORM["value_thresholds"], "ap": 0.3}
    assert _resolve(params.parse_set("value_thresholds={ap: 0.3}")).values["value_thresholds"] == {"ap": 0.3}
    # the form's defaults themselves are never changed
    assert params.run_form(detection.pipeline)["model_options"].default == detection.FORM["model_options"]


def test_values_are_yaml_scalars_checked_against_the_declared_types():
    resolved = _resolve(params.parse_set("augment=false learning_rate=1e-3 epochs=12.0 served_model_name=007"))
    values = resolved.values
    assert values["augment"] is False and values["learning_rate"] == 0.001 and values["epochs"] == 12
    assert values["served_model_name"] == "007"  # a String parameter keeps the text as typed
    # a YAML value may hold spaces: words without name= continue the item before them
    layer = params.parse_set("model_options={image_size: 96, aspect_ratios: [0.5, 1.0]} epochs=2")
    assert _resolve(layer).values["model_options"] == {"image_size": 96, "aspect_ratios": [0.5, 1.0]}


def test_an_unknown_name_lists_the_valid_ones_closest_first(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("epoch: 3\n")
    (line,) = _problems(params.read_config(config))
    assert line.startswith(f"epoch (CONFIG {config}): no such parameter; did you mean 'epochs'? ")
    assert line.endswith("the detection pipeline's parameters: " + ", ".join(params.run_form(detection.pipeline)))


def test_a_wrong_type_is_one_line_each_naming_the_valid_form():
    lines = _problems(params.parse_set("epochs=abc augment=maybe model_options=3 epochs.x=1 learning_rate=true"))
    assert lines == [
        "epochs: expected an integer (Integer parameter), got 'abc' (SET)",
        "augment: expected true or false (Boolean parameter), got 'maybe' (SET)",
        "model_options: expected a mapping, e.g. {key: value} (Dict parameter), got 3 (SET)",
        "epochs.x (SET): epochs is not a mapping (Integer parameter); dotted names set keys of the mapping "
        "parameters: validation_policy, model_options, value_thresholds, change_thresholds, slice_thresholds, "
        "slice_change_thresholds, export_tolerances, serving_options",
        "learning_rate: expected a number (Float parameter), got True (SET)",
    ]
    with pytest.raises(ParameterError, match="SET 'oops': expected name=value, e.g. SET='epochs=20 "):
        params.parse_set("oops model_options.image_size=128")


def test_a_value_out_of_range_fails_in_the_step_s_own_config_before_anything_runs():
    lines = _problems(
        params.parse_set(
            "epochs=-1 learning_rate=20 benchmark_images=0 serving_target=Bad! "
            "model_options.image_size=x value_thresholds.nope=1"
        )
    )
    assert lines == [  # one line each, in the run form's order
        "model_options.image_size: expected an integer or 'auto', got 'x'",
        "epochs: must be >= 1 or null (fitted to the data), got -1",
        "learning_rate: must be in (0, 10), got 20.0",
        "value_thresholds: unknown metric 'nope'; known metrics: accuracy, ap, ap50, ap75, ar100, loss, "
        "macro_f1, macro_precision, macro_recall, top_k_accuracy",
        "benchmark_images: must be >= 1, got 0",
        "serving_target: expected a serving target's name such as 'local' or 'kubernetes', got 'Bad!'",
    ]
    # the task's own options: a classifier's are not the detector's
    (line,) = _problems(
        params.parse_set("model_options.anchor_size=2"), pipeline=end_to_end.pipeline, task="classification"
    )
    assert line.startswith("model_options.anchor_size: unknown key in ClassifierOptions")
    # KFP's stand-ins for "none" pass: 0 steps is one pass, 0 images per split is all
    # and 0 epochs is a schedule fitted to the data (an Optional field whose default is not None)
    resolved = _resolve(params.parse_set("steps_per_epoch=0 limit_per_split=0 stages_root= epochs=0"))
    params.check_steps(detection.pipeline, resolved.values, "detection")


def test_the_steps_are_found_in_nested_groups_with_their_run_form_bindings():
    calls = {call.component: call for call in params.step_calls(end_to_end.pipeline)}
    assert calls["train-model"].bound["model_name"] == "model"
    promotes = [c for c in params.step_calls(end_to_end.pipeline) if c.component == "promote-model"]
    assert {c.constants["stage"] for c in promotes} == {"demo", "staging", "prod"}  # the prod one is two levels down
    assert all(c.bound["target"] == "serving_target" for c in promotes)


def _args(*argv):
    return run_local._parser().parse_args(list(argv))


def test_make_run_s_shorthands_are_the_same_parameters_between_config_and_set(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("epochs: 20\nsource: shapes:200\nsteps_per_epoch: 5\n")
    resolved = run_local.run_parameters(
        _args("--task", "detection", "--config", str(config), "--epochs", "4", "--prod", "true", "--set", "epochs=6")
    )
    values, origins = resolved.values, resolved.origins
    assert values["epochs"] == 6 and origins["epochs"] == "SET"  # SET over EPOCHS over CONFIG
    assert values["source"] == "shapes:200" and values["steps_per_epoch"] == 5  # CONFIG over make run's defaults
    assert values["promote_to_prod"] is True and origins["promote_to_prod"] == "PROD"
    # classification: make run trains on a subset, which differs from the run form's default (all)
    plain = run_local.run_parameters(_args())
    assert plain.values["limit_per_split"] == 20000 and plain.values["epochs"] == 3
    local = "accelerator_type= (make run), accelerator_count=0 (make run), benchmark_images=1024 (make run), "
    assert plain.describe() == (
        f"limit_per_split=20000 (make run), epochs=3 (make run), {local}benchmark_target_spread=0.05 (make run)"
    )


def test_a_budget_and_epochs_make_one_schedule_whoever_set_them():
    # detection's local run has a time budget, so no epochs
    quick = run_local.run_parameters(_args("--task", "detection"))
    assert quick.values["time_budget"] == "<=5m" and quick.values["epochs"] == 0
    # epochs the user gives drop make run's own budget
    given = run_local.run_parameters(_args("--task", "detection", "--epochs", "4"))
    assert given.values["time_budget"] == "auto" and given.origins["time_budget"] == "epochs given"
    assert given.values["epochs"] == 4
    # a budget the user gives (BUDGET or SET) sets aside epochs left at a default: classification's 3
    budgeted = run_local.run_parameters(_args("--budget", "90s"))
    assert budgeted.values["time_budget"] == "90s" and budgeted.values["epochs"] == 0
    assert budgeted.origins["epochs"] == "the budget"
    by_set = run_local.run_parameters(_args("--set", "cost_budget=0.50"))
    assert by_set.values["epochs"] == 0
    # both given by the user: the train step's one line, before anything runs
    with pytest.raises(run_local.ParameterError, match="epochs 3 is set too"):
        run_local.run_parameters(_args("--budget", "90s", "--epochs", "3"))


def test_a_cost_budget_on_an_accelerator_without_a_price_names_the_accelerator_not_epochs_nobody_set():
    # make run SET='cost_budget=0.5 accelerator_type=nvidia-tesla-zz accelerator_count=1'
    with pytest.raises(ParameterError) as caught:
        run_local.run_parameters(_args("--set", "cost_budget=0.5 accelerator_type=nvidia-tesla-zz accelerator_count=1"))
    (line,) = caught.value.problems
    assert line.startswith("cost_budget: no price for 'nvidia-tesla-zz' (nvidia-tesla-zz x 1) in the price table")
    assert "epochs" not in line
    # a field refused alone for its own value still gets its own line beside it
    with pytest.raises(ParameterError) as caught:
        run_local.run_parameters(
            _args("--set", "cost_budget=0.5 accelerator_type=nvidia-tesla-zz accelerator_count=1 learning_rate=20")
        )
    assert [line.split(":")[0] for line in caught.value.problems] == ["learning_rate", "cost_budget"]


def test_make_run_prints_each_bad_parameter_on_its_own_line_and_starts_nothing(tmp_path, capsys):
    root = tmp_path / "out"
    argv = ["--task", "detection", "--pipeline-root", str(root), "--set", "epochs=-1 learning_rate=99"]
    assert run_local.main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "error: epochs: must be >= 1 or null (fitted to the data), got -1",
        "error: learning_rate: must be in (0, 10), got 99.0",
    ]
    assert not root.exists()


def test_the_changed_parameters_are_recorded_and_shown_in_the_report(tmp_path):
    resolved = _resolve(
        Layer("make run", {"epochs": 8}),
        params.parse_set("epochs=3 model_options.image_size=96"),
        pipeline=end_to_end.pipeline,  # the classifier's options default to {}
    )
    assert resolved.records() == [
        {"name": "model_options", "value": {"image_size": 96}, "default": {}, "from": "SET"},
        {
            "name": "epochs",
            "value": 3,
            "default": params.run_form(end_to_end.pipeline)["epochs"].default,
            "from": "SET",
        },
    ]
    assert resolved.describe() == 'model_options={"image_size": 96} (SET), epochs=3 (SET)'
    (tmp_path / PARAMETERS_FILE).write_text(json.dumps(resolved.to_dict()))
    inputs = inputs_from_run_dir(tmp_path, None)
    assert inputs.parameters == resolved.records()
    page = render(inputs)
    assert '<section id="parameters">' in page and '<a href="#parameters">Parameters</a>' in page
    assert "<td class=l>model_options</td><td class=l>{&#34;image_size&#34;: 96}</td><td class=l>{}</td>" in page
    assert "Every parameter of the run form at its default." in render(ReportInputs(parameters=[]))
    assert "parameters are in the Kubeflow UI" in render(ReportInputs())


def test_make_sweep_reads_config_grid_and_set_over_its_local_defaults(tmp_path):
    config = tmp_path / "sweep.yaml"
    config.write_text("source: shapes:100\nepochs: 2\n")
    grid = tmp_path / "grid.yaml"
    grid.write_text("- {accelerator: cpu, image_size: 32}\n")
    args = run_sweep._parser().parse_args(["--config", str(config), "--grid", str(grid), "--set", "epochs=3"])
    resolved = run_sweep.sweep_parameters(args)
    assert resolved.values["grid_cells"] == [{"accelerator": "cpu", "image_size": 32}]
    assert resolved.values["source"] == "shapes:100" and resolved.values["epochs"] == 3
    assert resolved.values["steps_per_epoch"] == 24  # make sweep's own default
    grid.write_text("accelerator: cpu\n")
    with pytest.raises(ParameterError, match=r"grid_cells: expected a list, e.g. \[a, b\] \(List parameter\)"):
        run_sweep.sweep_parameters(run_sweep._parser().parse_args(["--grid", str(grid)]))
    assert run_sweep.main(["--set", "grid_cell=[]", "--pipeline-root", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()


def test_the_sweep_s_cells_each_keep_their_own_log_in_the_quiet_console(tmp_path):
    import io

    from pipelines.tools.console import QuietConsole

    console = QuietConsole(io.StringIO(), tmp_path, {"train-grid-cell": "Train and evaluate"}, tty=False)
    for cell in ("first", "second"):  # a loop's iterations: kfp.local names each the same
        console.write("10:00:00.000 - INFO - Executing task 'train-grid-cell'\n")
        console.write(f"    the {cell} cell\n")
        console.write("10:00:01.000 - INFO - Task 'train-grid-cell' finished with status SUCCESS\n")
    console.close_pending()
    assert "the first cell" in (tmp_path / "train-grid-cell.log").read_text()
    assert "the second cell" in (tmp_path / "train-grid-cell-2.log").read_text()
    assert [r.log for r in console.records(relative_to=tmp_path)] == ["train-grid-cell.log", "train-grid-cell-2.log"]


def test_a_serving_target_s_options_are_checked_by_that_target_before_anything_runs():
    from pipelines import end_to_end

    values = {**end_to_end.FORM, "serving_target": "kserve", "serving_options": {"mode": "standard"}}
    params.check_steps(end_to_end.pipeline, values)  # kserve's own setting: accepted
    with pytest.raises(params.ParameterError) as caught:
        params.check_steps(end_to_end.pipeline, {**values, "serving_options": {"mode": "sideways", "mod": 1}})
    assert caught.value.problems == [
        "serving_options.mod: unknown key in KServeOptions; known keys: manifests_dir, poll_interval_s, "
        "cluster_domain, mode"
    ]
    with pytest.raises(params.ParameterError, match="serving_options.mode: unknown key in LocalOptions"):
        params.check_steps(end_to_end.pipeline, {**values, "serving_target": "local"})
    with pytest.raises(params.ParameterError, match="^serving_target: unknown serving target 'nowhere'; expected one"):
        params.check_steps(end_to_end.pipeline, {**values, "serving_target": "nowhere"})


def test_what_a_budget_buys_is_one_line_said_before_anything_runs():
    money = run_local.budget_line({"cost_budget": "0.5", "accelerator_type": "cloud-tpus.google.com/v2",
                                   "accelerator_count": 8})  # fmt: skip
    assert money.startswith("cost_budget $0.5 at tpu-v2-8 ($4.5/h): 6.67m of the train step")
    assert "BUDGET=" not in money  # under an hour: no advice
    long = run_local.budget_line({"cost_budget": "50", "accelerator_type": "cloud-tpus.google.com/v2",
                                  "accelerator_count": 8})  # fmt: skip
    assert "11h" in long and "BUDGET=10m" in long
    assert (
        run_local.budget_line({"time_budget": "<=5m"})
        == "time_budget <=5m: at most that, the task's own schedule where it fits"
    )
    assert run_local.budget_line({"time_budget": "auto", "cost_budget": "auto"}) is None
    assert run_local.budget_line({"time_budget": "ten minutes"}) is None  # the train step's check says why
