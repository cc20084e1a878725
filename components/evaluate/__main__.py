r"""Command line: ``python -m components.evaluate --model-dir M --dataset D --output-dir OUT`` (no Kubeflow).

Scores the model's SavedModel on a split, compares it with what prod serves (``--stages-root``),
decides whether it is blessed (fail closed: no thresholds, no blessing) and writes what the
component writes: ``metrics.json``, ``confusion.json`` (a classifier's), ``report.md`` and ``blessing.json``.

Examples::

    python -m components.evaluate --model-dir models/run1 --dataset data/fmnist --output-dir out/eval \
        --value-threshold accuracy=0.8
    python -m components.evaluate --model-dir gs://b/models/run1 --dataset gs://b/ds --output-dir out/eval \
        --config run.yaml --stages-root gs://b/stages --change-threshold accuracy=-0.01 --require-blessed
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from components.cli import (
    EXIT_FAILED,
    EXIT_OK,
    add_config_flags,
    check_folder,
    fail,
    flags_to_fields,
    load_section,
    write_files,
)
from trainer.config import ConfigError, EvaluateConfig
from trainer.runtime import configure_tensorflow_env


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m components.evaluate",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit status: 0 done, 1 not blessed with --require-blessed, 2 bad input (one 'error: ...' line).",
    )
    p.add_argument("--model-dir", required=True, help="the model folder or gs:// URI (saved_model/ inside)")
    p.add_argument("--dataset", required=True, help="the dataset folder or gs:// URI (dataset.json inside)")
    p.add_argument("--output-dir", required=True, help="where metrics.json, report.md, ... are written")
    p.add_argument("--config", help="YAML: EvaluateConfig fields, or a whole-run Config with an evaluate: section")
    rename = {
        "value_thresholds": "--value-threshold",
        "change_thresholds": "--change-threshold",
        "slice_thresholds": "--slice-threshold",
        "slice_change_thresholds": "--slice-change-threshold",
    }
    metavars = {
        "value_thresholds": "METRIC=BOUND",
        "change_thresholds": "METRIC=DELTA",
        "slice_thresholds": "SLICE={METRIC: BOUND}",
        "slice_change_thresholds": "METRIC=DELTA",
    }
    # Repeatable; a threshold flag replaces the config file's whole mapping.
    add_config_flags(p, EvaluateConfig, rename=rename, overrides={k: {"metavar": v} for k, v in metavars.items()})
    p.add_argument("--stages-root", help="the promotion records (folder or gs://); prod's metrics are the baseline")
    p.add_argument(
        "--served-model-name",
        help="the name the model is served under: prod's model of that name is the baseline (default: the "
        "task's, classifier or detector)",
    )
    p.add_argument("--limit", type=int, help="score at most this many examples (a quick look)")
    p.add_argument("--require-blessed", action="store_true", help="exit 1 when the model is not blessed")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Parses the arguments, evaluates, writes the files, prints a summary.

    Returns:
        The exit status: 0 done, 1 not blessed (with ``--require-blessed``), 2 bad input.
    """
    args = _parser().parse_args(argv)
    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.evaluate.gate import ThresholdError
    from trainer.evaluate import EvaluationError
    from trainer.tfrecords import DatasetError

    try:
        if args.limit is not None and args.limit < 1:
            raise ConfigError(f"--limit must be >= 1, got {args.limit}")
        config = load_section(EvaluateConfig, args.config, flags_to_fields(args))
        check_folder(args.model_dir, "model folder", "give the folder the train step wrote (saved_model/ inside)")
        check_folder(args.dataset, "dataset folder", "give the folder the convert step wrote (dataset.json inside)")
        from components.evaluate.run import run_evaluation, write_outputs, write_traffic_reference

        outcome = run_evaluation(
            args.model_dir, args.dataset, config, args.stages_root, args.limit, served_model_name=args.served_model_name
        )
    except (ConfigError, ThresholdError, EvaluationError, DatasetError) as err:
        return fail(err)
    result = outcome.result
    paths = write_files(args.output_dir, result.output_files())
    report, blessing = (os.path.join(args.output_dir, name) for name in ("report.md", "blessing.json"))
    write_outputs(outcome, report, blessing)
    # What the monitor compares live traffic with, from the evaluation's answers.
    reference = write_traffic_reference(args.model_dir, args.dataset, config.split, outcome.answers)
    decision = outcome.decision
    print(f"model: {args.model_dir} on split {config.split!r} of {args.dataset}")
    print("metrics: " + ", ".join(f"{k} {v:.4g}" for k, v in result.metrics.items()))
    print(f"blessed: {'yes' if decision.blessed else 'no'}")
    for reason in decision.reasons:
        print(f"  - {reason}")
    print("wrote: " + ", ".join([*paths, report, blessing, reference]))
    return EXIT_FAILED if args.require_blessed and not decision.blessed else EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
