"""KFP adapter of the validate step: parameters -> ValidateConfig, the dataset artifact -> its folder, one call.

``validate_dataset`` runs between convert and train: it fails (before any accelerator is paid
for) when a finding's severity is ``error``, and publishes the statistics (the next validation's
baseline) and the findings as artifacts either way.
"""

from kfp.dsl import Artifact, Dataset, Input, Markdown, Output

from components.images import project_component


@project_component
def validate_dataset(
    dataset: Input[Dataset],
    statistics: Output[Artifact],
    report: Output[Markdown],
    validation_policy: dict = {},  # noqa: B006 (a component default, never mutated)
    allow: list = [],  # noqa: B006
    baseline: str = "",
    stages_root: str = "",
    pipeline_root: str = "",
    served_model_name: str = "",
    near_duplicates: bool = False,
) -> dict:
    """Checks the converted dataset: leakage, label conflicts, class and box anomalies, drift.

    Args:
        dataset: the converted dataset.
        statistics: the folder of ``stats.json`` and ``validation.json``.
        report: the findings as a Markdown table (the Kubeflow UI).
        validation_policy: finding kind -> ``error``, ``warn`` or ``ignore``, over the defaults
            (docs/validation.md).
        allow: record keys known and accepted (left out of every finding).
        baseline: an earlier validation's ``stats.json`` (or its folder), or a converted dataset,
            to compare with; empty: the dataset that prod (else staging) serves a model trained
            on, where ``served_model_name`` is given and a stage serves it (else the drift checks
            are skipped and the report says so).
        stages_root: the stage store; empty for ``<pipeline_root>/stages``.
        pipeline_root: pass ``dsl.PIPELINE_ROOT_PLACEHOLDER``.
        served_model_name: the model the stages serve (the run form's); empty: no served baseline.
        near_duplicates: also look for near-identical images across splits by a perceptual hash
            (every image decoded: slower; docs/validation.md).

    Returns:
        ``validation.json``'s content: passed, the counts per severity, the findings.

    Raises:
        ValidationFailed: a finding of severity ``error`` (each one a line of the message).
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()
    from components.params import without_none
    from components.progress import reporter
    from components.serving.stages import resolve_stages_root
    from components.validate.run import (
        check_passed,
        config_from_params,
        publish,
        report_markdown,
        served_baseline,
        validate,
    )

    note = None
    if not baseline and served_model_name:
        baseline, note = served_baseline(resolve_stages_root(stages_root, pipeline_root), served_model_name)
    config = config_from_params(
        validation_policy=validation_policy, allow=allow, baseline=baseline or "", near_duplicates=near_duplicates
    )
    result = validate(dataset.path, config, baseline_note=note, on_progress=reporter("validate", "images"))
    publish(result, statistics.path)
    with open(report.path, "w", encoding="utf-8") as f:
        f.write(report_markdown(result))
    statistics.metadata.update({"passed": result.passed, **{f"{k}s": n for k, n in result.counts.items()}})
    for finding in result.findings:
        print(f"{finding.severity}: {finding.kind}: {finding.message}", flush=True)
    check_passed(result)
    return without_none(result.to_dict())
