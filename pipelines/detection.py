"""Object detection end to end: COCO boxes (or the built-in ``shapes``) -> TFRecords -> RetinaNet on
a Cloud TPU v2-8 -> COCO mAP with a fail-closed gate -> inference benchmark -> demo -> (blessed)
staging -> (asked for) prod.

The same wiring as ``end_to_end`` (``pipelines.flow.build``), with defaults for detection: a UI
run with no edits trains the small RetinaNet, its input size, anchors and schedule fitted to the
data in the train step. For real data at
512-640 px on the TPU, set ``model_options`` to ``{"preset": "tpu-512"}`` (see docs/detection.md).
Compiled by ``make compile`` to ``dist/pipelines/detection.yaml``; run locally by
``make run TASK=detection``.
"""

from kfp import dsl

from pipelines import flow

FORM = flow.run_form("detection")  # the run form's defaults (the configs', the task's)
NAME = "detection"


@dsl.pipeline(
    name=NAME,
    description=(
        "COCO boxes or the built-in shapes -> sharded TFRecords -> RetinaNet (keras-hub) on a Cloud TPU v2-8 "
        "(GPU/CPU by parameter) -> COCO mAP with a fail-closed gate -> inference benchmark -> promotion demo -> "
        "staging (if blessed) -> prod (if asked)."
    ),
)
def pipeline(
    source: str = FORM["source"],
    limit_per_split: int = FORM["limit_per_split"],
    model: str = FORM["model"],
    model_options: dict = FORM["model_options"],
    epochs: int = FORM["epochs"],
    steps_per_epoch: int = FORM["steps_per_epoch"],
    batch_size_per_replica: int = FORM["batch_size_per_replica"],
    augment: bool = FORM["augment"],
    learning_rate: float = FORM["learning_rate"],
    accelerator_type: str = FORM["accelerator_type"],
    accelerator_count: int = FORM["accelerator_count"],
    workers: int = FORM["workers"],
    launcher: str = FORM["launcher"],
    value_thresholds: dict = FORM["value_thresholds"],
    change_thresholds: dict = FORM["change_thresholds"],
    benchmark_images: int = FORM["benchmark_images"],
    benchmark_batch_size: int = FORM["benchmark_batch_size"],
    serving_target: str = FORM["serving_target"],
    stages_root: str = FORM["stages_root"],
    served_model_name: str = FORM["served_model_name"],
    promote_to_prod: bool = FORM["promote_to_prod"],
    kserve_mode: str = FORM["kserve_mode"],
    canary_steps: list = FORM["canary_steps"],
):
    """Trains and ships a detector once.

    Args:
        source: a COCO instances JSON (images beside it or under images/), local or gs://; or the
            built-in shapes (generated, no download).
        limit_per_split: keep at most this many images per split; 0 keeps all.
        model: retinanet (keras-hub's RetinaNetObjectDetector).
        model_options: detector options: image_size, anchor_size, num_scales, aspect_ratios,
            min_level/max_level, max_boxes, warmup_steps (each "auto" by default: fitted to the
            training boxes, within max_image_size), the ResNet's stackwise_filters/blocks/strides,
            head_convs, weights, ...; or {"preset": "tpu-512"} for a ResNet-50-class detector at
            512 px. Empty: the small detector, fitted to the data (docs/detection.md).
        epochs: training epochs; 0 fits a schedule in optimizer steps to the dataset's size and
            the global batch.
        steps_per_epoch: training steps per epoch; 0 means one pass over the training split.
        batch_size_per_replica: images per accelerator core per step.
        augment: random horizontal flips of the training images, boxes flipped with them.
        learning_rate: peak learning rate for a global batch of 128 (scaled with the global batch;
            0.008 gives 1e-3 at batch 16), after a short warm-up, with cosine decay.
        accelerator_type: the train pod's accelerator resource (cloud-tpus.google.com/v2: a TPU
            v2-8 on GKE; nvidia.com/gpu; ...).
        accelerator_count: how many of it: 8 for a v2-8/v3-8, 1 for one GPU.
        workers: pods training together (MultiWorkerMirroredStrategy), each with the accelerator
            above; 1 trains in the train pod itself. The case study's 5 x V100: workers=5,
            accelerator_type=nvidia.com/gpu, accelerator_count=1 (docs/training.md).
        launcher: how the workers start: auto (a JobSet where the cluster serves it, else an Indexed
            Job; local processes under kfp.local), jobset, job or local.
        value_thresholds: metric -> minimum for blessing (ap, ap50, ap75, ar100); empty means
            never blessed (fail closed).
        change_thresholds: metric -> minimum change against what prod serves under the same name.
        benchmark_images: images timed by the inference benchmark (the case study's 3,200).
        benchmark_batch_size: images per inference batch (the case study's 64).
        serving_target: local (a loopback TensorFlow-Serving-compatible server) or kubernetes.
        stages_root: where stages keep model versions and history; empty means <pipeline root>/stages.
        served_model_name: the name the detector is served under (/v1/models/<name>), next to the
            stage's other models.
        promote_to_prod: after staging passed, promote to prod as well.
        kserve_mode: with serving_target kserve (one KServe InferenceService per model), the
            cluster's KServe deployment mode: knative (canary steps) or standard; docs/kserve.md.
        canary_steps: the traffic shares (percent, the last 100) a new version takes one after
            the other, checked at each; empty: the target's default (kserve: 10, 50, 100; local:
            none, the new version replaces the old at once).
    """
    flow.build(**locals())  # every parameter of the run form, as it is
