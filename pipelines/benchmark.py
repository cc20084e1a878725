"""The ``benchmark`` pipeline: one trained model timed on several accelerators, priced, compared.

Fans out with ``dsl.ParallelFor`` over accelerator entries; each task requests its accelerator
(the entry's resource name and count, which KFP resolves at run time into the pod's
``resources.limits``; an empty resource name requests none, i.e. CPU only) and times batched
inference on the exported SavedModel. A join task turns the rows into the case study's table
(accelerator, cores, time, images/s, $/hour, images/$; fastest and cheapest marked) as Markdown
and an HTML chart. Under kfp.local the fan-out runs over CPU entries with the same join code.

Compiled by ``make compile`` to ``dist/pipelines/benchmark.yaml``. No TensorFlow here.
"""

from kfp import dsl

from components.benchmark.component import benchmark_inference, join_benchmarks
from pipelines import accelerators, platform

NAME = "benchmark"

# Each entry: the price table key it is reported under, and the resource the pod asks for.
# TPU/GPU entries match pipelines.accelerators presets (tpu-v2-8, gpu-1); cpu-8 asks for none.
DEFAULT_ACCELERATORS = [
    {"accelerator": "tpu-v2-8", "accelerator_type": "cloud-tpus.google.com/v2", "accelerator_count": "8"},
    {"accelerator": "gpu-1", "accelerator_type": "nvidia.com/gpu", "accelerator_count": "1"},
    {"accelerator": "cpu-8", "accelerator_type": "", "accelerator_count": "0"},
]

# The entries a laptop run uses: the same fan-out and join, CPU only.
LOCAL_ACCELERATORS = [
    {"accelerator": "cpu-2", "accelerator_type": "", "accelerator_count": "0"},
    {"accelerator": "cpu-8", "accelerator_type": "", "accelerator_count": "0"},
]


@platform.pipeline(name="benchmark-on-accelerator", nested=True, part_of=NAME)
def benchmark_on(
    model: dsl.Input[dsl.Model],
    dataset: dsl.Input[dsl.Dataset],
    accelerator: str,
    accelerator_type: str,
    accelerator_count: str,
    num_images: int,
    batch_size: int,
    http: bool,
) -> dict:
    """One fan-out branch: the benchmark task with its accelerator request.

    A nested pipeline because kfp 2.17.3 compiles a ParallelFor item's fields used directly in
    resource requests into references the loop does not define (the YAML would not run); passed
    as this pipeline's inputs they compile to proper runtime placeholders.
    """
    task = benchmark_inference(
        model=model,
        dataset=dataset,
        num_images=num_images,
        batch_size=batch_size,
        accelerator=accelerator,
        http=http,
    ).set_display_name("Benchmark")
    accelerators.set_accelerator(task, accelerator_type, accelerator_count, retries=0)
    # Timings measure the hardware now; they are not a function of the inputs.
    task.set_caching_options(False)
    return task.outputs["Output"]


@platform.pipeline(
    name=NAME,
    description=(
        "Inference benchmark of one exported model across accelerators (the case study's 3,200 images "
        "in batches of 64): images/s, latency percentiles, $/hour and images per dollar, joined into one "
        "table with the fastest and the cheapest marked."
    ),
)
def pipeline(
    model_uri: str,
    dataset_uri: str,
    accelerators_to_try: list = DEFAULT_ACCELERATORS,  # noqa: B006 (a pipeline default, never mutated)
    num_images: int = 3200,
    batch_size: int = 64,
    http: bool = True,
):
    """Benchmarks a trained model on each accelerator and joins the results.

    Args:
        model_uri: the Model artifact of a training run (a folder with ``saved_model/``), gs:// on a
            cluster (copy it from the train step's output in the Kubeflow UI).
        dataset_uri: the Dataset artifact whose test split's images are sent.
        accelerators_to_try: entries ``{accelerator, accelerator_type, accelerator_count}``:
            ``accelerator`` is the price table key (cpu-8, v100, tpu-v3-8, ...), the other two the
            pod's accelerator resource and count (empty type: CPU only).
        num_images: images timed per accelerator.
        batch_size: images per batch.
        http: also time the served path (local model server, REST) in each task.
    """
    model = dsl.importer(artifact_uri=model_uri, artifact_class=dsl.Model, reimport=False).set_display_name("Model")
    dataset = dsl.importer(artifact_uri=dataset_uri, artifact_class=dsl.Dataset, reimport=False).set_display_name(
        "Dataset"
    )
    with dsl.ParallelFor(accelerators_to_try) as entry:
        branch = benchmark_on(
            model=model.output,
            dataset=dataset.output,
            accelerator=entry.accelerator,
            accelerator_type=entry.accelerator_type,
            accelerator_count=entry.accelerator_count,
            num_images=num_images,
            batch_size=batch_size,
            http=http,
        ).set_display_name("Benchmark on accelerator")
    join_benchmarks(results=dsl.Collected(branch.output)).set_display_name("Compare accelerators")
