"""The train step's logic: the config from component parameters, the training run, model metadata."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import yaml

from trainer.budget import layout
from trainer.config import ConfigError, TrainConfig

if TYPE_CHECKING:
    from trainer.train import TrainingSummary


def train_config(config_yaml: str = "", model_options: Mapping[str, Any] | None = None, **fields: Any) -> TrainConfig:
    """Builds the TrainConfig from optional YAML plus the component's explicit parameters.

    Args:
        config_yaml: YAML mapping of TrainConfig fields, or empty.
        model_options: the model builder's options; None or empty leaves the YAML's (or none).
        **fields: fields set by the component's parameters; they override the YAML.

    Returns:
        The validated config.

    Raises:
        ConfigError: the YAML is not a mapping, names an unknown field, or a value is invalid.
    """
    data = yaml.safe_load(config_yaml) if config_yaml.strip() else {}
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"train config_yaml: expected a YAML mapping of TrainConfig fields, got {data!r}")
    if model_options:
        fields["model_options"] = dict(model_options)
    return TrainConfig.from_dict({**data, **fields})


log = logging.getLogger(__name__)


def describe_model(summary: TrainingSummary, config: TrainConfig) -> dict[str, Any]:
    """The Model artifact's metadata: what it was trained on and how to call it."""
    from trainer.tasks import get_task

    task = get_task(summary.task)
    height, width, channels = summary.image_shape
    return {
        "framework": "tensorflow",
        "task": summary.task,
        "model": summary.model,
        **({"model_reason": summary.model_reason} if summary.model_reason else {}),
        "accelerator": summary.accelerator,
        "strategy": summary.strategy,
        "replicas": summary.replicas,
        "workers": summary.workers,
        "precision": summary.precision,
        "config_hash": config.fingerprint(),
        "dataset_fingerprint": summary.dataset_fingerprint,
        "class_names": list(summary.class_names),
        "image_shape": [height, width, channels],
        "input_signature": {
            "serving_default": {task.serving.input_name: "tf.string [None] (encoded PNG/JPEG/GIF/BMP)"},
            task.serving.tensor_signature: {"images": f"float32 [None, {height}, {width}, {channels}] in [0, 1]"},
        },
        "output_signature": task.output_signature(len(summary.class_names)),
        "steps": summary.steps,
        "images_per_sec": summary.images_per_sec,
        **({"fit_summary": fit_summary(summary.fit)} if summary.fit else {}),
        **({"budget_summary": budget_summary(summary.budget)} if summary.budget else {}),
        **({"stopping": layout.stopping_line(summary.stopping)} if summary.stopping else {}),
    }


def budget_summary(record: Mapping[str, Any]) -> str:
    """What a budget bought, in one line for the console: the steps and the time it took."""
    took = record.get("actual_s")
    took_text = f", took {took:.0f}s" if took is not None else ""
    step_ms = 1000 * float(record.get("step_s") or 0)
    return f"{record.get('limit')}: {record.get('steps')} steps at {step_ms:.0f} ms{took_text}"


def fit_summary(fit: Mapping[str, Any]) -> str:
    """What the fit to the data chose, in one line, as the fit says it (its ``summary``).

    A fit recorded before the fit said its summary gives its first line instead.
    """
    return str(fit.get("summary") or next(iter(fit.get("lines") or []), "fitted to the data"))


# The generic training figures the step logs as Metrics (the task's come from the summary's ``metrics``).
METRIC_FIELDS = ("train_loss", "val_loss", "images_per_sec", "steps")


def scalar_metrics(summary: TrainingSummary) -> dict[str, float]:
    """The training figures for the step's ``Metrics`` artifact (those that are not None), the task's included."""
    values = {**{name: getattr(summary, name) for name in METRIC_FIELDS}, **summary.metrics}
    return {name: float(value) for name, value in values.items() if value is not None}
