"""The main pipeline: images -> TFRecords -> training on TPU -> evaluation and gate -> benchmark ->
demo -> (blessed) staging -> (asked for) prod, and the run report.

Compiled by ``make compile`` to ``dist/pipelines/end_to_end.yaml`` and run locally by ``make run``.
No TensorFlow here: compiling stays fast.
"""

from kfp import dsl

from pipelines import accelerators, flow

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
    source: str = "fashion-mnist",
    limit_per_split: int = 0,
    model: str = "mnist_cnn",
    model_options: dict = {},  # noqa: B006 (a pipeline default, never mutated)
    epochs: int = 5,
    steps_per_epoch: int = 0,
    batch_size_per_replica: int = 128,
    augment: bool = False,
    learning_rate: float = 0.001,
    accelerator_type: str = accelerators.DEFAULT_ACCELERATOR_TYPE,
    accelerator_count: int = accelerators.DEFAULT_ACCELERATOR_COUNT,
    value_thresholds: dict = {"accuracy": 0.8},  # noqa: B006 (a pipeline default, never mutated)
    change_thresholds: dict = {"accuracy": -0.01},  # noqa: B006
    benchmark_images: int = 3200,
    benchmark_batch_size: int = 64,
    serving_target: str = "local",
    stages_root: str = "",
    served_model_name: str = "classifier",
    promote_to_prod: bool = False,
):
    """Runs the whole flow once.

    Args:
        source: an image folder (one subfolder per class), a CSV/JSONL manifest, .npz, an IDX folder
            or COCO JSON, local or gs://; or a built-in dataset: fashion-mnist, digits.
        limit_per_split: keep at most this many images per split (a quick subset); 0 keeps all.
        model: the model builder (mnist_cnn is the GPU-vs-TPU notebook's CNN).
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
    """
    flow.build(**locals())  # every parameter of the run form, as it is
