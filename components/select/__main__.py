r"""Command line: ``python -m components.select``: the images of a pool worth labelling next.

Scores the pool with a model folder (or what a stage serves), leaves out the images the labelled
dataset has, ranks the rest by the strategy, keeps the picks apart, and writes selection.json, the
picked images, Label Studio tasks, a CVAT COCO 1.0 archive, YOLO labels and report.html under
--output-uri.

Examples::

    python -m components.select --data photos/ --model-dir local_outputs/model --output-uri out/to-label \
        --count 200 --dataset local_outputs/dataset
    python -m components.select --data photos/ --stage staging --stages-root local_outputs/stages \
        --output-uri out/to-label --strategy random --seed 3
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Optional

from components.cli import EXIT_OK, add_config_flags, fail, flags_to_fields, load_section
from components.select.config import DIVERSITY, SelectConfig
from trainer.config import ConfigError
from trainer.runtime import configure_tensorflow_env


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m components.select",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit status: 0 picked, 2 bad input (one 'error: ...' line).",
    )
    p.add_argument("--config", help="YAML: SelectConfig fields (flags given override them)")
    add_config_flags(p, SelectConfig, overrides={"diversity": {"choices": DIVERSITY}})
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Selects and writes the pick; see the module docstring.

    Returns:
        The exit status: 0 picked, 2 bad input.
    """
    args = _parser().parse_args(argv)
    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.image_input.sources import SourceError
    from components.progress import reporter
    from components.select.run import SelectError
    from components.select.selection import describe, select
    from components.select.write import local_path
    from trainer.tasks import TaskError
    from trainer.tfrecords import DatasetError

    try:
        config = load_section(SelectConfig, args.config, flags_to_fields(args))
        result = select(config, on_progress=reporter("select", "images", every_s=5.0))
    except (ConfigError, SelectError, SourceError, TaskError, DatasetError) as err:
        return fail(err)
    for line in describe(result):
        print(line)
    for name, file in result.files.items():
        print(f"{name.replace('_', ' ')}: {local_path(config.output_uri, file)}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
