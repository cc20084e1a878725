"""KFP adapters of the promote step: promote a model to a stage, and roll a stage back."""

from typing import Optional

from kfp.dsl import Dataset, Input, Markdown, Metrics, Model, Output

from components.images import project_component


@project_component
def promote_model(
    model: Input[Model],
    dataset: Input[Dataset],
    report: Output[Markdown],
    stage: str,
    stages_root: str = "",
    pipeline_root: str = "",
    target: str = "local",
    model_name: str = "classifier",
    run_id: str = "",
    evaluation: Optional[Input[Metrics]] = None,
    serving_options: dict = {},  # noqa: B006 (a KFP default, never mutated)
    canary_steps: list = [],  # noqa: B006 (a KFP default, never mutated)
    allow_contract_change: bool = False,
    serving_format: str = "saved_model",
) -> int:
    """Publish the model to a stage, serves it, smoke-tests it; rolls back and fails on any failure.

    Args:
        model: the trained model folder (its saved_model/ is served).
        dataset: the dataset whose test split gives the known smoke-test images.
        report: a Markdown summary of the promotion and its checks.
        stage: demo, staging or prod.
        stages_root: the stage store (folder or gs://); "" means <pipeline_root>/stages.
        pipeline_root: the pipeline root (dsl.PIPELINE_ROOT_PLACEHOLDER).
        target: the serving target's name: local (a loopback model server), kubernetes (the
            stage's manifests), kserve (an InferenceService per model) or an extension's.
        model_name: the name served under /v1/models/<name>.
        run_id: the run that promotes (dsl.PIPELINE_JOB_NAME_PLACEHOLDER); "" records "unknown".
        evaluation: the evaluation step's metrics, recorded with the promotion (the gate's
            baseline); without it the test split is scored again.
        serving_options: the target's own settings (kserve: {mode: standard}); a key the target
            does not take fails the step, naming those it takes.
        canary_steps: the traffic shares (percent, the last 100) a new version takes one after
            the other where the target splits traffic; empty: the target's default (kserve
            Knative: 10, 50, 100; local: none).
        allow_contract_change: let a model whose classes, class order, input signature or output
            keys differ from what the stage serves under model_name replace it (recorded in the
            stage history); false refuses it with one line naming the difference.
        serving_format: the form the stage serves: saved_model, a portable format the export
            passed (litert, litert_int8, onnx, onnx_int8, openvino, openvino_int8) that the target
            can serve, or auto (the best images per dollar of those).

    Returns:
        The version the stage serves now.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.params import none_if_empty
    from components.promote.result import render_report
    from components.promote.run import promote
    from components.serving.config import PromoteConfig
    from components.serving.stages import resolve_stages_root

    config = PromoteConfig(
        stage=stage,
        target=target,
        stages_root=resolve_stages_root(stages_root, pipeline_root),
        model_name=model_name,
        serving_options=serving_options,
        canary_steps=none_if_empty(canary_steps),
        allow_contract_change=allow_contract_change,
        serving_format=serving_format,
    )
    metrics = dict(evaluation.metadata) if evaluation is not None else None
    result = promote(model.path, dataset.path, config, run_id=run_id or "unknown", metrics=metrics)
    with open(report.path, "w") as f:
        f.write(render_report(result))
    report.metadata.update({"stage": stage, "version": result.version, "no_op": result.no_op})
    report.metadata["serving_format"] = result.serving_format or "saved_model"
    if result.contract_change:
        report.metadata["contract_change"] = result.contract_change
    return int(result.version)


@project_component
def rollback_stage(
    report: Output[Markdown],
    stage: str,
    stages_root: str = "",
    pipeline_root: str = "",
    target: str = "local",
    model_name: str = "classifier",
    run_id: str = "",
    serving_options: dict = {},  # noqa: B006 (a KFP default, never mutated)
) -> int:
    """Return a stage to the version it served before the current one, verified by smoke tests.

    Args:
        report: a Markdown summary of the rollback.
        stage: demo, staging or prod.
        stages_root: the stage store; "" means <pipeline_root>/stages.
        pipeline_root: the pipeline root (dsl.PIPELINE_ROOT_PLACEHOLDER).
        target: local, kubernetes or kserve.
        model_name: the served model name.
        run_id: the run that rolls back (dsl.PIPELINE_JOB_NAME_PLACEHOLDER).
        serving_options: the target's own settings (kserve: {mode: standard}).

    Returns:
        The version the stage serves after the rollback.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.promote.result import render_report
    from components.promote.rollback import rollback
    from components.serving.config import PromoteConfig
    from components.serving.stages import resolve_stages_root

    config = PromoteConfig(
        stage=stage,
        target=target,
        stages_root=resolve_stages_root(stages_root, pipeline_root),
        model_name=model_name,
        serving_options=serving_options,
    )
    result = rollback(config, run_id=run_id or "unknown")
    with open(report.path, "w") as f:
        f.write(render_report(result))
    report.metadata.update({"stage": stage, "version": result.version})
    return int(result.version)


@project_component
def promote_version(
    report: Output[Markdown],
    source_stage: str,
    stage: str,
    version: int = 0,
    stages_root: str = "",
    pipeline_root: str = "",
    target: str = "local",
    model_name: str = "classifier",
    run_id: str = "",
    serving_options: dict = {},  # noqa: B006 (a KFP default, never mutated)
    canary_steps: list = [],  # noqa: B006 (a KFP default, never mutated)
    allow_contract_change: bool = False,
    serving_format: str = "saved_model",
) -> int:
    """Move the version a stage serves (having passed its checks) to the next stage, smoke-tested.

    Args:
        report: a Markdown summary of the promotion and its checks.
        source_stage: demo or staging.
        stage: the next stage (staging or prod).
        version: the source stage's version; 0 means the one it serves now (a pipeline-level
            parameter cannot be None). It must be the version the source stage serves.
        stages_root: the stage store; "" means <pipeline_root>/stages.
        pipeline_root: the pipeline root (dsl.PIPELINE_ROOT_PLACEHOLDER).
        target: local, kubernetes or kserve.
        model_name: the served model name.
        run_id: the run that promotes (dsl.PIPELINE_JOB_NAME_PLACEHOLDER).
        serving_options: the target's own settings (kserve: {mode: standard}).
        canary_steps: the traffic shares a new version takes one after the other (empty: the
            target's default).
        allow_contract_change: let the version replace a different contract (classes, their
            order, input signature, output keys) of what ``stage`` serves under model_name;
            false refuses it with one line naming the difference.
        serving_format: the form ``stage`` serves: saved_model, a portable format the export
            passed that the target can serve, or auto (the best images per dollar of those).

    Returns:
        The version ``stage`` serves now.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.params import none_if_empty
    from components.promote.result import render_report
    from components.promote.run import promote_version as promote_stage_version
    from components.serving.config import PromoteConfig
    from components.serving.stages import resolve_stages_root

    config = PromoteConfig(
        stage=stage,
        target=target,
        stages_root=resolve_stages_root(stages_root, pipeline_root),
        model_name=model_name,
        serving_options=serving_options,
        canary_steps=none_if_empty(canary_steps),
        allow_contract_change=allow_contract_change,
        serving_format=serving_format,
    )
    result = promote_stage_version(config, source_stage, run_id=run_id or "unknown", version=none_if_empty(version))
    with open(report.path, "w") as f:
        f.write(render_report(result))
    report.metadata.update({"stage": stage, "version": result.version, "source_version": result.source_version})
    if result.contract_change:
        report.metadata["contract_change"] = result.contract_change
    return int(result.version)
