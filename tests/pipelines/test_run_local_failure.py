"""A local run whose first step fails: the console says which, why (its own error line, no
traceback), and where the log is; the run still gets its report (what ran, the failing step, its
error and log tail)."""

import io
import re

import pytest

from pipelines.tools import run_local

pytestmark = [pytest.mark.slow]


def test_a_failing_step_prints_its_error_and_log_tail_and_gets_a_report(tmp_path):
    missing = tmp_path / "no" / "such" / "images"
    root = tmp_path / "outputs"
    out = io.StringIO()
    # run_pipeline skips main's up-front source check: the convert step itself fails, in kfp.local.
    result = run_local.run_pipeline({"source": str(missing), "epochs": 1}, root, root / "stages", out=out, tty=False)
    text = out.getvalue()
    lines = text.splitlines()
    assert result.ok is False
    assert any(line.startswith("FAILED Convert to TFRecords") for line in lines), text
    error = next(line for line in lines if line.startswith("error: step 'Convert to TFRecords' failed: "))
    assert str(missing) in error and "Error" in error
    log = result.run_dir / "logs" / "convert-to-tfrecords.log"
    # the step's own output is its error alone (no traceback): said once, then where the whole log is
    assert lines[lines.index(error) + 1] == f"Its log: {log}", text
    assert "Traceback" not in text and not [line for line in lines if line.startswith("  | ")]
    not_run = next(line for line in lines if line.startswith("-- not run: "))
    assert (
        not_run.startswith("-- not run: Validate the data, Train, ") and "Run report" in not_run
    )  # in the order they run
    assert len(lines) < 40
    page = result.report.read_text()
    assert "The run failed at step “Convert to TFRecords”" in page
    assert re.search(r'<td class="l bad">failed</td>', page) and page.count('class="l warn">not run') >= 6
    assert str(missing) in page  # the error and the log tail
    assert (root / "latest" / "report.html").exists()
