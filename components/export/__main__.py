r"""Command line: ``python -m components.export --model-dir M --dataset D`` (no Kubeflow needed).

Converts the model's float32 rebuild to each portable format (LiteRT, ONNX; float32 and int8),
scores each through its own runtime on the test split, times and prices it against the served
SavedModel, gates it with its tolerance, and writes ``<model>/export/`` (``export.json`` last).

Example::

    python -m components.export --model-dir local_outputs/latest/model --dataset local_outputs/latest/dataset \
        --export-formats litert_int8 onnx_int8 --eval-images 200
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from components.cli import EXIT_OK, add_config_flags, check_folder, fail, flags_to_fields, load_section
from components.export.config import ExportConfig
from trainer.config import ConfigError
from trainer.runtime import configure_tensorflow_env


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m components.export",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit status: 0 done, 2 bad input (one 'error: ...' line).",
    )
    p.add_argument("--model-dir", required=True, help="the model folder (model.keras, saved_model/ inside)")
    p.add_argument("--dataset", required=True, help="the dataset folder (dataset.json inside)")
    p.add_argument("--config", help="YAML: ExportConfig fields, or a whole-run Config with an export: section")
    add_config_flags(p, ExportConfig)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Parses the arguments and runs the export; returns the exit status (0 done, 2 bad input)."""
    args = _parser().parse_args(argv)
    configure_tensorflow_env()  # before anything imports TensorFlow
    from trainer.budget.pricing import PriceTableError
    from trainer.export.formats import ExportError
    from trainer.tfrecords import DatasetError

    try:
        config = load_section(ExportConfig, args.config, flags_to_fields(args))
        check_folder(args.model_dir, "model folder", "give the folder the train step wrote (model.keras inside)")
        check_folder(args.dataset, "dataset folder", "give the folder the convert step wrote (dataset.json inside)")
        from components.export.run import export_step

        _record, _scalars, table = export_step(args.model_dir, args.dataset, config)
    except (ConfigError, PriceTableError, ExportError, DatasetError) as err:
        return fail(err)
    print(table, end="")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
