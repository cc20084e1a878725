"""The main pipeline: images -> TFRecords -> training on TPU -> evaluation and gate -> benchmark ->
demo -> (blessed) staging -> (asked for) prod, and the run report.

Its run form is generated from the classification task and the step configs (``flow.pipeline``).
Compiled by ``make compile`` to ``dist/pipelines/end_to_end.yaml`` and run locally by ``make run``.
No TensorFlow here: compiling stays fast.
"""

import functools

from pipelines import flow

TASK = "classification"
NAME = "end-to-end"
FORM = flow.run_form(TASK)  # the run form's defaults (the configs', the task's)


# The pipeline, or with a compile-time accelerator preset: build(preset="gke-tpu-v5e-2x4")
# (make compile ACCELERATOR=...), which replaces the run form's accelerator_type and accelerator_count.
build = functools.partial(
    flow.pipeline,
    TASK,
    name=NAME,
    description=(
        "Image folder or Fashion-MNIST -> sharded TFRecords -> Keras training on a Cloud TPU v2-8 "
        "(GPU/CPU by parameter) -> evaluation with a fail-closed gate -> inference benchmark -> "
        "promotion demo -> staging (if blessed) -> prod (if asked)."
    ),
    summary="Runs the whole flow once.",
)


pipeline = build()
