"""The main pipeline: images -> TFRecords -> training on TPU -> evaluation and gate -> benchmark ->
demo -> (blessed) staging -> (asked for) prod, and the run report.

Compiled by ``make compile`` to ``dist/pipelines/end_to_end.yaml`` and run locally by ``make run``.
No TensorFlow here: compiling stays fast.
"""

from kfp import dsl

from pipelines import flow

FORM = flow.run_form("classification")  # the run form's defaults (the configs', the task's)
NAME = "end-to-end"


@dsl.pipeline(
    name=NAME,
    description=(
        "Image folder or Fashion-MNIST -> sharded TFRecords -> Keras training on a Cloud TPU v2-8 "
        "(GPU/CPU by parameter) -> evaluation with a fail-closed gate -> inference benchmark -> "
        "promotion demo -> staging (if blessed) -> prod (if asked)."
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
    """Runs the whole flow once.

    Args:
        source: an image folder (one subfolder per class), a CSV/JSONL manifest, .npz, an IDX folder
            or COCO JSON, local or gs://; or a built-in dataset: fashion-mnist, digits.
        limit_per_split: keep at most this many images per split (a quick subset); 0 keeps all.
        model: the model builder; auto chooses from the images (mnist_cnn, the GPU-vs-TPU notebook's
            CNN, for small ones; transfer_classifier at a fitted size for photos).
        model_options: extra arguments of the model builder, e.g. {backbone: mobilenet_v2} for
            transfer_classifier; empty for none.
        epochs: training epochs.
        steps_per_epoch: training steps per epoch; 0 means one pass over the training split.
        batch_size_per_replica: examples per accelerator core per step (128 suits a TPU core).
        augment: random flips and small translations of the training images (off: a flip changes
            the meaning of digit-like data).
        learning_rate: learning rate for a global batch of 128, scaled with the global batch.
        accelerator_type: the train pod's accelerator resource: cloud-tpus.google.com/v2 (a TPU
            v2-8 on GKE), cloud-tpus.google.com/v3, nvidia.com/gpu, ...
        accelerator_count: how many of it: 8 for a v2-8/v3-8, 1 for one GPU.
        workers: pods training together (MultiWorkerMirroredStrategy), each with the accelerator
            above; 1 trains in the train pod itself. The case study's 5 x V100: workers=5,
            accelerator_type=nvidia.com/gpu, accelerator_count=1 (docs/training.md).
        launcher: how the workers start: auto (a JobSet where the cluster serves it, else an Indexed
            Job; local processes under kfp.local), jobset, job or local.
        value_thresholds: metric -> minimum for blessing; empty means never blessed (fail closed).
        change_thresholds: metric -> minimum change against the model prod serves now.
        benchmark_images: images timed by the inference benchmark.
        benchmark_batch_size: images per inference batch.
        serving_target: local (a loopback TensorFlow-Serving-compatible server in the step, stage
            folders under stages_root) or kubernetes (the stage's manifests applied to the cluster).
        stages_root: where stages keep model versions and history; empty means
            <pipeline root>/stages.
        served_model_name: the name models are served under (/v1/models/<name>).
        promote_to_prod: after staging passed, promote to prod as well.
        kserve_mode: with serving_target kserve (one KServe InferenceService per model), the
            cluster's KServe deployment mode: knative (canary steps) or standard; docs/kserve.md.
        canary_steps: the traffic shares (percent, the last 100) a new version takes one after
            the other, checked at each; empty: the target's default (kserve: 10, 50, 100; local:
            none, the new version replaces the old at once).
    """
    flow.build(**locals())  # every parameter of the run form, as it is
