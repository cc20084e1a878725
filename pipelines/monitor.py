"""The ``monitor`` pipeline: watch every serving stage (meant as a recurring run).

For each stage that serves a model it asks Prometheus (``prometheus_url``) for the stage's
objectives over ``window`` (the alert expressions of manifests/monitoring: error ratio, p99
latency, targets up, model load failures) and sends the API regression and prediction checks on
the known images the stage registry kept at promotion; it reports a Markdown table and Metrics,
and a broken stage fails the run. Compiled to ``dist/pipelines/monitor.yaml``; schedule it as a
recurring run in the Kubeflow UI (docs/observability.md).
"""

from kfp import dsl

from components.monitor.component import fail_if_broken, monitor_stages
from pipelines import platform

NAME = "monitor"


@platform.pipeline(name=NAME, description="Watch every serving stage: Prometheus objectives and prediction checks.")
def pipeline(
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090",
    stages: list = ["demo", "staging", "prod"],  # noqa: B006 (a KFP default, never mutated)
    window: str = "1h",
    stages_root: str = "",
    serving_target: str = "kubernetes",
    served_model_name: str = "classifier",
    serving_options: dict = {},  # noqa: B006 (a KFP default, never mutated)
):
    """Watches the stages once.

    Args:
        prometheus_url: the Prometheus query API's base URL (kube-prometheus-stack: the
            prometheus-operated Service; Managed Service for Prometheus: its frontend).
        stages: the stages to watch.
        window: the objectives' PromQL range (30m, 1h, ...): about the time between two runs.
        stages_root: the stage store (folder or gs://); empty means <pipeline root>/stages.
        serving_target: kubernetes (the stages' Services), kserve (each model's InferenceService)
            or local (loopback servers from the registry).
        served_model_name: the name models are served under (/v1/models/<name>).
        serving_options: the serving target's own settings, as for the promotion (docs/kserve.md).
    """
    watch = (
        monitor_stages(
            prometheus_url=prometheus_url,
            stages=stages,
            window=window,
            stages_root=stages_root,
            pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
            target=serving_target,
            model_name=served_model_name,
            serving_options=serving_options,
        )
        .set_display_name("Watch the stages")
        .set_caching_options(False)
    )
    fail_if_broken(status=watch.outputs["Output"]).set_display_name("Fail if a stage is broken").set_caching_options(
        False
    )
