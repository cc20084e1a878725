r"""Command line: ``python -m components.monitor ...``: the monitor step without Kubeflow.

Asks Prometheus for every stage's objectives over a window (the alert expressions of
manifests/monitoring) and sends the API regression and prediction checks to each stage that
serves a model; prints the Markdown report (``--json``: the summary as JSON).

Example::

    python -m components.monitor --prometheus-url http://127.0.0.1:9090 \
        --stages-root local_outputs/stages --stages demo staging --window 30m
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Optional

from components.cli import EXIT_OK, fail, load_section
from components.serving.targets import target_names
from trainer.config import STAGES, ConfigError, MonitorConfig
from trainer.runtime import configure_tensorflow_env

EXIT_BROKEN = 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m components.monitor",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit status: 0 every stage healthy, 1 a stage is broken, 2 bad input or Prometheus unreachable.",
    )
    p.add_argument("--config", help="YAML: MonitorConfig fields, or a whole-run Config with a monitor: section")
    p.add_argument("--prometheus-url", help="the Prometheus query API's base URL")
    p.add_argument("--stages-root", help="the stage registry (folder or gs://)")
    p.add_argument("--stages", nargs="+", choices=STAGES, help="the stages to watch (default all)")
    p.add_argument("--window", help="the objectives' PromQL range, e.g. 30m or 1h")
    p.add_argument("--target", choices=target_names(), help="where the stages serve")
    p.add_argument("--model-name", help="the served model name")
    p.add_argument("--json", action="store_true", help="print the summary as JSON instead of Markdown")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the monitor once; see the module docstring."""
    args = _parser().parse_args(argv)
    configure_tensorflow_env()  # before anything imports TensorFlow
    flags = {k: getattr(args, k) for k in ("prometheus_url", "stages_root", "window", "target", "model_name")}
    flags["stages"] = tuple(args.stages) if args.stages else None
    try:
        config = load_section(MonitorConfig, args.config, flags)
        from components.monitor.run import PrometheusError, monitor, summary_of

        try:
            report = monitor(config)
        except PrometheusError as err:
            return fail(err)
    except ConfigError as err:
        return fail(err)
    print(json.dumps(summary_of(report), indent=2) if args.json else report.to_markdown(), end="")
    return EXIT_OK if report.passed else EXIT_BROKEN


if __name__ == "__main__":
    sys.exit(main())
