"""``python -m components.notebook submit``: the upload against the GCS emulator, then the client call.

No Kubeflow API server runs here, so the kfp client is a recorder of the one method submit calls;
its real signature is checked below (as tests/pipelines/test_upload.py does), so a kfp upgrade
that changes it fails here.
"""

import hashlib
import inspect
import types
from pathlib import Path

import kfp
import nbformat
import pytest
import yaml

from pipelines.tools import submit
from tests.gcs_emulator import running_emulator
from trainer import storage

DEMO = Path(__file__).resolve().parents[2] / "components" / "notebook" / "examples" / "gpu_vs_tpu.ipynb"
BUCKET = "staging-bucket"


class RecordingClient:
    def __init__(self):
        self.calls = []

    def create_run_from_pipeline_package(
        self,
        pipeline_file,
        arguments=None,
        run_name=None,
        experiment_name=None,
        pipeline_root=None,
        enable_caching=None,
    ):
        # read the package now: submit compiles it into a temporary folder
        spec = next(d for d in yaml.safe_load_all(Path(pipeline_file).read_text()) if d)
        self.calls.append(
            {
                "spec": spec,
                "arguments": arguments,
                "run_name": run_name,
                "experiment_name": experiment_name,
                "pipeline_root": pipeline_root,
                "enable_caching": enable_caching,
            }
        )
        return types.SimpleNamespace(run_id="run-123")


def test_the_recorder_matches_the_real_client():
    real = inspect.signature(kfp.Client.create_run_from_pipeline_package).parameters
    for param in inspect.signature(RecordingClient.create_run_from_pipeline_package).parameters:
        assert param in real, f"kfp.Client.create_run_from_pipeline_package has no parameter {param}"
    # what submit reads from the call's result
    result = kfp.client.client.RunPipelineResult(None, types.SimpleNamespace(run_id="r-1"))
    assert result.run_id == "r-1"


@pytest.mark.integration
def test_submit_uploads_the_notebook_and_starts_a_run_on_a_tpu(tmp_path):
    staging = f"gs://{BUCKET}/team"
    client = RecordingClient()
    with running_emulator(BUCKET):
        done = submit.submit(
            client,
            DEMO,
            staging,
            {"epochs": 5, "batch_sizes": [128, 256]},
            ui_host="https://kfp.example/pipeline/",
            experiment_name="notebooks",
            image="registry.example/derived:1",
            timeout_s=7200,
        )
        digest = hashlib.sha256(DEMO.read_bytes()).hexdigest()[:12]
        assert done.notebook_uri == f"{staging}/notebooks/gpu_vs_tpu-{digest}.ipynb"
        assert storage.read_bytes(done.notebook_uri) == DEMO.read_bytes()  # really uploaded
        # the same notebook again: the same object, not a second copy
        assert submit.upload_notebook(DEMO, staging, {}) == done.notebook_uri
    assert done.url == "https://kfp.example/pipeline/#/runs/details/run-123"
    (call,) = client.calls
    assert call["arguments"] == {
        "notebook": done.notebook_uri,
        "parameters": {"epochs": 5, "batch_sizes": [128, 256]},
        "timeout_s": 7200,
    }
    assert call["run_name"] == "notebook-gpu_vs_tpu" and call["experiment_name"] == "notebooks"
    assert call["enable_caching"] is False
    container = call["spec"]["deploymentSpec"]["executors"]["exec-run-notebook"]["container"]
    assert container["image"] == "registry.example/derived:1"
    params = call["spec"]["root"]["inputDefinitions"]["parameters"]
    assert params["accelerator_type"]["defaultValue"] == "cloud-tpus.google.com/v2"  # TPU v2-8 by default


@pytest.mark.integration
def test_submit_with_a_preset_and_the_command_line_errors(tmp_path, capsys):
    client = RecordingClient()
    with running_emulator(BUCKET):
        submit.submit(client, DEMO, f"gs://{BUCKET}/s", {}, ui_host="http://h", preset="gke-tpu-v5e-2x4")
        # a typo in a parameter fails on the laptop, before anything is uploaded
        bad = tmp_path / "bad.ipynb"
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), bad)
        with pytest.raises(Exception, match="no cell tagged 'parameters'"):
            submit.upload_notebook(bad, f"gs://{BUCKET}/s", {"x": 2})
        assert not storage.exists(submit.staged_uri(f"gs://{BUCKET}/s", bad, bad.read_bytes()))
    accel = client.calls[0]["spec"]["deploymentSpec"]["executors"]["exec-run-notebook"]["container"]["resources"]
    assert (accel["accelerator"]["resourceType"], accel["accelerator"]["resourceCount"]) == ("google.com/tpu", "8")
    assert submit.main([str(DEMO), "--host", "http://127.0.0.1:9", "--staging", "/tmp/local"]) == 2
    assert "expected a gs://BUCKET/folder" in capsys.readouterr().err
    assert submit.main([str(DEMO), "--host", "http://h", "--staging", "gs://b/s", "--accelerator", "tpu-v9"]) == 2
    assert "unknown 'tpu-v9'" in capsys.readouterr().err


def test_an_unreachable_host_is_one_error_line_after_the_local_checks(capsys, tmp_path):
    # the notebook and parameters are checked before the client talks to the cluster
    assert submit.main([str(tmp_path / "missing.ipynb"), "--host", "http://127.0.0.1:9", "--staging", "gs://b/s"]) == 2
    assert "missing.ipynb does not exist" in capsys.readouterr().err
    assert submit.main([str(DEMO), "--host", "http://127.0.0.1:9", "--staging", "gs://b/s", "-p", "epoch=1"]) == 2
    assert "epoch are not assigned" in capsys.readouterr().err
    assert submit.main([str(DEMO), "--host", "http://127.0.0.1:9", "--staging", "gs://b/s", "-p", "epochs=1"]) == 1
    assert "the Kubeflow Pipelines API at http://127.0.0.1:9 did not take the run" in capsys.readouterr().err
