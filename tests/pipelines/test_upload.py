"""``make upload``: a new pipeline the first time, a new version of it afterwards.

No Kubeflow API server runs here, so the kfp client is replaced by a recorder with the same
three methods (their real signatures are checked below, so a kfp upgrade that changes them fails).
"""

import inspect
import types

import kfp

from pipelines.tools import upload


class RecordingClient:
    def __init__(self, existing=None):
        self.existing = existing or {}
        self.calls = []

    def get_pipeline_id(self, name):
        return self.existing.get(name)

    def upload_pipeline(self, pipeline_package_path, pipeline_name=None, description=None):
        self.calls.append(("pipeline", pipeline_package_path, pipeline_name))
        return types.SimpleNamespace(pipeline_id="p-new")

    def upload_pipeline_version(self, pipeline_package_path, pipeline_version_name, pipeline_id=None):
        self.calls.append(("version", pipeline_package_path, pipeline_version_name, pipeline_id))


def test_first_upload_creates_the_pipeline_then_versions_follow(tmp_path):
    path = tmp_path / "end_to_end.yaml"
    path.write_text("{}")
    client = RecordingClient()
    assert upload.upload(client, path, "0.1.0-x") == "created pipeline lean-tpu-end-to-end (p-new)"
    client = RecordingClient(existing={"lean-tpu-end-to-end": "p-1"})
    line = upload.upload(client, path, "0.1.0-y")
    assert client.calls == [("version", str(path), "lean-tpu-end-to-end-0.1.0-y", "p-1")]
    assert "added version" in line


def test_the_recorder_matches_the_real_client():
    for name in ("get_pipeline_id", "upload_pipeline", "upload_pipeline_version"):
        real = inspect.signature(getattr(kfp.Client, name)).parameters
        for param in inspect.signature(getattr(RecordingClient, name)).parameters:
            assert param in real, f"kfp.Client.{name} has no parameter {param}"


def test_nothing_compiled_is_a_clear_error(tmp_path, capsys):
    assert upload.main(["--host", "http://127.0.0.1:9", "--dir", str(tmp_path)]) == 2
    assert "run 'make compile' first" in capsys.readouterr().err
