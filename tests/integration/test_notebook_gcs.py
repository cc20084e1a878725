"""The notebook step against GCS (the emulator): the notebook read from gs://, and a failed run's
executed notebook, page and files written to gs:// artifact URIs, as on a cluster."""

import json

import nbformat
import pytest

from components.notebook.config import NotebookConfig
from components.notebook.run import NotebookOutputs, NotebookRunError, run_notebook
from tests.gcs_emulator import running_emulator
from trainer import storage

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BUCKET = "pipeline-root"


def test_a_failed_run_keeps_notebook_page_and_files_at_their_gs_uris(tmp_path):
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell("stage = 'first'")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [
        params,
        nbformat.v4.new_code_cell("import os\nopen(os.path.join('outputs', 'partial.txt'), 'w').write(stage)"),
        nbformat.v4.new_code_cell("raise ValueError(f'bad data at stage {stage}')"),
    ]
    root = f"gs://{BUCKET}/run-1/run-notebook"
    local = tmp_path / "launcher"  # the paths a cluster's launcher would upload after a success
    outputs = NotebookOutputs(
        str(local / "executed_notebook"),
        str(local / "page"),
        str(local / "files"),
        f"{root}/executed_notebook",
        f"{root}/page",
        f"{root}/files",
    )
    with running_emulator(BUCKET):
        storage.write_bytes(f"gs://{BUCKET}/staging/nb.ipynb", nbformat.writes(nb).encode())
        config = NotebookConfig(notebook=f"gs://{BUCKET}/staging/nb.ipynb", parameters={"stage": "second"})
        with pytest.raises(NotebookRunError) as caught:
            run_notebook(config, outputs)
        kept = nbformat.reads(storage.read_bytes(f"{root}/executed_notebook").decode(), as_version=4)
        page = storage.read_bytes(f"{root}/page").decode()
        partial = storage.read_bytes(f"{root}/files/partial.txt").decode()
    assert "ValueError: bad data at stage second" in str(caught.value)
    assert f"notebook {root}/executed_notebook" in str(caught.value)  # the log says where
    errors = [o for c in kept.cells if c.cell_type == "code" for o in c.outputs if o["output_type"] == "error"]
    assert [e["evalue"] for e in errors] == ["bad data at stage second"]
    assert "bad data at stage second" in page
    assert partial == "second"
    assert json.loads((local / "executed_notebook").read_text())["cells"]  # and the local copy
