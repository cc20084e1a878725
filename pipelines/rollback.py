"""The ``rollback`` pipeline: return a stage to the version it served before, verified.

The stage's newest version is taken out of service, the one before it is served again (rolled out
on Kubernetes, or a loopback server locally) and checked with the images of its last
promotion; the stage's history records the rollback. Compiled to ``dist/pipelines/rollback.yaml``.
"""

from kfp import dsl

from components.promote.component import rollback_stage_op

NAME = "rollback"


@dsl.pipeline(name=NAME, description="Return a serving stage to its previous model version, verified by smoke tests.")
def pipeline(
    stage: str = "prod",
    stages_root: str = "",
    serving_target: str = "local",
    served_model_name: str = "classifier",
    kserve_mode: str = "knative",
):
    """Rolls one stage back by one version.

    Args:
        stage: demo, staging or prod.
        stages_root: the stage store (folder or gs://); empty means <pipeline root>/stages.
        serving_target: local (a loopback model server) or kubernetes (the stage's manifests).
        served_model_name: the name models are served under (/v1/models/<name>).
        kserve_mode: with serving_target kserve, the cluster's KServe deployment mode: knative
            (canary steps) or standard (replace and roll back); docs/kserve.md.
    """
    rollback_stage_op(
        stage=stage,
        stages_root=stages_root,
        pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
        target=serving_target,
        model_name=served_model_name,
        run_id=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
        kserve_mode=kserve_mode,
    ).set_display_name("Roll back").set_caching_options(False)
