"""KFP component: the run report, one self-contained HTML page, shown inline by the Kubeflow UI."""

from kfp.dsl import HTML, Artifact, ClassificationMetrics, Dataset, Input, Metrics, Model, Output

from components.images import project_component


@project_component
def build_report(
    dataset: Input[Dataset],
    model: Input[Model],
    evaluation: Input[Metrics],
    confusion: Input[ClassificationMetrics],
    blessing: Input[Artifact],
    samples: Input[Artifact],
    benchmark: dict,
    report: Output[HTML],
    validation: dict = {},  # noqa: B006 (a component default, never mutated)
    stages_root: str = "",
    pipeline_root: str = "",
    run_id: str = "",
    title: str = "Run report",
):
    """Builds the run report from the artifacts the other steps published.

    Step status and times are not in it: a step on a cluster cannot see them (the Kubeflow UI's
    run graph shows them; the local report of ``make run`` lists them).

    Args:
        dataset: the Dataset folder (dataset.json: counts per split and class; rejected.jsonl).
        model: the Model folder (training.json: the per-epoch history).
        evaluation: the evaluation's Metrics (read from its metadata).
        confusion: the evaluation's ClassificationMetrics (read from its metadata).
        blessing: the gate's decision JSON.
        samples: the evaluation's part of the report (its image sample and the task's parts of the
            dataset, training and evaluation sections; JSON).
        benchmark: the benchmark step's output row.
        validation: what the validate step returned (validation.json); empty: none ran.
        report: the page (an HTML artifact; the Kubeflow UI shows it in a sandboxed frame).
        stages_root: the promotion records; empty means ``<pipeline_root>/stages``.
        pipeline_root: pass ``dsl.PIPELINE_ROOT_PLACEHOLDER``.
        run_id: pass ``dsl.PIPELINE_JOB_NAME_PLACEHOLDER`` (shown in the header).
        title: the page's title.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.report.run import ReportInputs, read_json, write_report
    from components.serving.stages import resolve_stages_root

    inputs = ReportInputs(
        title=title,
        run=run_id,
        dataset_dir=dataset.path,
        model_dir=model.path,
        evaluation=dict(evaluation.metadata),
        confusion=dict(confusion.metadata),
        blessing=read_json(blessing.path),
        samples=read_json(samples.path),
        benchmark=dict(benchmark),
        validation=dict(validation or {}),
        stages_root=resolve_stages_root(stages_root, pipeline_root),
    )
    report.metadata["bytes"] = write_report(inputs, report.path)
