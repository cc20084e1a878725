"""The ``sweep`` pipeline: the case study's experiments as one grid.

Accelerator x image size x epochs x batch size (x repeats), each cell trained and scored on the
same test split (the data is converted once, before the fan-out), one table with training time,
quality and cost per cell. Each cell requests its own accelerator at run time: its
``accelerator_type`` and ``accelerator_count`` compile to placeholders written into the pod's
``resources.limits``. GKE TPU VM cells (``google.com/tpu``) also need node selectors, which only
compile-time presets give: a grid of those is one compiled pipeline per preset (``build(...,
preset="gke-tpu-v5e-2x4")``), or cells on the legacy TPU Node path (``cloud-tpus.google.com/*``).

How many cells run at once is a compile-time setting (``make compile SWEEP_PARALLELISM=4``,
pipelines/grid.py). Cells are cached on their inputs: re-running a grid does not retrain the cells
that finished. A cell whose run fails still succeeds, with ``status: failed`` and the reason; the
join is the exit task and reads the rows the cells wrote under ``rows_root``, so the table is
built whichever cells finished. The form's data and model are a task's (``build(task=...)``, its
``run_defaults``; by default the case study's, ``TASK``). No TensorFlow here.
"""

from typing import Optional

from kfp import dsl, kubernetes

from components.convert.component import convert_to_tfrecords
from components.launchers.identity import POD_FIELD_PATHS
from components.sweep.component import join_training_grid, plan_training_grid, train_grid_cell
from components.sweep.config import SweepConfig
from components.validate.component import validate_dataset
from pipelines import accelerators, grid, platform
from trainer.tasks import get_task

NAME = "sweep"
TASK = "detection"  # the case study's grid: its form's data and model are this task's run defaults

# The case study's image size x epochs table on TPU v3-8 (detection, legacy TPU Node path), plus
# its v2-8 cell: the default grid of the Kubeflow run form.
DEFAULT_GRID = [
    {"accelerator": "tpu-v2-8", "accelerator_type": "cloud-tpus.google.com/v2", "accelerator_count": 8,
     "image_size": 640, "epochs": 6},
    {"accelerator": "tpu-v3-8", "accelerator_type": "cloud-tpus.google.com/v3", "accelerator_count": 8,
     "image_size": 640, "epochs": 6},
    {"accelerator": "tpu-v3-8", "accelerator_type": "cloud-tpus.google.com/v3", "accelerator_count": 8,
     "image_size": 512, "epochs": 10},
    {"accelerator": "tpu-v3-8", "accelerator_type": "cloud-tpus.google.com/v3", "accelerator_count": 8,
     "image_size": 384, "epochs": 4},
    {"accelerator": "tpu-v3-8", "accelerator_type": "cloud-tpus.google.com/v3", "accelerator_count": 8,
     "image_size": 256, "epochs": 4},
]  # fmt: skip

# A small CPU grid for kfp.local: two image sizes x two epoch counts on a few hundred shapes.
LOCAL_GRID = [{"accelerator": "cpu", "image_size": size, "epochs": epochs} for size in (32, 64) for epochs in (1, 2)]
# The model options of a local grid's cells, which train a few steps each: the task's (a short warm-up).
LOCAL_MODEL_OPTIONS = dict(get_task(TASK).run_defaults.grid_model_options)


def cell_pipeline(preset: Optional[str] = None):
    """The per-cell nested pipeline: the cell task with its accelerator request.

    A nested pipeline because kfp 2.17.3 compiles a ParallelFor item's fields used directly in
    resource requests into references the loop does not define; as inputs of this pipeline they
    compile to runtime placeholders the KFP driver resolves.

    Args:
        preset: None for the cell's own runtime request; a compile-time preset name (e.g.
            ``gke-tpu-v5e-2x4``) to give every cell that preset's resources, node selectors and
            tolerations instead (the cells' accelerator_type/count are then ignored).
    """

    @platform.pipeline(name="sweep-cell", nested=True, part_of=NAME, labels=platform.preset_labels(preset))
    def cell_on(
        dataset: dsl.Input[dsl.Dataset], cell: dict, accelerator_type: str, accelerator_count: str, rows_root: str
    ) -> dict:
        task = train_grid_cell(
            dataset=dataset, cell=cell, rows_root=rows_root, pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER
        ).set_display_name("Train and evaluate")
        if preset is None:
            # Retries: a preempted TPU kills the pod; the retried cell resumes from its checkpoints.
            accelerators.set_accelerator(task, accelerator_type, accelerator_count)
        else:
            accelerators.apply_preset(task, preset)
        # A cell with workers > 1 launches worker pods owned by this pod, in its namespace.
        for name, field_path in POD_FIELD_PATHS.items():
            kubernetes.use_field_path_as_env(task, name, field_path)
        # Cached on the cell's inputs (cell dict + dataset): a re-run does not retrain finished cells.
        task.set_caching_options(True)
        return task.outputs["Output"]

    return cell_on


DESCRIPTION = (
    "The case study's experiments as one grid: accelerator x image size x epochs x batch size, "
    "each cell trained and scored on the same test split; one table with fit and billed time, "
    "quality and cost per cell, failed cells as rows."
)


def build(parallelism: int = grid.DEFAULT_PARALLELISM, preset: Optional[str] = None, task: str = TASK):
    """The sweep pipeline with a concurrency limit (and optionally one compile-time preset).

    Args:
        parallelism: cells at once (0: no limit), a literal in the YAML.
        preset: see :func:`cell_pipeline`.
        task: the task whose run defaults give the form's data, limit and model (``trainer.tasks``).

    Returns:
        The ``@dsl.pipeline`` function.
    """
    cell_on = cell_pipeline(preset)
    defaults = get_task(task).run_defaults

    @platform.pipeline(name=NAME, description=DESCRIPTION, labels=platform.preset_labels(preset))
    def pipeline(
        grid_cells: list = DEFAULT_GRID,  # noqa: B006 (a pipeline default, never mutated)
        source: str = defaults.data,
        limit_per_split: int = defaults.limit,
        model: str = defaults.model,
        model_options: dict = {},  # noqa: B006
        epochs: int = 4,
        steps_per_epoch: int = 0,
        batch_size_per_replica: int = 16,
        learning_rate: float = 0.001,
        rows_root: str = "",
        price_table: str = "",
        validation_policy: dict = {},  # noqa: B006
    ):
        """Trains and scores every cell of the grid and joins them into one table.

        Args:
            grid_cells: the cells: ``accelerator`` (name in tables, price key), ``accelerator_type``
                and ``accelerator_count`` (the pod's request; none for CPU), and any of
                ``image_size``, ``epochs``, ``batch_size_per_replica``, ``global_batch_size``,
                ``steps_per_epoch``, ``learning_rate``, ``model``, ``model_options``, ``repeats``,
                ``seed``, ``name``, ``strategy``, ``workers`` (pods training together, each with the
                cell's request; components/sweep/case_study_clusters.yaml has the case study's).
            source: the dataset to convert once (shapes, shapes:<count>, a COCO file, fashion-mnist...).
            limit_per_split: keep at most this many images per split; 0 keeps all.
            model: the model builder for cells that name none.
            model_options: its options for cells that give none.
            epochs: epochs for cells that give none.
            steps_per_epoch: steps per epoch for cells that give none; 0 for one pass.
            batch_size_per_replica: for cells that give none.
            learning_rate: for a global batch of 128 (the trainer scales it with the global batch).
            rows_root: where cells write their rows; empty for ``<pipeline root>/sweep-rows``.
            price_table: a YAML price table over the defaults (a path in the container); empty for none.
            validation_policy: the data checks' finding kind -> error, warn or ignore, over the
                defaults (docs/validation.md); an error stops the grid before any cell trains.
        """
        # The grid's settings are the parameters named as SweepConfig's fields, passed on as they are.
        given = locals()
        settings = {name: given[name] for name in SweepConfig.field_names()}
        grid_steps(cell_on, parallelism, grid_cells, settings, rows_root, price_table, validation_policy)

    return pipeline


def grid_steps(
    cell_on, parallelism: int, grid_cells, settings: dict, rows_root, price_table, validation_policy
) -> None:
    """The pipeline's tasks: convert, validate, plan, the cells' fan-out, and the join as the exit task.

    Called inside the pipeline function (its arguments are the pipeline's parameters, as channels).

    Args:
        cell_on: the per-cell nested pipeline (:func:`cell_pipeline`).
        parallelism: cells at once (0: no limit).
        grid_cells: the grid.
        settings: the grid's defaults and context (model, ..., source, limit_per_split).
        rows_root: where cells write their rows.
        price_table: a YAML price table over the defaults.
        validation_policy: the data checks' policy (no baseline here: no stage serves a grid's model).
    """
    join = join_training_grid(
        grid=grid_cells,
        **settings,
        rows_root=rows_root,
        pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
        price_table=price_table,
    ).set_display_name("Grid tables")
    join.set_caching_options(False)  # it reads rows written outside KFP's view
    with dsl.ExitHandler(join, name="grid"):
        converted = convert_to_tfrecords(
            source=settings["source"], limit_per_split=settings["limit_per_split"]
        ).set_display_name("Convert to TFRecords")
        validated = validate_dataset(
            dataset=converted.outputs["dataset"], validation_policy=validation_policy
        ).set_display_name("Validate the data")
        planned = plan_training_grid(grid=grid_cells, **settings).set_display_name("Plan the grid")
        planned.after(validated)
        with grid.fan_out(planned.output, parallelism, name="cells") as cell:
            cell_on(
                dataset=converted.outputs["dataset"],
                cell=cell,
                accelerator_type=cell.accelerator_type,
                accelerator_count=cell.accelerator_count,
                rows_root=rows_root,
            ).set_display_name("Cell")


pipeline = build()
