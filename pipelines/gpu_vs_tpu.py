"""The ``gpu_vs_tpu`` pipeline: the GPU-vs-TPU notebook as a pipeline.

Converts (Fashion-)MNIST to TFRecords, then trains the notebook's CNN for a few epochs on each
accelerator at batch sizes 256, 512 and 1024, one cell per accelerator x batch size in parallel,
timing every epoch; the first (compiling) epoch is excluded, as in the notebook. A join task
reports the notebook's two tables, epoch time (s) and step time per example (us), per batch size
and accelerator, plus a chart.

It runs on the ``sweep`` pipeline's grid: the cells are planned by ``plan_grid``
(``components.sweep.notebook.plan_notebook_cells``; its entries are the accelerator part of a grid
cell, ``components.sweep.grid.AcceleratorEntry``), each cell trains with the trainer's
``train()``, whose per-epoch times give the figures, and the fan-out is the grid's
(``pipelines.grid.fan_out``, the same compile-time ``SWEEP_PARALLELISM``). Each cell task requests
its accelerator through runtime placeholders (the entry's resource name and count; an empty name
requests none). Locally (kfp.local) it runs on CPU with a few steps. Compiled by ``make compile``
to ``dist/pipelines/gpu_vs_tpu.yaml``. Its form's data is the classification task's built-in data
(``run_defaults``), its model the trainer's default builder (``TrainConfig.model``: the notebook's
CNN). No TensorFlow here.
"""

from kfp import dsl

from components.convert.component import convert_to_tfrecords
from components.sweep.component import join_sweeps, plan_notebook_sweep, time_training_cell
from components.sweep.grid import AcceleratorEntry
from pipelines import accelerators, grid, platform
from trainer.config import TrainConfig
from trainer.tasks import get_task

NAME = "gpu_vs_tpu"
TASK = "classification"  # the notebook's
NOTEBOOK_MODEL = TrainConfig.__dataclass_fields__["model"].default  # the notebook's CNN, the trainer's default

# accelerator: the name in the tables; strategy: what trainer.distribute.get_strategy must find
# (a demand, so a TPU run that silently fell back to CPU fails instead of reporting CPU numbers).
DEFAULT_ACCELERATORS = [
    AcceleratorEntry("tpu-v2-8", "cloud-tpus.google.com/v2", "8", "tpu").to_dict(),
    AcceleratorEntry("gpu-1", "nvidia.com/gpu", "1", "gpu").to_dict(),
    AcceleratorEntry("cpu", "", "0", "cpu").to_dict(),
]

LOCAL_ACCELERATORS = [AcceleratorEntry("cpu", "", "0", "cpu").to_dict()]


@platform.pipeline(name="gpu-vs-tpu-cell", nested=True, part_of=NAME)
def cell_on(dataset: dsl.Input[dsl.Dataset], cell: dict, accelerator_type: str, accelerator_count: str) -> dict:
    """One fan-out branch: one accelerator x batch size cell, with its resource request.

    A nested pipeline because kfp 2.17.3 compiles a ParallelFor item's fields used directly in
    resource requests into references the loop does not define; as inputs of this pipeline they
    compile to runtime placeholders the KFP driver resolves.
    """
    task = time_training_cell(dataset=dataset, cell=cell).set_display_name("Train and time")
    accelerators.set_accelerator(task, accelerator_type, accelerator_count, retries=0)
    # Timings measure the hardware now; they are not a function of the inputs.
    task.set_caching_options(False)
    return task.outputs["Output"]


def build(parallelism: int = grid.DEFAULT_PARALLELISM):
    """The pipeline with a concurrency limit on its fan-out (a literal: pipelines/grid.py)."""

    @platform.pipeline(
        name=NAME,
        description=(
            "The GPU-vs-TPU notebook as a pipeline: the CNN trained at batch sizes 256/512/1024 on each "
            "accelerator (TPU v2-8, one GPU, CPU); epoch time and step time per example, first epoch excluded."
        ),
    )
    def pipeline(
        source: str = get_task(TASK).run_defaults.data,
        limit_per_split: int = 0,
        accelerators_to_try: list = DEFAULT_ACCELERATORS,  # noqa: B006 (a pipeline default, never mutated)
        batch_sizes: list = [256, 512, 1024],  # noqa: B006
        epochs: int = 3,
        steps_per_epoch: int = 0,
        model: str = NOTEBOOK_MODEL,
    ):
        """Trains and times the notebook's CNN per accelerator and batch size.

        Args:
            source: the dataset to convert (fashion-mnist, digits, an image folder, ...).
            limit_per_split: keep at most this many images per split; 0 keeps all.
            accelerators_to_try: entries ``{accelerator, accelerator_type, accelerator_count,
                strategy}``: the name in the tables, the pod's accelerator resource and count (empty
                type: none), and ``tpu``/``gpu``/``cpu``/``auto`` for the trainer.
            batch_sizes: global batch sizes to sweep.
            epochs: epochs per batch size, at least 2 (the first is excluded).
            steps_per_epoch: steps per epoch; 0 means one pass over the training split.
            model: the model builder (mnist_cnn is the notebook's CNN).
        """
        converted = convert_to_tfrecords(source=source, limit_per_split=limit_per_split).set_display_name(
            "Convert to TFRecords"
        )
        planned = plan_notebook_sweep(
            accelerators=accelerators_to_try,
            batch_sizes=batch_sizes,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            model=model,
        ).set_display_name("Plan the sweep")
        with grid.fan_out(planned.output, parallelism, name="cells") as cell:
            branch = cell_on(
                dataset=converted.outputs["dataset"],
                cell=cell,
                accelerator_type=cell.accelerator_type,
                accelerator_count=cell.accelerator_count,
            ).set_display_name("Cell")
        join_sweeps(sweeps=dsl.Collected(branch.output)).set_display_name("GPU vs TPU tables")

    return pipeline


pipeline = build()
