r"""``python -m trainer`` / ``ltp-train``: the same training as the pipeline step, outside KFP.

This is what the plain TPU Job in ``manifests/tpu-job/`` runs. ``main()`` sets TensorFlow's
load-time environment (``trainer.runtime``, oneDNN on) before anything imports TensorFlow.

Examples:
    python -m trainer --dataset data/fashion-mnist --model-dir models/run1 --epochs 3
    python -m trainer --dataset gs://bucket/ds --model-dir gs://bucket/models/run1 \
        --config train.yaml --set batch_size_per_replica=128 --set accelerator=tpu
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional

import yaml

from trainer.config import ConfigError, TrainConfig
from trainer.runtime import configure_tensorflow_env

# Flags that map one-to-one onto TrainConfig fields.
_FLAGS = {
    "model": str,
    "epochs": int,
    "steps_per_epoch": int,
    "batch_size_per_replica": int,
    "learning_rate": float,
    "accelerator": str,
}


def load_config(
    path: str | None, overrides: Sequence[str], flags: dict[str, Any], defaults: dict[str, Any] | None = None
) -> TrainConfig:
    """The TrainConfig from a YAML file (TrainConfig fields, or a whole-run file's ``train:``), ``--set`` and flags.

    ``defaults`` (the dataset's task's, such as its model) lie under all three, for the fields
    none of them sets.

    Raises:
        ConfigError: an unknown key, a malformed ``--set``, or an invalid value.
    """
    data: dict[str, Any] = {}
    given: set[str] = set()
    if path:
        loaded = yaml.safe_load(Path(path).read_text()) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a YAML mapping, got {type(loaded).__name__}")
        # A whole-run file has a train: section (the steps check the others); a TrainConfig file has
        # the fields directly.
        data = dict(loaded["train"] or {}) if "train" in loaded else loaded
        given = set(loaded.get("train") or {}) if "train" in loaded else set(loaded)
    data.update({k: v for k, v in (defaults or {}).items() if k not in given})
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected field=value, e.g. --set precision=float32")
        data[key.strip()] = yaml.safe_load(value)
    data.update({k: v for k, v in flags.items() if v is not None})
    return TrainConfig.from_dict(data)


def _task_defaults(dataset: str) -> dict[str, Any]:
    """What the dataset's task trains where the config does not say: its model builder.

    Nothing where the folder is not a dataset: training then says so, after the config's checks.
    """
    from trainer.tasks import task_of_manifest
    from trainer.tfrecords import DatasetError, load_dataset_info

    try:
        info = load_dataset_info(dataset)
    except DatasetError:
        return {}
    return {"model": task_of_manifest(info).run_defaults.model}


def main(
    argv: Sequence[str] | None = None, prog: str = "python -m trainer", train_fn: Optional[Callable[..., Any]] = None
) -> int:
    """Parses the command line, trains, prints the training summary as JSON.

    Args:
        argv: the arguments; None reads ``sys.argv``.
        prog: the command's name in the usage text (``python -m components.train`` hands over here).
        train_fn: what trains, called as ``trainer.train.train``; None for that one
            (``python -m components.train`` passes the step's, which also runs several workers).

    Returns:
        The exit status: 0 on success, 2 for a bad config or dataset, 1 for a failed training.
    """
    configure_tensorflow_env()  # before trainer.train imports TensorFlow
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, help="dataset folder or gs:// URI (with dataset.json)")
    parser.add_argument("--model-dir", required=True, help="model folder or gs:// URI (resumes if it has checkpoints)")
    parser.add_argument("--config", help="YAML: TrainConfig fields, or a whole-run file with a train: section")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", help="override a field")
    for name, kind in _FLAGS.items():
        parser.add_argument("--" + name.replace("_", "-"), type=kind, help=f"TrainConfig.{name}")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from trainer.budget.layout import process_started_at
    from trainer.tasks import TaskError
    from trainer.tfrecords import DatasetError
    from trainer.train import TrainingError, train

    # A budget counts this process from its start (the imports included), as the step's does.
    train_fn = train_fn or functools.partial(train, started_at=process_started_at())

    try:
        config = load_config(args.config, args.set, {k: getattr(args, k) for k in _FLAGS}, _task_defaults(args.dataset))
    except (ConfigError, OSError, DatasetError, TaskError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        summary = train_fn(args.dataset, args.model_dir, config)
    except (DatasetError, TaskError) as err:  # TaskError: model options the dataset's task does not take
        print(f"error: {err}", file=sys.stderr)
        return 2
    except TrainingError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(json.dumps({k: v for k, v in summary.to_dict().items() if k != "history"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
