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

from components.cli import EXIT_OK, add_config_flags, fail, flags_to_fields, load_section
from components.serving.config import STAGES, MonitorConfig
from components.serving.targets import TargetError, target_names
from trainer.config import ConfigError
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
    choices = {"stages": list(STAGES), "target": target_names()}
    add_config_flags(p, MonitorConfig, overrides={k: {"choices": v} for k, v in choices.items()})
    p.add_argument("--json", action="store_true", help="print the summary as JSON instead of Markdown")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the monitor once; see the module docstring."""
    args = _parser().parse_args(argv)
    configure_tensorflow_env()  # before anything imports TensorFlow
    try:
        config = load_section(MonitorConfig, args.config, flags_to_fields(args))
        from components.monitor.run import PrometheusError, monitor, summary_of

        try:
            report = monitor(config)
        except PrometheusError as err:
            return fail(err)
    except (ConfigError, TargetError) as err:  # a bad value, or serving options the target does not take
        return fail(err)
    print(json.dumps(summary_of(report), indent=2) if args.json else report.to_markdown(), end="")
    return EXIT_OK if report.passed else EXIT_BROKEN


if __name__ == "__main__":
    sys.exit(main())
