"""The kserve target serving a model in a portable format, against the fake Kubernetes API and
KServe controller (tests/integration/fake_kube_api.py): its InferenceService runs the project's
model server as the predictor's container, beside a model served by TensorFlow Serving."""

import pytest

from components.serving.stages import StageRegistry
from components.serving.targets.kserve import STORAGE_ENV, VERSION_ENV, KServeTarget
from tests.integration.fake_kube_api import FakeKServe, FakeKubeAPI

ROOT = "gs://models-bucket/stages"


@pytest.fixture
def fake():
    with FakeKubeAPI.running() as server:
        FakeKServe().install(server)
        yield server


def test_a_model_in_a_portable_format_runs_the_project_s_server_beside_tensorflow_serving(fake, api):
    target = KServeTarget(StageRegistry(ROOT), {"poll_interval_s": 0.01}, api_client=api)
    target.forms = {"classifier": "litert_int8", "detector": "saved_model"}  # as the promotion notes them
    target.serve("staging", {"classifier": 3, "detector": 2}, "classifier", timeout_s=5)
    portable = fake.get("inferenceservices", "ltp-staging", "classifier")["spec"]["predictor"]
    (container,) = portable["containers"]
    assert "model" not in portable and container["command"] == ["python", "-m", "components.serving.server"]
    assert {"name": STORAGE_ENV, "value": f"{ROOT}/staging/models/classifier"} in container["env"]
    assert {"name": VERSION_ENV, "value": "3"} in container["env"] and "--model-name=classifier" in container["args"]
    served = fake.get("inferenceservices", "ltp-staging", "detector")["spec"]["predictor"]
    assert served["model"]["modelFormat"] == {"name": "tensorflow"} and "containers" not in served
    with target.endpoints("staging", {"classifier": 3, "detector": 2}) as endpoints:
        assert endpoints.url("classifier") == "http://classifier-predictor.ltp-staging.example.com"
