"""The ``rollback`` pipeline: return a stage to the version it served before, verified.

The stage's newest version is taken out of service, the one before it is served again (rolled out
on Kubernetes, or a loopback server locally) and checked with the images of its last
promotion; the stage's history records the rollback. Compiled to ``dist/pipelines/rollback.yaml``.
"""

from kfp import dsl

from components.promote.component import rollback_stage
from pipelines import platform

NAME = "rollback"


@platform.pipeline(
    name=NAME, description="Return a serving stage to its previous model version, verified by smoke tests."
)
def pipeline(
    stage: str = "prod",
    stages_root: str = "",
    serving_target: str = "local",
    served_model_name: str = "classifier",
    serving_options: dict = {},  # noqa: B006 (a pipeline default, never mutated)
):
    """Rolls one stage back by one version.

    Args:
        stage: demo, staging or prod.
        stages_root: the stage store (folder or gs://); empty means <pipeline root>/stages.
        serving_target: local (a loopback model server), kubernetes (the stage's manifests) or
            kserve (an InferenceService per model).
        served_model_name: the name models are served under (/v1/models/<name>).
        serving_options: the serving target's own settings, by name: for kserve {mode: standard}
            (knative, the default, splits traffic in canary steps; standard replaces and rolls
            back); docs/kserve.md. A key the target does not take fails the step.
    """
    rollback_stage(
        stage=stage,
        stages_root=stages_root,
        pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
        target=serving_target,
        model_name=served_model_name,
        run_id=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
        serving_options=serving_options,
    ).set_display_name("Roll back").set_caching_options(False)
