"""Object detection end to end: COCO boxes (or the built-in ``shapes``) -> TFRecords -> RetinaNet on
a Cloud TPU v2-8 -> COCO mAP with a fail-closed gate -> inference benchmark -> demo -> (blessed)
staging -> (asked for) prod.

The same wiring as ``end_to_end`` (``pipelines.flow.build``), its run form generated from the
detection task (``flow.pipeline``): a UI run with no edits trains the small RetinaNet, its input
size, anchors and schedule fitted to the data in the train step. For real data at 512-640 px on
the TPU, set ``model_options`` to ``{"preset": "tpu-512"}`` (see docs/detection.md). Compiled by
``make compile`` to ``dist/pipelines/detection.yaml``; run locally by ``make run TASK=detection``.
"""

import functools

from pipelines import flow

TASK = "detection"
NAME = "detection"
FORM = flow.run_form(TASK)  # the run form's defaults (the configs', the task's)


# The pipeline, or with a compile-time accelerator preset: build(preset="gke-tpu-v5e-2x4")
# (make compile ACCELERATOR=...), which replaces the run form's accelerator_type and accelerator_count.
build = functools.partial(
    flow.pipeline,
    TASK,
    name=NAME,
    description=(
        "COCO boxes or the built-in shapes -> sharded TFRecords -> RetinaNet (keras-hub) on a Cloud TPU v2-8 "
        "(GPU/CPU by parameter) -> COCO mAP with a fail-closed gate -> inference benchmark -> promotion demo -> "
        "staging (if blessed) -> prod (if asked)."
    ),
    summary="Trains and ships a detector once.",
)


pipeline = build()
