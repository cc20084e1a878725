r"""Command line: ``python -m components.retrain``: whether a scheduled retraining has anything to do.

Compares the source's fingerprint with the data prod's (else staging's) model was trained on and
reads the served model's newest drift record; prints the decision's reason and, with
--output, writes decision.json there. Seconds, no TensorFlow.

Examples::

    python -m components.retrain --stages-root local_outputs/stages
    python -m components.retrain --stages-root local_outputs/stages --source ~/photos --output out/decision
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Optional

from components.cli import EXIT_OK, add_config_flags, fail, flags_to_fields, load_section
from components.retrain.config import RetrainConfig
from trainer.config import ConfigError
from trainer.runtime import configure_tensorflow_env


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m components.retrain",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit status: 0 decided (whatever the action), 2 bad input (one 'error: ...' line).",
    )
    p.add_argument("--config", help="YAML: RetrainConfig fields (flags given override them)")
    p.add_argument("--output", help="a folder to write decision.json in")
    add_config_flags(p, RetrainConfig)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Decides and prints the reason; see the module docstring.

    Returns:
        The exit status: 0 decided, 2 bad input.
    """
    args = _parser().parse_args(argv)
    configure_tensorflow_env()  # the project's rule for every command line (this one imports no TensorFlow)
    from components.retrain.run import RetrainError, decide, describe, publish

    fields = {k: v for k, v in flags_to_fields(args).items() if k != "output"}
    try:
        config = load_section(RetrainConfig, args.config, fields)
        decision = decide(config)
    except (ConfigError, RetrainError, ValueError) as err:
        return fail(err)
    for line in describe(decision):
        print(line)
    if args.output:
        print(f"decision: {publish(decision, args.output)}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
