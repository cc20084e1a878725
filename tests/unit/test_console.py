"""The quiet console, fed kfp.local's output as kfp.local writes it (colours, indents, echo)."""

import io

from components import progress
from pipelines.tools.console import QuietConsole, display_names

CYAN, GREEN, RED, RESET = "\x1b[96m", "\x1b[92m", "\x1b[91m", "\x1b[0m"
RULE = "-" * 80


def _task(name, body, status="SUCCESS"):
    colour = GREEN if status == "SUCCESS" else RED
    level = "INFO" if status == "SUCCESS" else "ERROR"
    lines = [
        f"09:16:10.069 - INFO - Executing task {CYAN}'{name}'{RESET}",
        "09:16:10.070 - INFO - Streamed logs:",
        "",
        *("    " + line for line in body),
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


def _feed(console, lines):
    # kfp.local prints a step's lines in two writes (the indent, then the line): so does this
    for line in lines:
        if line.startswith("    "):
            console.write("    ")
            console.write(line[4:] + "\n")
        else:
            console.write(line + "\n")


def _run(tmp_path, tty=False, verbose=False, fail=False):
    out = io.StringIO()
    console = QuietConsole(
        out, tmp_path / "logs", NAMES, headline=lambda task: f"figures of {task}", epochs={"train-model": 3},
        tty=tty, verbose=verbose,
    )  # fmt: skip
    convert = [*EXECUTOR_ECHO, *(progress.format_line("convert", n, 1000, "images") for n in range(100, 1001, 100))]
    train = [
        *EXECUTOR_ECHO,
        "Epoch 2/2",
        "20/20 - 4s - 213ms/step - accuracy: 0.31 - loss: 1.99",
        "20/20 - 1s - loss: 1.3",
    ]
    if fail:
        train += [
            "Traceback (most recent call last):",
            '  File "x.py", line 1',
            "trainer.train.TrainingError: loss is NaN",
        ]
    lines = [f"09:16:10.055 - INFO - Running pipeline: {CYAN}'end-to-end'{RESET}", RULE]
    lines += _task("convert-to-tfrecords", convert) + _task("train-model", train, "FAILURE" if fail else "SUCCESS")
    _feed(console, lines)
    console.close_pending()
    return console, out.getvalue()


def test_one_line_per_step_start_and_end_with_figures_and_sparse_progress(tmp_path):
    console, text = _run(tmp_path)
    lines = text.splitlines()
    assert lines[0] == "-> Convert to TFRecords"
    assert lines[1:4] == [
        "   convert: 300/1,000 images (30%)",
        "   convert: 500/1,000 images (50%)",
        "   convert: 800/1,000 images (80%)",
    ]
    assert lines[4].startswith("ok Convert to TFRecords") and lines[4].endswith("figures of convert-to-tfrecords")
    assert lines[5:8] == ["-> Train", "   training: 1/3 epochs (33%)", "   training: 2/3 epochs (66%)"]
    assert lines[8].startswith("ok Train ")
    assert lines[9] == "-- not run: Promote to staging"
    assert len(lines) == console.printed == 10
    assert "executor_input" not in text and "@@progress" not in text


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


def test_a_terminal_gets_a_bar_redrawn_in_place(tmp_path):
    _, text = _run(tmp_path, tty=True)
    assert "\r\x1b[2K   Convert to TFRecords [" in text and "1,000/1,000 images 100%" in text
    assert "   convert: 300/1,000" not in text  # no plain progress lines on a terminal
    finals = [chunk.split("\r\x1b[2K")[-1] for chunk in text.split("\n") if chunk]
    assert any(f.startswith("ok Convert to TFRecords") for f in finals)


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
    assert order[:2] == ["convert-to-tfrecords", "train-model"]  # each after what it depends on
    assert order.index("promote-model") < order.index("promote-model-2") < order.index("promote-model-3")
