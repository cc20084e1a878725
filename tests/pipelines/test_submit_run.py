"""``make submit``: the real ``kfp.Client`` against a fake Kubeflow Pipelines API, its HTTP layer faked.

No Kubeflow API server runs here. The client is kfp's own, its methods and the generated API
classes under it run as they are; only ``kfp_server_api.rest.RESTClientObject.request`` (the one
place the client sends a request) is replaced by a small in-memory API. A kfp upgrade that
changes a method's signature, a path or a response's fields fails here.
"""

import json
import types
import urllib.parse
from pathlib import Path

import kfp
import kfp_server_api
import pytest
import yaml

from pipelines.tools import submit_run

API = "/apis/v2beta1"


class FakePipelinesApi:
    """The few endpoints submit uses, kept in memory; every request is recorded."""

    def __init__(self):
        self.pipelines = {}  # id -> name
        self.versions = {}  # pipeline id -> [(version id, name, spec)]
        self.runs = []
        self.requests = []

    def handle(self, method, url, query, body, post_params):
        path = urllib.parse.urlparse(url).path
        self.requests.append((method, path))
        query = dict(query or [])
        if (method, path) == ("GET", f"{API}/healthz"):
            return {"multi_user": False}
        if (method, path) == ("GET", f"{API}/pipelines"):
            name = json.loads(query["filter"])["predicates"][0]["stringValue"]
            found = [{"pipeline_id": i, "display_name": n} for i, n in self.pipelines.items() if n == name]
            return {"pipelines": found} if found else {}
        if (method, path) == ("POST", f"{API}/pipelines/upload"):
            pid = f"p-{len(self.pipelines) + 1}"
            self.pipelines[pid] = query["name"]
            self.versions[pid] = [(f"{pid}-default", query["name"], _spec(post_params))]
            return {"pipeline_id": pid, "display_name": query["name"]}
        if method == "GET" and path.startswith(f"{API}/pipelines/") and path.endswith("/versions"):
            pid = path.split("/")[-2]
            name = json.loads(query["filter"])["predicates"][0]["stringValue"]
            found = [{"pipeline_version_id": v, "display_name": n} for v, n, _ in self.versions[pid] if n == name]
            return {"pipeline_versions": found} if found else {}
        if (method, path) == ("POST", f"{API}/pipelines/upload_version"):
            pid = query["pipelineid"]
            vid = f"{pid}-v{len(self.versions[pid]) + 1}"
            self.versions[pid].append((vid, query["name"], _spec(post_params)))
            return {"pipeline_id": pid, "pipeline_version_id": vid, "display_name": query["name"]}
        if (method, path) == ("GET", f"{API}/experiments"):
            return {"experiments": [{"experiment_id": "e-1", "display_name": "Default"}]}
        if (method, path) == ("POST", f"{API}/runs"):
            self.runs.append(body)
            return {"run_id": f"r-{len(self.runs)}", "display_name": body["display_name"]}
        return None


def _spec(post_params):
    # The upload is a multipart file: (field, (file name, bytes, mime type)).
    (_, (_, data, _)) = next(p for p in post_params if p[0] == "uploadfile")
    return next(d for d in yaml.safe_load_all(data) if d)


@pytest.fixture
def fake_api(monkeypatch):
    api = FakePipelinesApi()

    def request(self, method, url, query_params=None, headers=None, body=None, post_params=None, **kwargs):
        answer = api.handle(method, url, query_params, body, post_params)
        status = 404 if answer is None else 200
        data = json.dumps(answer if answer is not None else {"error": f"no {method} {url}"}).encode()
        response = types.SimpleNamespace(status=status, reason="OK" if status == 200 else "Not Found", data=data)
        response.getheaders = lambda: {"Content-Type": "application/json"}
        response.getheader = lambda name, default=None: response.getheaders().get(name, default)
        if status != 200:
            raise kfp_server_api.ApiException(http_resp=kfp_server_api.rest.RESTResponse(response))
        return kfp_server_api.rest.RESTResponse(response)

    monkeypatch.setattr(kfp_server_api.rest.RESTClientObject, "request", request)
    return api


def _client():
    return kfp.Client(host="http://kfp.test", namespace="kubeflow")


def test_submit_uploads_once_then_reuses_the_version_and_starts_runs_with_the_parameters(fake_api, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("epochs: 20\nmodel_options:\n  image_size: 128\nsource: gs://bucket/coco/instances.json\n")
    parameters = submit_run.submit_parameters("detection", str(config), "model_options.topk=5 epochs=30")
    first = submit_run.submit(_client(), "detection", parameters, ui_host="http://ui.test/", package_dir=tmp_path)
    assert first.url == "http://ui.test/#/runs/details/r-1"
    assert first.version.uploaded and fake_api.pipelines == {"p-1": "lean-tpu-detection"}
    (run,) = fake_api.runs
    assert run["pipeline_version_reference"] == {"pipeline_id": "p-1", "pipeline_version_id": first.version.version_id}
    assert run["experiment_id"] == "e-1"
    # SET over CONFIG, a dotted key merged into CONFIG's mapping; only what differs from the form
    assert run["runtime_config"]["parameters"] == {
        "epochs": 30,
        "model_options": {"image_size": 128, "topk": 5},
        "source": "gs://bucket/coco/instances.json",
    }
    # the uploaded file is the detection pipeline, compiled here
    (_, name, spec) = fake_api.versions["p-1"][-1]
    assert name == first.version.name and spec["pipelineInfo"]["name"] == "detection"
    second = submit_run.submit(_client(), "detection", parameters, ui_host="http://ui.test", package_dir=tmp_path)
    assert not second.version.uploaded and second.version.version_id == first.version.version_id
    assert len(fake_api.versions["p-1"]) == 2 and len(fake_api.runs) == 2  # nothing uploaded again


def test_bad_parameters_fail_before_the_cluster_is_asked(fake_api, capsys, tmp_path):
    code = submit_run.main(
        ["--pipeline", "detection", "--host", "http://kfp.test", "--dir", str(tmp_path), "--set", "epoch=3 epochs=0"]
    )
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and not fake_api.requests
    assert err[0].startswith("error: epoch (SET): no such parameter; did you mean 'epochs'?") and len(err) == 1
    code = submit_run.main(["--pipeline", "detection", "--host", "http://kfp.test", "--set", "learning_rate=20"])
    assert code == 2 and capsys.readouterr().err.strip() == "error: learning_rate: must be in (0, 10), got 20.0"
    assert submit_run.main(["--pipeline", "nope", "--host", "http://kfp.test"]) == 2
    assert "unknown pipeline 'nope'; known: end_to_end, detection" in capsys.readouterr().err


def test_the_command_line_prints_the_parameters_the_version_and_the_run(fake_api, capsys, tmp_path):
    argv = ["--pipeline", "end_to_end", "--host", "http://kfp.test", "--dir", str(tmp_path), "--set", "epochs=7"]
    assert submit_run.main(argv) == 0
    out = capsys.readouterr().out
    assert "parameters: epochs=7 (SET)" in out and "(uploaded)" in out
    assert "run: http://kfp.test/#/runs/details/r-1" in out
    assert Path(tmp_path / "end_to_end.yaml").is_file()
