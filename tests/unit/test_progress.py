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
