"""The quiet console, fed kfp.local's output as kfp.local writes it (colours, indents, echo)."""

import io

import pytest

from components import progress
from pipelines.tools.console import (
    QuietConsole,
    display_names,
    duration,
    error_line,
    own_output,
    previous_durations,
    previous_run_dir,
    progress_figures,
    upstream_steps,
)

CYAN, GREEN, RED, RESET = "\x1b[96m", "\x1b[92m", "\x1b[91m", "\x1b[0m"
RULE = "-" * 80


def _task(name, body, status="SUCCESS"):
    colour = GREEN if status == "SUCCESS" else RED
    level = "INFO" if status == "SUCCESS" else "ERROR"
    lines = [
        f"09:16:10.069 - INFO - Executing task {CYAN}'{name}'{RESET}",
        "09:16:10.070 - INFO - Streamed logs:",
        "",
        *(line if isinstance(line, float) else "    " + line for line in body),
        "",
        f"09:16:27.303 - {level} - Task {CYAN}'{name}'{RESET} finished with status {colour}{status}{RESET}",
    ]
    if status == "SUCCESS":
        lines += [f"09:16:27.304 - INFO - Task {CYAN}'{name}'{RESET} outputs:", "    metrics: Metrics( name='metrics',"]
    return lines + [RULE]


NAMES = {
    "convert-to-tfrecords": "Convert to TFRecords",
    "train-model": "Train",
    "promote-model-2": "Promote to staging",
}
EXECUTOR_ECHO = ["[KFP Executor INFO]: Got executor_input:", "{", '    "inputs": {}', "}"]


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _feed(console, lines, clock=None):
    # kfp.local prints a step's lines in two writes (the indent, then the line): so does this; a
    # number passes that many seconds on the console's clock
    for line in lines:
        if isinstance(line, float):
            clock.now += line
        elif line.startswith("    "):
            console.write("    ")
            console.write(line[4:] + "\n")
        else:
            console.write(line + "\n")


def _convert_lines():
    # as the reporter writes them: no time left on the first line (no rate yet), 10 s apart
    lines = [progress.format_line("convert", 100, 1000, "images")]
    for n in range(200, 1001, 100):
        lines += [10.0, progress.format_line("convert", n, 1000, "images", rate=10.0, eta_s=(1000 - n) / 10)]
    return lines


TRAIN_PROGRESS = [
    progress.format_line("train", 1, 40, "steps", loss=2.3, note="calibrating"),
    1.0,
    progress.format_line("train", 5, 40, "steps", images_per_sec=512.0, loss=1.9, eta_s=35.0),
    15.0,
    progress.format_line("train", 20, 40, "steps", images_per_sec=520.0, loss=1.2, metric="val_accuracy", value=0.61,
                         eta_s=20.0),
    16.0,
    progress.format_line("train", 36, 40, "steps", images_per_sec=500.0, loss=0.9, metric="val_accuracy", value=0.7,
                         eta_s=4.0),
    4.0,
    progress.format_line("train", 40, 40, "steps", images_per_sec=500.0, loss=0.8, eta_s=0.0),
]  # fmt: skip


def _run(tmp_path, tty=False, verbose=False, fail=False, previous=None):
    out, clock = io.StringIO(), _Clock()
    console = QuietConsole(
        out, tmp_path / "logs", NAMES, headline=lambda task: f"figures of {task}",
        tty=tty, verbose=verbose, previous_seconds=previous, clock=clock,
    )  # fmt: skip
    convert = [*EXECUTOR_ECHO, *_convert_lines()]
    train = [
        *EXECUTOR_ECHO,
        *TRAIN_PROGRESS,
        "Epoch 2/2",  # Keras' own lines count for nothing now
        "20/20 - 4s - 213ms/step - accuracy: 0.31 - loss: 1.99",
    ]
    if fail:
        train += [
            "Traceback (most recent call last):",
            '  File "x.py", line 1',
            "trainer.train.TrainingError: loss is NaN",
        ]
    lines = [f"09:16:10.055 - INFO - Running pipeline: {CYAN}'end-to-end'{RESET}", RULE]
    lines += _task("convert-to-tfrecords", convert) + _task("train-model", train, "FAILURE" if fail else "SUCCESS")
    _feed(console, lines, clock)
    console.close_pending()
    return console, out.getvalue()


def test_one_line_per_step_start_and_end_with_figures_and_sparse_progress(tmp_path):
    console, text = _run(tmp_path)
    lines = text.splitlines()
    assert lines[0] == "-> Convert to TFRecords"
    # the first line that knows the time left at once, then one every 30 s; the last is the end line
    assert lines[1:4] == [
        "   convert: 200/1,000 images (20%), 10 images/s, ~1m20s left",
        "   convert: 500/1,000 images (50%), 10 images/s, ~50s left",
        "   convert: 800/1,000 images (80%), 10 images/s, ~20s left",
    ]
    assert lines[4].startswith("ok Convert to TFRecords") and lines[4].endswith("figures of convert-to-tfrecords")
    assert lines[5:8] == [
        "-> Train",
        "   train: 5/40 steps (12%), 512 images/s, loss 1.9, ~35s left",
        "   train: 36/40 steps (90%), 500 images/s, loss 0.9, val_accuracy=0.7, ~4s left",
    ]
    assert lines[8].startswith("ok Train ")
    assert lines[9] == "-- not run: Promote to staging"
    assert len(lines) == console.printed == 10
    assert "executor_input" not in text and "@@progress" not in text
    assert console.records()[1].seconds == 36.0  # the console's clock


def test_the_training_says_the_run_s_time_left_from_the_previous_run(tmp_path):
    previous = {"convert-to-tfrecords": 50.0, "train-model": 100.0, "promote-model-2": 60.0, "gone-step": 999.0}
    _, text = _run(tmp_path, previous=previous)
    train = [line for line in text.splitlines() if line.startswith("   train:")]
    # the training's time left and what the steps not started took last time (not the gone one)
    assert train[0].endswith(", ~35s left, run ~1m35s left")
    assert train[1].endswith(", ~4s left, run ~1m04s left")
    convert = [line for line in text.splitlines() if line.startswith("   convert:")]
    assert "run ~" not in "".join(convert)  # only the training knows the run's time left


def test_a_step_that_reports_slowly_still_gets_a_line_every_30_s_and_an_early_stop_is_told(tmp_path):
    out, clock = io.StringIO(), _Clock()
    console = QuietConsole(out, tmp_path / "logs", NAMES, tty=False, clock=clock)
    body = [
        progress.format_line("train", 1, 1000, "steps", note="calibrating"),
        29.0,
        progress.format_line("train", 2, 1000, "steps"),  # no time left yet, under 30 s: nothing
        2.0,
        progress.format_line("train", 3, 1000, "steps"),  # 31 s after the start
        45.0,
        progress.format_line("train", 9, 1000, "steps"),
        1.0,
        progress.format_line("train", 10, 10, "steps", eta_s=0.0, note="stopped early"),
    ]
    _feed(console, _task("train-model", body), clock)
    lines = out.getvalue().splitlines()
    assert lines[1:4] == [
        "   train: 3/1,000 steps (0%)",
        "   train: 9/1,000 steps (0%)",
        "   train: 10/10 steps (100%), stopped early, ~0s left",
    ]


def test_each_step_s_whole_output_is_in_its_log(tmp_path):
    console, _ = _run(tmp_path)
    log = (tmp_path / "logs" / "convert-to-tfrecords.log").read_text()
    assert "Got executor_input:" in log and "@@progress" in log
    assert "metrics: Metrics( name='metrics'," in log  # kfp.local's output echo, after 'finished'
    assert "\x1b[" not in log
    assert "Running pipeline: 'end-to-end'" in (tmp_path / "logs" / "pipeline.log").read_text()
    records = console.records(relative_to=tmp_path)
    assert [(r.name, r.status) for r in records] == [
        ("Convert to TFRecords", "succeeded"),
        ("Train", "succeeded"),
        ("Promote to staging", "not run"),
    ]
    assert records[0].log == "logs/convert-to-tfrecords.log" and records[0].seconds is not None


def test_a_failing_step_gives_its_error_log_tail_and_log_path(tmp_path):
    console, text = _run(tmp_path, fail=True)
    assert "FAILED Train" in text
    failure = console.failure()
    assert failure.step == "Train"
    assert failure.error == "trainer.train.TrainingError: loss is NaN"
    assert failure.log_tail.splitlines()[-1] == "trainer.train.TrainingError: loss is NaN"
    assert failure.log.endswith("train-model.log")
    out = io.StringIO()
    console.out = out
    console.print_failure(failure)
    printed = out.getvalue().splitlines()
    assert printed[0] == "error: step 'Train' failed: trainer.train.TrainingError: loss is NaN"
    assert failure.log in printed[1] and printed[-1] == "  | trainer.train.TrainingError: loss is NaN"


def test_a_terminal_gets_a_bar_redrawn_in_place(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    _, text = _run(tmp_path, tty=True, previous={"promote-model-2": 60.0})
    assert "\r\x1b[2K   Convert to TFRecords [" in text and "1,000/1,000 images 100%" in text
    assert "   convert: 300/1,000" not in text  # no plain progress lines on a terminal
    bars = [chunk for chunk in text.split("\r\x1b[2K") if chunk.startswith("   Train [")]
    assert bars[0].endswith("1/40 steps 2% 0s, loss 2.3, calibrating")
    assert bars[2].endswith(
        "20/40 steps 50% 16s, 520 images/s, loss 1.2, val_accuracy=0.61, ~20s left, run ~1m20s left"
    )
    finals = [chunk.split("\r\x1b[2K")[-1] for chunk in text.split("\n") if chunk]
    assert any(f.startswith("ok Convert to TFRecords") for f in finals)


def test_the_bar_is_trimmed_to_the_terminal(tmp_path):
    out = io.StringIO()
    console = QuietConsole(out, tmp_path / "logs", NAMES, tty=True)
    console._width = 50
    _feed(console, _task("train-model", TRAIN_PROGRESS[-1:]))
    bars = [chunk for chunk in out.getvalue().split("\r\x1b[2K") if chunk.startswith("   Train [")]
    assert bars and all(len(bar) == 49 for bar in bars)


def test_verbose_passes_everything_through(tmp_path):
    _, text = _run(tmp_path, verbose=True)
    assert "Got executor_input:" in text and "@@progress" in text and "ok Train" in text


def test_display_names_cover_the_nested_steps_not_the_groups():
    from pipelines import end_to_end

    names = display_names(end_to_end.pipeline)
    assert names["convert-to-tfrecords"] == "Convert to TFRecords"
    assert names["promote-model-3"] == "Promote to prod"  # inside two dsl.If groups
    assert names["build-report"] == "Run report"
    assert "condition-1" not in names
    order = list(names)
    assert order[:3] == ["convert-to-tfrecords", "validate-dataset", "train-model"]  # each after what it depends on
    assert order.index("promote-model") < order.index("promote-model-2") < order.index("promote-model-3")


def _log(folder, name, lines):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_previous_durations_read_the_step_logs_of_a_run_folder(tmp_path):
    logs = tmp_path / "end-to-end-1" / "logs"
    warning = "/venv/kfp/local/subprocess_task_handler.py:81: RuntimeWarning: custom image"
    _log(logs, "convert-to-tfrecords.log", [
        warning, "15:07:32.100 - INFO - Streamed logs:", "    12:00:00.000 - not kfp's",
        "15:07:39.276 - INFO - Task 'convert-to-tfrecords' finished with status SUCCESS",
        "    metrics: Metrics( name='metrics',",
    ])  # fmt: skip
    _log(logs, "train-model.log", [
        "23:59:50.000 - INFO - Streamed logs:", "00:00:10.500 - INFO - Task 'train-model' finished with status SUCCESS",
    ])  # fmt: skip
    _log(
        logs,
        "sweep-cell.log",
        ["10:00:00.000 - INFO - x", "10:00:05.000 - INFO - Task 'sweep-cell' finished with status SUCCESS"],
    )
    _log(
        logs,
        "sweep-cell-2.log",
        ["10:01:00.000 - INFO - x", "10:01:07.000 - INFO - Task 'sweep-cell' finished with status SUCCESS"],
    )
    _log(
        logs,
        "evaluate-model.log",
        ["15:08:00.000 - INFO - x", "15:08:09.000 - ERROR - Task 'evaluate-model' finished with status FAILURE"],
    )
    _log(logs, "promote-model.log", ["15:08:00.000 - INFO - Streamed logs:", "    still running"])
    _log(
        logs,
        "pipeline.log",
        ["15:07:32.000 - INFO - x", "15:09:00.000 - INFO - Task 'pipeline' finished with status SUCCESS"],
    )
    durations = previous_durations(tmp_path / "end-to-end-1")
    assert durations == pytest.approx({"convert-to-tfrecords": 7.176, "train-model": 20.5, "sweep-cell": 12.0})
    assert previous_durations(tmp_path / "missing") == {} and previous_durations(None) == {}
    (tmp_path / "old-run").mkdir()
    assert previous_durations(tmp_path / "old-run") == {}  # a folder from before the logs were kept


def test_the_previous_run_is_the_newest_folder_of_the_pipeline_with_logs(tmp_path):
    import os

    for age, name in ((30, "end-to-end-2026-01-01"), (20, "end-to-end-2026-01-02-failed"), (10, "detection-x")):
        (tmp_path / name / "logs").mkdir(parents=True)
        os.utime(tmp_path / name / "logs", (1e9 - age, 1e9 - age))
    (tmp_path / "end-to-end-2026-01-03").mkdir()  # no logs: kfp.local's folder of a run in progress
    assert previous_run_dir(tmp_path, "end-to-end") == tmp_path / "end-to-end-2026-01-02-failed"
    assert previous_run_dir(tmp_path, "sweep") is None and previous_run_dir(tmp_path / "none", "x") is None


def test_durations_and_figures_read_shortly():
    assert [duration(s) for s in (0.4, 45, 60, 725, 3600, 7385)] == ["0s", "45s", "1m00s", "12m05s", "1h00m", "2h03m"]
    fields = progress.parse(progress.format_line("benchmark", 3, 9, "batches", rate=2.5, eta_s=2.4))
    assert progress_figures(fields) == ["2.5 batches/s", "~2s left"]
    assert progress_figures({"step": "x", "done": 1, "total": 2, "unit": "", "metric": "val_map"}) == []


# ------------------------------------------------------------------ a failure's first cause

PREDICT_NAMES = {
    "plan-batch-prediction": "Plan the shards",
    "predict-shard": "Score a shard",
    "join-batch-prediction": "Join the predictions",
}
# The batch prediction's DAG: the shards after the plan, the join (the exit task) after all of them.
PREDICT_UPSTREAM = {
    "plan-batch-prediction": frozenset(),
    "predict-shard": frozenset({"plan-batch-prediction"}),
    "join-batch-prediction": frozenset({"plan-batch-prediction", "predict-shard"}),
}
PLAN_ERROR = (
    "components.batch_predict.run.PredictError: staging serves no model named 'nosuch' under out/stages; "
    "it serves ['classifier', 'detector']"
)
JOIN_ERROR = (
    "components.batch_predict.run.PredictError: no manifest.json under out/: the planning step did not finish "
    "(see its log)"
)
KFP_WARNING = (
    "/venv/lib/python3.11/site-packages/kfp/local/subprocess_task_handler.py:81: RuntimeWarning: You may be "
    'attemping to run a task that uses custom or non-Python base image "ltp:0.1.0"'
)


def _traceback(function, error):
    # as kfp's executor_main leaves it in a step's output: frames, then the exception line
    return [
        "Traceback (most recent call last):",
        '  File "<frozen runpy>", line 198, in _run_module_as_main',
        '  File "/venv/kfp/dsl/executor.py", line 453, in execute',
        "    result = self.func(**func_kwargs)",
        "             ^^^^^^^^^^^^^^^^^^^^^^^^",
        f'  File "/work/components/batch_predict/run.py", line 141, in {function}',
        "    raise PredictError(",
        error,
        "",
    ]


def _predict_run(tmp_path, *, upstream=PREDICT_UPSTREAM, shards_fail=False):
    """The console of a make predict whose plan fails (a stage without the model), and whose exit
    task then fails for want of the plan; or whose two shards fail each for its own reason."""
    out = io.StringIO()
    console = QuietConsole(out, tmp_path / "logs", PREDICT_NAMES, tty=False, upstream=upstream)
    warning = [KFP_WARNING, "  warnings.warn("]
    lines = [f"09:16:10.055 - INFO - Running pipeline: {CYAN}'batch-predict'{RESET}", RULE]
    if shards_fail:
        lines += _task("plan-batch-prediction", [*EXECUTOR_ECHO, "3 images in 2 shards"])
        for n in (1, 2):
            body = [*EXECUTOR_ECHO, *_traceback("score", f"OSError: shard {n}: disk full")]
            lines += _task("predict-shard", body, "FAILURE")
        lines += _task("join-batch-prediction", [*EXECUTOR_ECHO, *_traceback("join", JOIN_ERROR)], "FAILURE")
    else:
        plan = [*EXECUTOR_ECHO, "planning: 3 images under photos/", *_traceback("model_from_stage", PLAN_ERROR)]
        lines += _task("plan-batch-prediction", plan, "FAILURE")
        lines += _task("join-batch-prediction", [*EXECUTOR_ECHO, *_traceback("join", JOIN_ERROR)], "FAILURE")
    for i, line in enumerate(lines):  # kfp.local's own warning, as a task starts
        if "Executing task" in line:
            lines[i + 1 : i + 1] = warning
    _feed(console, lines)
    console.close_pending()
    return console, out


def test_the_first_failed_step_s_own_error_comes_first_and_the_exit_task_s_as_its_consequence(tmp_path):
    console, out = _predict_run(tmp_path)
    lines = out.getvalue().splitlines()
    # each FAILED line says why, in short
    assert lines[1].startswith("FAILED Plan the shards") and lines[1].endswith(
        "PredictError: staging serves no model named 'nosuch' under out/stages; it serves ['classifier', 'detector']"
    )
    assert lines[3].startswith("FAILED Join the predictions") and "PredictError: no manifest.json" in lines[3]
    failure = console.failure("Pipeline 'batch-predict' finished with status FAILURE. Inner task failed: 'x'.")
    assert failure.step == "Plan the shards" and failure.error == PLAN_ERROR
    assert failure.then == (f"Join the predictions failed as a consequence: {JOIN_ERROR}",)
    assert failure.log.endswith("plan-batch-prediction.log")
    # the tail is the step's own output: no executor echo, no kfp warning, no traceback
    assert failure.log_tail.splitlines() == ["planning: 3 images under photos/", PLAN_ERROR]
    printed = io.StringIO()
    console.out = printed
    console.print_failure(failure)
    text = printed.getvalue()
    assert text.splitlines()[:2] == [
        f"error: step 'Plan the shards' failed: {PLAN_ERROR}",
        f"then: Join the predictions failed as a consequence: {JOIN_ERROR}",
    ]
    assert text.index(PLAN_ERROR) < text.index(JOIN_ERROR)  # the cause before its consequence
    assert "error: step 'Join the predictions'" not in text
    assert "Traceback" not in text and 'File "' not in text and "^^^" not in text
    assert f"last lines of the log of 'Plan the shards' ({failure.log}):" in text
    assert len(text.splitlines()) == 5


def test_the_run_report_says_the_first_cause_first_and_then_its_consequence(tmp_path):
    from components.report.run import ReportInputs, render

    console, _ = _predict_run(tmp_path)
    failure = console.failure()
    page = render(ReportInputs(run="r", steps=console.records(relative_to=tmp_path), failure=failure))
    banner = page[page.index('<div class="banner bad">') :].split("</div>", 1)[0]
    assert banner.index("Plan the shards") < banner.index("staging serves no model named")
    assert banner.index("staging serves no model named") < banner.index("then: Join the predictions failed as a")
    assert "Traceback" not in page.split("<pre>", 1)[1].split("</pre>", 1)[0]


def test_a_step_that_fails_beside_the_first_is_not_called_its_consequence(tmp_path):
    console, _ = _predict_run(tmp_path, shards_fail=True)
    failure = console.failure()
    assert failure.step == "Score a shard" and failure.error == "OSError: shard 1: disk full"
    assert failure.then == (
        "Score a shard failed on its own too: OSError: shard 2: disk full",
        f"Join the predictions failed as a consequence: {JOIN_ERROR}",
    )
    # without the DAG, every later failure is taken for a consequence of the first
    console, _ = _predict_run(tmp_path / "no-dag", upstream=None, shards_fail=True)
    assert console.failure().then[0] == "Score a shard failed as a consequence: OSError: shard 2: disk full"


def test_kfp_local_s_own_error_stands_in_only_for_a_lone_failure_without_an_error_line(tmp_path):
    console = QuietConsole(io.StringIO(), tmp_path / "logs", NAMES, tty=False)
    _feed(console, _task("train-model", ["Killed"], "FAILURE"))
    console.close_pending()
    assert console.failure("Pipeline 'p' finished with status FAILURE.").error.startswith("Pipeline 'p' finished")
    assert console.failure().error == "the step failed"


def test_the_steps_upstream_follow_groups_and_an_exit_task_waits_for_its_whole_body():
    from pipelines import batch_predict, end_to_end

    upstream = upstream_steps(batch_predict.pipeline)
    assert upstream["plan-batch-prediction"] == frozenset()
    assert upstream["predict-shard"] == {"plan-batch-prediction"}  # through its loop
    assert upstream["join-batch-prediction"] == {"plan-batch-prediction", "predict-shard"}  # the exit task
    main = upstream_steps(end_to_end.pipeline)
    assert "convert-to-tfrecords" in main["promote-model-3"] and "promote-model-3" not in main["promote-model-2"]


def test_own_output_leaves_out_kfp_s_lines_the_executor_s_echo_and_traceback_frames():
    chained = [
        "KeyError: 'x'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        *_traceback("f", "ValueError: bad value"),
    ]
    body = [*EXECUTOR_ECHO, TRAIN_PROGRESS[0], "working", *chained]
    lines = [KFP_WARNING, "  warnings.warn(", *("    " + line for line in body)]
    lines.insert(0, "09:16:10.070 - INFO - Streamed logs:")
    assert own_output(lines) == ["working", "KeyError: 'x'", "ValueError: bad value"]
    assert error_line(lines) == "ValueError: bad value"
    assert error_line(["    KeyboardInterrupt", "    all is well"]) is None


def test_a_step_s_output_indented_deeper_by_nested_kfp_prints_reads_the_same():
    # Two loop iterations at once leave kfp.local's indented print wrapped in itself: a later step
    # of the same process comes indented by 8, 12, ... spaces, the executor's echo and traceback too.
    body = [*EXECUTOR_ECHO, "working", *_traceback("f", "ValueError: bad value")]
    for depth in (4, 12, 28):
        lines = ["09:16:10.070 - INFO - Streamed logs:", *(" " * depth + line for line in body)]
        assert own_output(lines) == ["working", "ValueError: bad value"], depth
        assert error_line(lines) == "ValueError: bad value", depth
