"""The ``notebook`` pipeline: one Jupyter notebook run on a Cloud TPU v2-8 (GPU or CPU by parameter).

What Kubeflow Fairing did for the case study's team: write the notebook on a small machine, run it
whole as a job on the accelerator, read the executed notebook afterwards. The step executes the
notebook with papermill (parameters into its cell tagged ``parameters``) and publishes the executed
``.ipynb``, its HTML page (shown in the Kubeflow UI) and the files it wrote.

``pipeline`` takes the accelerator as runtime parameters (one YAML for TPU, GPU and CPU:
``make compile`` writes ``dist/pipelines/notebook.yaml``); :func:`pipeline_for` fixes a preset at
compile time, for what parameters cannot express (GKE TPU VM node selectors and tolerations).
``python -m components.notebook submit`` compiles one of them and starts a run. No TensorFlow here.
"""

from typing import Any

from components.notebook.component import run_notebook
from pipelines import accelerators, platform

NAME = "notebook"
# The demo notebook inside the project image (Dockerfile: the package is installed from here).
DEMO_NOTEBOOK = "/opt/lean-tpu-pipelines/components/notebook/examples/gpu_vs_tpu.ipynb"
DESCRIPTION = (
    "Runs a Jupyter notebook with papermill on a Cloud TPU v2-8 (GPU or CPU by parameter): parameters "
    "into its 'parameters' cell; the executed notebook, its HTML page and the files it wrote out."
)
CELL_TIMEOUT_S = 3600
TIMEOUT_S = 4 * 3600


def _run(notebook: Any, parameters: Any, cell_timeout_s: Any, timeout_s: Any, files_dir: Any) -> Any:
    task = run_notebook(
        notebook=notebook,
        parameters=parameters,
        cell_timeout_s=cell_timeout_s,
        timeout_s=timeout_s,
        files_dir=files_dir,
    ).set_display_name("Run notebook")
    # The same URI may hold a newer notebook, and a notebook may read data that changed: never
    # answer a run from the cache.
    return task.set_caching_options(False)


@platform.pipeline(name=NAME, description=DESCRIPTION)
def pipeline(
    notebook: str = DEMO_NOTEBOOK,
    parameters: dict = {},  # noqa: B006 (a pipeline default, never mutated)
    cell_timeout_s: int = CELL_TIMEOUT_S,
    timeout_s: int = TIMEOUT_S,
    files_dir: str = "outputs",
    accelerator_type: str = accelerators.DEFAULT_ACCELERATOR_TYPE,
    accelerator_count: int = accelerators.DEFAULT_ACCELERATOR_COUNT,
):
    """Runs one notebook on the accelerator given.

    Args:
        notebook: a gs:// URI of the notebook, or a path inside the image (default: the demo).
        parameters: name -> value for the notebook's cell tagged ``parameters``.
        cell_timeout_s: seconds one cell may run.
        timeout_s: seconds the whole notebook may run.
        files_dir: the folder (relative to the notebook's working directory) published as files.
        accelerator_type: the pod's accelerator resource: cloud-tpus.google.com/v2 (a TPU v2-8),
            cloud-tpus.google.com/v3, nvidia.com/gpu; empty for CPU only.
        accelerator_count: how many of it: 8 for a v2-8/v3-8, 1 for one GPU, 0 for CPU.
    """
    task = _run(notebook, parameters, cell_timeout_s, timeout_s, files_dir)
    # No retries: a retry would rerun a failing cell from the start, on the accelerator's bill.
    accelerators.set_accelerator(task, accelerator_type, accelerator_count, retries=0)


def pipeline_for(preset: str) -> Any:
    """The notebook pipeline with an accelerator preset fixed at compile time.

    Args:
        preset: a ``pipelines.accelerators`` preset (``tpu-v2-8``, ``gke-tpu-v5e-2x4``, ``gpu-1``, ``cpu``).

    Returns:
        A ``@dsl.pipeline`` function with the parameters of :func:`pipeline` but the accelerator's.

    Raises:
        ValueError: an unknown preset.
    """
    accelerators.get_preset(preset)  # fail now, naming the known presets, not inside the compiler

    @platform.pipeline(
        name=NAME,
        description=DESCRIPTION.replace("a Cloud TPU v2-8 (GPU or CPU by parameter)", preset),
        labels={platform.PRESET_LABEL: preset},
    )
    def preset_pipeline(
        notebook: str = DEMO_NOTEBOOK,
        parameters: dict = {},  # noqa: B006 (a pipeline default, never mutated)
        cell_timeout_s: int = CELL_TIMEOUT_S,
        timeout_s: int = TIMEOUT_S,
        files_dir: str = "outputs",
    ):
        task = _run(notebook, parameters, cell_timeout_s, timeout_s, files_dir)
        accelerators.apply_preset(task, preset, retries=0)

    return preset_pipeline
