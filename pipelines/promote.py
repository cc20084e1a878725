"""The ``promote`` pipeline: move the model version a stage serves on to the next stage.

demo -> staging, or staging -> prod, with the same publish, rollout, serving checks and rollback as
the main pipeline's promote steps. Only the version the source stage serves (having passed its
checks there) can move on, so prod never receives a model that did not pass staging.
Compiled to ``dist/pipelines/promote.yaml``; no TensorFlow here.
"""

from kfp import dsl

from components.promote.component import promote_version
from pipelines import platform

NAME = "promote"


@platform.pipeline(
    name=NAME, description="Move the model version a stage serves to the next stage (demo -> staging -> prod)."
)
def pipeline(
    source_stage: str = "staging",
    target_stage: str = "prod",
    version: int = 0,
    stages_root: str = "",
    serving_target: str = "local",
    served_model_name: str = "classifier",
    serving_options: dict = {},  # noqa: B006 (a pipeline default, never mutated)
    canary_steps: list = [],  # noqa: B006 (a pipeline default, never mutated)
    serving_format: str = "saved_model",
):
    """Promotes one version one stage further.

    Args:
        source_stage: demo or staging.
        target_stage: the stage after it: staging or prod.
        version: the source stage's version to move; 0 means the one it serves now.
        stages_root: the stage store (folder or gs://); empty means <pipeline root>/stages.
        serving_target: local (a loopback model server), kubernetes (the stage's manifests) or
            kserve (an InferenceService per model).
        served_model_name: the name models are served under (/v1/models/<name>).
        serving_options: the serving target's own settings, by name: for kserve {mode: standard}
            (knative, the default, splits traffic in canary steps; standard replaces and rolls
            back); docs/kserve.md. A key the target does not take fails the step.
        canary_steps: the traffic shares (percent, the last 100) the version takes one after the
            other at the target stage; empty: the target's default (kserve: 10, 50, 100; local: none).
        serving_format: the form the target stage serves: saved_model, a portable format the
            model's export passed (litert, litert_int8, onnx, onnx_int8) that the target can
            serve, or auto (the best images per dollar of those); docs/export.md.
    """
    promote_version(
        source_stage=source_stage,
        stage=target_stage,
        version=version,
        stages_root=stages_root,
        pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
        target=serving_target,
        model_name=served_model_name,
        run_id=dsl.PIPELINE_JOB_NAME_PLACEHOLDER,
        serving_options=serving_options,
        canary_steps=canary_steps,
        serving_format=serving_format,
    ).set_display_name("Promote version").set_caching_options(False)  # it changes what a stage serves
