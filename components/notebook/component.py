"""KFP component: run a Jupyter notebook with papermill; the executed notebook, its page and files out."""

from kfp.dsl import HTML, Artifact, Output

from components.images import project_component


@project_component
def run_notebook(
    notebook: str,
    executed_notebook: Output[Artifact],
    page: Output[HTML],
    files: Output[Artifact],
    parameters: dict = {},  # noqa: B006 (a component default, never mutated)
    cell_timeout_s: int = 3600,
    timeout_s: int = 14400,
    files_dir: str = "outputs",
) -> dict:
    """Executes a notebook in this step's Python (the project image's) and publishes what it made.

    A failing cell or a timeout fails the step with the cell and its traceback in the log; the
    executed notebook up to there is written to ``executed_notebook``'s URI while the step runs,
    since a failed task publishes no artifacts.

    Args:
        notebook: a gs:// URI or a path inside the image (the demo notebook:
            /opt/lean-tpu-pipelines/components/notebook/examples/gpu_vs_tpu.ipynb).
        executed_notebook: the executed ``.ipynb``.
        page: the executed notebook as one self-contained HTML page (shown in the Kubeflow UI).
        files: the files the notebook wrote under ``files_dir``.
        parameters: name -> value for the notebook's cell tagged ``parameters``.
        cell_timeout_s: seconds one cell may run.
        timeout_s: seconds the whole notebook may run.
        files_dir: the folder, relative to the notebook's working directory, published as ``files``.

    Returns:
        ``NotebookResult.to_dict()`` without the local paths: files, cells, duration_s, parameters.
    """
    from trainer.runtime import configure_tensorflow_env

    configure_tensorflow_env()  # the kernel inherits it
    from components.notebook.config import NotebookConfig
    from components.notebook.run import NotebookOutputs
    from components.notebook.run import run_notebook as run

    config = NotebookConfig(
        notebook=notebook,
        parameters=parameters,
        cell_timeout_s=cell_timeout_s,
        timeout_s=timeout_s,
        files_dir=files_dir,
    )
    outputs = NotebookOutputs(executed_notebook.path, page.path, files.path, executed_notebook.uri, page.uri, files.uri)
    result = run(config, outputs).to_dict()
    summary = {k: result[k] for k in ("files", "cells", "duration_s", "parameters")}
    executed_notebook.metadata.update({"source": notebook, "cells": summary["cells"]})
    files.metadata["files"] = summary["files"]
    return summary
