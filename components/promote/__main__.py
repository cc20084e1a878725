r"""Command line: ``python -m components.promote {promote,rollback,promote-version} ...`` (no Kubeflow).

The three components of the promote step, with the same configuration (``PromoteConfig``: every
field is a flag, a ``--config`` YAML gives the rest) and the same stage store, checks, rollback
and history as in a pipeline. It prints the Markdown report the component writes (``--json``: the
result as JSON) and can write it to a file (``--report``).

Examples::

    python -m components.promote promote --model-dir runs/model --dataset data/fmnist \
        --stage demo --stages-root runs/stages
    python -m components.promote promote-version --source-stage demo --stage staging \
        --stages-root gs://bucket/stages --target kubernetes
    python -m components.promote rollback --stage demo --stages-root runs/stages
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from components.cli import add_config_flags, flags_to_fields, load_section
from components.serving.config import STAGES, PromoteConfig
from components.serving.targets import target_names
from trainer.config import ConfigError
from trainer.runtime import configure_tensorflow_env
from trainer.tasks import task_names

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    """``--config`` and one flag per PromoteConfig field (``--stages-root`` for ``stages_root``)."""
    group = parser.add_argument_group("PromoteConfig (flags override --config)")
    group.add_argument("--config", help="YAML: PromoteConfig fields, or a whole-run Config with a promote: section")
    choices = {"task": task_names(), "stage": list(STAGES), "target": target_names()}
    add_config_flags(group, PromoteConfig, overrides={k: {"choices": v} for k, v in choices.items()})


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m components.promote",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit status: 0 done, 1 the checks failed (the stage was rolled back), 2 bad input.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="{promote,rollback,promote-version}")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help_text, description=help_text)
        c.add_argument("--run-id", help="the run recorded in the stage history (default cli-<UTC time>)")
        c.add_argument("--report", help="also write the Markdown report to this file")
        c.add_argument("--json", action="store_true", help="print the result as JSON instead of the report")
        return c

    promote = command("promote", "publish a model to a stage, serve it, check it; roll back on any failure")
    promote.add_argument("--model-dir", required=True, help="the model folder (saved_model/ inside) or a SavedModel")
    promote.add_argument("--dataset", required=True, help="the dataset whose test split gives the known examples")
    promote.add_argument(
        "--metrics",
        help="a JSON file of evaluation metrics to record (the gate's baseline); default: score the test split",
    )
    _add_config_flags(promote)

    _add_config_flags(command("rollback", "return a stage to the version it served before, checked"))

    move = command("promote-version", "move the version a stage serves (having passed) to the next stage")
    move.add_argument("--source-stage", required=True, choices=["demo", "staging"], help="the stage it comes from")
    move.add_argument("--version", type=int, help="the source stage's version (default: the one it serves)")
    _add_config_flags(move)
    return p


def _task_defaults(args: argparse.Namespace) -> dict[str, Any]:
    """What the model's task says where neither file nor flags do: the served model name."""
    from trainer.tasks import task_of_model

    if args.command != "promote":
        return {}
    return {"model_name": task_of_model(args.model_dir).run_defaults.served_model_name}


def _metrics(path: Optional[str]) -> Optional[dict[str, Any]]:
    if path is None:
        return None
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError(f"--metrics {path}: {err}; give a JSON object such as the evaluation's metrics") from err
    if not isinstance(data, dict):
        raise ConfigError(f"--metrics {path}: expected a JSON object of metric -> value, got {type(data).__name__}")
    return data


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parses the arguments, runs the command, prints the report.

    Returns:
        The exit status: 0 done, 1 the checks failed (rolled back), 2 bad input.
    """
    args = _parser().parse_args(argv)
    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.promote.result import PromotionError, render_report
    from components.promote.rollback import rollback
    from components.promote.run import promote, promote_version
    from trainer.tasks import TaskError

    run_id = args.run_id or "cli-" + datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    try:
        config = load_section(PromoteConfig, args.config, flags_to_fields(args), _task_defaults(args))
        if args.command == "promote":
            result = promote(args.model_dir, args.dataset, config, run_id, metrics=_metrics(args.metrics))
        elif args.command == "rollback":
            result = rollback(config, run_id)
        else:
            result = promote_version(config, args.source_stage, run_id, version=args.version)
    except PromotionError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    except (ConfigError, TaskError, ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    report = render_report(result)
    if args.report:
        Path(args.report).parent.mkdir(parents=True, exist_ok=True)
        Path(args.report).write_text(report)
    print(json.dumps(result.to_dict(), indent=1) if args.json else report, end="" if not args.json else "\n")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
