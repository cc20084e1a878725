"""``make run``'s training recipe, trained and scored outside the pipeline: the benchmarks that
compare one setting of it over seeds (precision, the detector's box loss) share this."""

from __future__ import annotations

import inspect
import os
from typing import Any, Optional


def run_form(module: str) -> dict[str, Any]:
    """The run form's defaults of one pipeline (what ``make run`` trains with)."""
    import importlib

    pipeline = importlib.import_module(f"pipelines.{module}").pipeline
    return {k: v.default for k, v in inspect.signature(pipeline.pipeline_func).parameters.items()}


def train_and_score(
    task_name: str,
    dataset: str,
    model_dir: str,
    form: dict[str, Any],
    seed: int,
    precision: str = "auto",
    model_options: Optional[dict[str, Any]] = None,
) -> tuple[dict[str, float], Any]:
    """Trains the form's recipe (``model_options`` over its own) and scores the export on the test split.

    Returns:
        The test metrics and the training summary (its precision and seconds).
    """
    from trainer.config import EvaluateConfig, TrainConfig
    from trainer.tasks import get_task
    from trainer.train import train

    config = TrainConfig(
        model=form["model"],
        epochs=form["epochs"] or None,  # 0: the schedule fitted to the data
        steps_per_epoch=form["steps_per_epoch"] or None,
        model_options={**form["model_options"], **(model_options or {})},
        batch_size_per_replica=form["batch_size_per_replica"],
        learning_rate=form["learning_rate"],
        augment=form["augment"],
        precision=precision,
        seed=seed,
    )
    summary = train(dataset, model_dir, config)
    result = get_task(task_name).evaluate(os.path.join(model_dir, "saved_model"), dataset, EvaluateConfig())
    return dict(result.metrics), summary
