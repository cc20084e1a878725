"""KFP component: evaluate the exported model and decide whether it is blessed (fail closed)."""

from typing import Optional

from kfp.dsl import HTML, Artifact, ClassificationMetrics, Dataset, Input, Markdown, Metrics, Model, Output

from components.images import project_component


@project_component
def evaluate_model(
    model: Input[Model],
    dataset: Input[Dataset],
    metrics: Output[Metrics],
    confusion: Output[ClassificationMetrics],
    report: Output[Markdown],
    blessing: Output[Artifact],
    samples: Output[Artifact],
    page: Output[HTML],
    value_thresholds: Optional[dict] = None,
    change_thresholds: Optional[dict] = None,
    stages_root: str = "",
    pipeline_root: str = "",
    split: str = "test",
    batch_size: int = 256,
    evaluation_options: Optional[dict] = None,
    served_model_name: str = "classifier",
    slice_thresholds: Optional[dict] = None,
    slice_change_thresholds: Optional[dict] = None,
    slice_columns: Optional[list] = None,
    slice_min_size: int = 30,
) -> bool:
    """Scores the SavedModel on a split, compares it with prod, and returns whether it is blessed.

    Args:
        model: the trained model folder (``saved_model/`` inside).
        dataset: the TFRecord dataset folder.
        metrics: the task's scalar metrics (classification: accuracy, top-k accuracy, loss, macro
            precision/recall/F1).
        confusion: the confusion matrix (drawn by the Kubeflow UI), for tasks that have one.
        report: Markdown: decision, metrics, the task's tables (classification: per class, most
            confused pairs).
        blessing: JSON: decision, reasons, checks, baseline.
        samples: JSON: the run report's part of the evaluation (components/evaluate/samples.py):
            the task's image sample (a classifier's images with true and predicted labels,
            mistakes first; a detector's worst and best images with their boxes drawn) and its
            parts of the report's dataset, training and evaluation sections.
        page: HTML: the confusion heatmap (classification), or the precision-recall curves and test
            images with true and predicted boxes (detection).
        value_thresholds: metric -> bound (a lower bound where higher is better, an upper bound for
            ``loss``: the task says which).
        change_thresholds: metric -> minimum improvement over the model prod serves now.
        stages_root: the promotion records; empty means ``<pipeline_root>/stages``.
        pipeline_root: pass ``dsl.PIPELINE_ROOT_PLACEHOLDER``.
        split: the split to score.
        batch_size: examples per inference call.
        evaluation_options: the model's task's own settings of its evaluation (classification:
            ``top_k``, the k of the top-k accuracy); empty: the task's defaults.
        served_model_name: the name the model is served under; prod's model of that name is the
            baseline of the change thresholds.
        slice_thresholds: slice -> {metric: bound}: a column (every value of it: ``camera``,
            ``class``, ``size``, ``area``) or one slice (``camera:night``); each failing slice
            is one of the gate's reasons.
        slice_change_thresholds: metric -> the least change of every scored slice against the
            same slice of prod's model.
        slice_columns: the extra columns to slice by; empty: every one the records have.
        slice_min_size: slices with fewer examples are listed, not scored.

    Returns:
        True when every configured threshold passed; False otherwise or when none is configured.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.evaluate.run import run_evaluation, write_outputs, write_traffic_reference
    from components.progress import reporter
    from components.serving.stages import resolve_stages_root
    from trainer.config import EvaluateConfig

    config = EvaluateConfig(
        split=split,
        batch_size=batch_size,
        evaluation_options=evaluation_options or {},
        value_thresholds=value_thresholds or {},
        change_thresholds=change_thresholds or {},
        slice_thresholds=slice_thresholds or {},
        slice_change_thresholds=slice_change_thresholds or {},
        slice_columns=tuple(slice_columns) if slice_columns else None,
        slice_min_size=slice_min_size,
    )
    outcome = run_evaluation(
        model.path,
        dataset.path,
        config,
        resolve_stages_root(stages_root, pipeline_root),
        served_model_name=served_model_name,
        on_progress=reporter("evaluate", "images"),
    )
    for name, value in outcome.result.recorded_metrics().items():
        metrics.log_metric(name, value)
    if outcome.confusion is not None:
        confusion.log_confusion_matrix(*outcome.confusion)
    write_outputs(outcome, report.path, blessing.path, page.path, samples.path)
    write_traffic_reference(model.path, dataset.path, split, outcome.answers)  # what the monitor compares with
    blessing.metadata.update(
        {"task": outcome.task, "blessed": outcome.decision.blessed, "reasons": outcome.decision.reasons}
    )
    return outcome.decision.blessed
