r"""Command line: ``python -m components.validate``: checks a converted dataset before training.

Reads every record's features once (no TensorFlow, no image decoding), writes ``stats.json``,
``report.md`` and ``validation.json`` under --output-dir, and prints the findings.

Examples::

    python -m components.validate --dataset out/fmnist --output-dir out/fmnist-validation
    python -m components.validate --dataset out/v2 --output-dir out/v2-validation \
        --baseline out/v1-validation/stats.json --policy rare_class=ignore test_split_changed=error \
        --allow photos/cat/001.jpg
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Optional

from components.cli import EXIT_FAILED, EXIT_OK, add_config_flags, check_folder, fail, flags_to_fields, load_section
from components.validate.config import ValidateConfig
from components.validate.policy import KINDS
from trainer.config import ConfigError
from trainer.runtime import configure_tensorflow_env


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m components.validate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            f"Finding kinds: {', '.join(KINDS)}. Exit status: 0 passed (warnings allowed), 1 a finding of "
            "severity error, 2 bad input (one 'error: ...' line)."
        ),
    )
    p.add_argument("--dataset", required=True, help="the converted dataset folder (dataset.json inside) or gs:// URI")
    p.add_argument("--output-dir", required=True, help="where stats.json, report.md and validation.json go")
    p.add_argument("--config", help="YAML: ValidateConfig fields (flags given override them)")
    add_config_flags(
        p,
        ValidateConfig,
        rename={"validation_policy": "--policy"},
        overrides={
            "validation_policy": {"action": "extend", "nargs": "+", "metavar": "KIND=LEVEL"},
            "allow": {"action": "extend", "metavar": "KEY"},
        },
    )
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Validates the dataset and publishes the result; see the module docstring.

    Returns:
        The exit status: 0 passed, 1 a finding of severity ``error``, 2 bad input.
    """
    args = _parser().parse_args(argv)
    configure_tensorflow_env()  # the step imports no TensorFlow; set like every command line all the same
    from trainer.tfrecords import DatasetError

    try:
        check_folder(args.dataset, "--dataset", "give a converted dataset folder (dataset.json inside)")
        config = load_section(ValidateConfig, args.config, flags_to_fields(args))
        from components.validate.run import publish, validate

        result = validate(args.dataset, config)
        paths = publish(result, args.output_dir)
    except (ConfigError, DatasetError) as err:
        return fail(err)
    for finding in result.findings:
        count = f" ({finding.count:,} record{'' if finding.count == 1 else 's'})" if finding.count else ""
        print(f"{finding.severity}: {finding.kind}{count}: {finding.message}")
    for note in result.notes:
        print(f"note: {note}")
    verdict = "passed" if result.passed else "FAILED"
    print(f"{verdict}: {', '.join(f'{n} {level}' for level, n in result.counts.items())}; wrote {', '.join(paths)}")
    return EXIT_OK if result.passed else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
