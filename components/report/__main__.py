r"""Command line: ``python -m components.report --run-dir RUN --output report.html`` (no Kubeflow).

Builds the run report, one self-contained HTML page, from a kfp.local run folder (what
``make run`` leaves under ``local_outputs/``): the dataset's counts and rejections, the training
curves, the evaluation (metrics, confusion matrix, sample images), the gate's decision, the
benchmark and the stages. ``make run`` writes the same page (with the steps' status and times) to
``local_outputs/<run>/report.html`` by itself; this rebuilds it, e.g. after a change to the page.

Examples::

    python -m components.report --run-dir local_outputs/latest --output /tmp/report.html
    python -m components.report --run-dir local_outputs/end-to-end-2026-12-01-09-16-10-055694 \
        --stages-root local_outputs/stages --output report.html
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from components.cli import EXIT_BAD_INPUT, EXIT_OK
from trainer.runtime import configure_tensorflow_env


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m components.report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit status: 0 written, 2 bad input (one 'error: ...' line).",
    )
    p.add_argument("--run-dir", required=True, help="a kfp.local run folder (task folders inside)")
    p.add_argument("--output", required=True, help="the HTML file to write (local or gs://)")
    p.add_argument("--stages-root", help="the stage store; default: <run folder>/../stages")
    p.add_argument("--title", default="Run report", help="the page's title")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Writes the report; prints its path and size."""
    args = _parser().parse_args(argv)
    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.report.local import inputs_from_run_dir
    from components.report.run import ReportError, write_report

    run_dir = Path(args.run_dir).resolve()
    if not run_dir.is_dir() or not any(run_dir.glob("*/executor_output.json")):
        print(
            f"error: --run-dir {args.run_dir}: not a kfp.local run folder (no */executor_output.json)", file=sys.stderr
        )
        return EXIT_BAD_INPUT
    stages_root = args.stages_root or str(run_dir.parent / "stages")
    try:
        size = write_report(inputs_from_run_dir(run_dir, stages_root, title=args.title), args.output)
    except ReportError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{args.output} ({size / 1024:.0f} KiB)")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
