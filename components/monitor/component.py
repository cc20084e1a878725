"""KFP adapters of the monitor step: watch the serving stages, then fail the run if one is broken."""

from kfp.dsl import Markdown, Metrics, Output

from components.images import project_component


@project_component
def monitor_stages(
    report: Output[Markdown],
    metrics: Output[Metrics],
    prometheus_url: str,
    stages: list = ["demo", "staging", "prod"],  # noqa: B006 (a KFP default, never mutated)
    window: str = "1h",
    stages_root: str = "",
    pipeline_root: str = "",
    target: str = "local",
    model_name: str = "classifier",
    serving_options: dict = {},  # noqa: B006 (a KFP default, never mutated)
) -> str:
    """Asks Prometheus for each stage's objectives and re-runs the API and prediction checks.

    Succeeds with a status (so that the report and metrics are published even when a stage is
    broken); ``fail_if_broken`` then fails the run.

    Args:
        report: a Markdown table per stage.
        metrics: ``<stage>_<objective>`` values and ``<stage>_passed``.
        prometheus_url: the Prometheus query API's base URL.
        stages: the stages to watch.
        window: the PromQL range of the objectives (30m, 1h, ...).
        stages_root: the stage registry; "" means <pipeline_root>/stages.
        pipeline_root: the pipeline root (dsl.PIPELINE_ROOT_PLACEHOLDER).
        target: local (a loopback server from the registry), kubernetes (the stage's Service),
            kserve (each model's InferenceService) or an extension's.
        model_name: the served model name.
        serving_options: the target's own settings, as the promotion's.

    Returns:
        ``ok`` or ``broken: <stage>: <what>; ...``.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    from components.monitor.run import monitor, status_line
    from components.serving.config import MonitorConfig
    from components.serving.stages import resolve_stages_root

    config = MonitorConfig(
        prometheus_url=prometheus_url,
        stages_root=resolve_stages_root(stages_root, pipeline_root),
        stages=tuple(stages),
        window=window,
        target=target,
        model_name=model_name,
        serving_options=serving_options,
    )
    result = monitor(config)
    with open(report.path, "w") as f:
        f.write(result.to_markdown())
    for name, value in result.metrics().items():
        metrics.log_metric(name, value)
    return status_line(result)


@project_component
def fail_if_broken(status: str) -> None:
    """Fails the run when the monitor found a broken stage (``status`` is not ``ok``)."""
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # before anything imports TensorFlow
    if status != "ok":
        raise RuntimeError(f"the monitor found {status}; its report says what was missed")
