"""The progress-line protocol: what a step prints and what the parent reads back."""

import io

from components import progress


def test_a_line_reads_back_with_its_fields():
    line = progress.format_line("convert", 12000, 40000, "images")
    assert line.startswith("@@progress {")
    assert progress.parse(line) == {"step": "convert", "done": 12000, "total": 40000, "unit": "images"}
    assert progress.parse("    " + line + "\n")["done"] == 12000  # kfp.local indents a step's output


def test_other_lines_are_not_progress():
    for text in ("Epoch 1/3", "@@progress", "@@progress not json", '@@progress {"done": "3", "total": 4}', "[1, 2]"):
        assert progress.parse(text) is None, text


def test_the_reporter_throttles_but_always_prints_the_last():
    out = io.StringIO()
    report = progress.reporter("benchmark", "batches", every_s=3600, stream=out)
    for done in range(1, 11):
        report(done, 10)
    lines = [progress.parse(line) for line in out.getvalue().splitlines()]
    # the first call prints (nothing printed yet), the throttled middle does not, the end does
    assert [x["done"] for x in lines] == [1, 10]
    assert all(x["step"] == "benchmark" and x["unit"] == "batches" for x in lines)


def test_optional_fields_read_back_typed_and_unknown_keys_are_kept():
    line = progress.format_line(
        "train", 40, 100, "steps", eta_s=12.5, rate=3, images_per_sec=96.0, loss=0.5, metric="val_accuracy",
        value=0.8, note="calibrating", extra={"a": 1}, gone=None,
    )  # fmt: skip
    fields = progress.parse(line)
    assert fields == {
        "step": "train", "done": 40, "total": 100, "unit": "steps", "eta_s": 12.5, "rate": 3.0,
        "images_per_sec": 96.0, "loss": 0.5, "metric": "val_accuracy", "value": 0.8, "note": "calibrating",
        "extra": {"a": 1},
    }  # fmt: skip
    # a NaN, a None or a value of the wrong type is no figure: left out when written and when read
    assert "loss" not in progress.parse(progress.format_line("train", 1, 2, loss=float("nan"), eta_s=None))
    read = progress.parse('@@progress {"done": 1, "total": 2, "eta_s": "soon", "note": 3, "mine": null}')
    assert read == {"step": "", "done": 1, "total": 2, "unit": "", "mine": None}


def test_a_worker_tag_before_the_line_is_allowed():
    line = progress.format_line("train", 3, 9, "steps")
    assert progress.parse("    [worker 0] " + line)["done"] == 3
    assert progress.parse("worker 0 " + line) is None


def test_the_reporter_adds_its_rate_and_eta_unless_given():
    out, now = io.StringIO(), [0.0]
    report = progress.reporter("convert", "images", every_s=10, stream=out, clock=lambda: now[0])
    report(100, 1000)  # the first call: nothing to measure a rate from
    now[0] = 5.0
    report(300, 1000)  # throttled
    now[0] = 10.0
    report(500, 1000)
    now[0] = 11.0
    report(600, 1000, eta_s=1.0)  # throttled, and the caller's ETA would win
    now[0] = 20.0
    report(1000, 1000, note="done")
    lines = [progress.parse(line) for line in out.getvalue().splitlines()]
    assert [x["done"] for x in lines] == [100, 500, 1000]
    assert "eta_s" not in lines[0] and "rate" not in lines[0]
    assert lines[1]["rate"] == 40.0 and lines[1]["eta_s"] == 12.5
    assert lines[2]["eta_s"] == 0.0 and lines[2]["note"] == "done"
    given = io.StringIO()
    mine = progress.reporter("train", "steps", every_s=0, stream=given, clock=lambda: now[0])
    mine(1, 10, eta_s=99.0)
    mine(2, 10, eta_s=98.0)
    assert progress.parse(given.getvalue().splitlines()[-1])["eta_s"] == 98.0


def test_two_argument_calls_keep_working():
    out = io.StringIO()
    progress.reporter("benchmark", "batches", stream=out)(3, 3)
    assert progress.parse(out.getvalue()) == {"step": "benchmark", "done": 3, "total": 3, "unit": "batches"}
