"""The cluster launchers' launch / wait / delete cycle against the FAKE Kubernetes API server.

The fake (tests/integration/fake_kube_api.py) serves the JobSet and Job kinds; each test plays
their controllers through the fake's ``controllers`` (a status per read: running, then completed or
failed after max restarts) and stored pods (Pending with the scheduler's message). Nothing here
ran against a real cluster or a real JobSet controller (docs/training.md says what that leaves).
"""

import os

import pytest

from components.launchers import LaunchError, WorkerSet
from components.launchers.cluster import SET_LABEL, ClusterSettings
from components.launchers.job import AutoClusterLauncher, IndexedJobLauncher, choose_cluster_launcher
from components.launchers.jobset import JobSetLauncher
from tests.integration.fake_kube_api import FakeKubeAPI

pytestmark = pytest.mark.integration

NS = "kubeflow-user"
SETTINGS = ClusterSettings(
    namespace=NS, pod_name="train-pod", pod_uid="abcdef12-3456", poll_interval_s=0.01, pending_timeout_s=0.3
)
NAME = SETTINGS.set_name
WORKERS = WorkerSet(
    workers=2, config_path="gs://b/m/c.yaml", model_dir="gs://b/m", argv=("python", "-m", "trainer.worker")
)
LAUNCHER_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "train-pod", "namespace": NS, "uid": "abcdef12-3456"},
    "spec": {"containers": [{"name": "main", "image": "ltp:gpu", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
}


def by_read(status_of):
    """A fake controller from ``status_of(obj, nth_read)``: the status on the nth read of the object."""
    reads = []

    def controller(obj):
        reads.append(1)
        return status_of(obj, len(reads))

    return controller


def condition(kind, message="", reason=""):
    return {"type": kind, "status": "True", "reason": reason or kind, "message": message}


def worker_pods(phase, message=None):
    status = {"phase": phase}
    if message:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        ]
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{NAME}-workers-0-{i}-x", "namespace": NS, "labels": {SET_LABEL: NAME}},
            "status": status,
        }
        for i in range(WORKERS.workers)
    ]


@pytest.fixture
def fake():
    with FakeKubeAPI.running(namespaces=(NS,)) as server:
        server._create("pods", NS, "kubelet", dict(LAUNCHER_POD))
        yield server


def launcher(name, api, **kwargs):
    cls = {"jobset": JobSetLauncher, "job": IndexedJobLauncher, "auto": AutoClusterLauncher}[name]
    return cls(SETTINGS, api, **kwargs)


def deletes(fake):
    return [
        (path.rsplit("/", 2)[-2], query.get("propagationPolicy"))
        for m, path, query, _ in fake.requests
        if m == "DELETE"
    ]


def test_jobset_runs_to_completion_and_is_deleted(fake, api, caplog):
    caplog.set_level("INFO", logger="components.launchers.cluster")
    seen = {}

    def controller(obj, nth):
        seen["obj"] = obj
        return {"restarts": 0, "conditions": [condition("Completed", "jobset completed")] if nth >= 3 else []}

    fake.controllers["jobsets"] = by_read(controller)
    fake.add_pods(NS, worker_pods("Running"))
    launcher("jobset", api).run(WORKERS)
    assert seen["obj"]["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] == 2
    # Progress while it runs: one line per change, with the pods' phases and the restarts.
    assert f"JobSet {NS}/{NAME}: training (0 restarts so far); pods: 2 Running; restarts: 0" in caplog.text
    assert fake.get("jobsets", NS, NAME) is None
    assert deletes(fake) == [("jobsets", ["Background"])]


def test_jobset_failed_after_max_restarts_fails_the_step_and_is_deleted(fake, api):
    fake.controllers["jobsets"] = by_read(
        lambda obj, nth: {
            "restarts": 3,
            "conditions": [condition("Failed", "jobset failed", "ReachedMaxRestarts")] if nth >= 2 else [],
        }
    )
    fake.add_pods(NS, worker_pods("Running"))
    with pytest.raises(LaunchError, match=r"ReachedMaxRestarts.*after 3 restarts of all workers.*maxRestarts 3"):
        launcher("jobset", api).run(WORKERS)
    assert fake.get("jobsets", NS, NAME) is None


def test_pods_pending_past_the_timeout_fail_with_the_schedulers_message(fake, api):
    fake.controllers["jobsets"] = by_read(lambda obj, nth: {"restarts": 0})
    fake.add_pods(NS, worker_pods("Pending", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."))
    with pytest.raises(LaunchError, match=r"not all running after 0.3 s(.|\n)*Insufficient nvidia.com/gpu"):
        launcher("jobset", api).run(WORKERS)
    assert fake.get("jobsets", NS, NAME) is None


# The SIGTERM test runs in a process of its own: the signal is sent to the whole process, and in a
# test worker that has run hundreds of tests before it, one delivered a moment outside the
# launcher's handler (or to a handler another library left) ends the worker and the suite.
SIGTERM_RUN = """
import os, signal, sys
import kubernetes
from components.launchers import LaunchError
from tests.integration import test_train_launchers as t
from tests.integration.fake_kube_api import FakeKubeAPI

def controller(obj, nth):
    if nth == 2:
        os.kill(os.getpid(), signal.SIGTERM)  # the run is terminated while the workers train
    return {"restarts": 0}

with FakeKubeAPI.running(namespaces=(t.NS,)) as fake:
    fake._create("pods", t.NS, "kubelet", dict(t.LAUNCHER_POD))
    fake.controllers["jobsets"] = t.by_read(controller)
    fake.add_pods(t.NS, t.worker_pods("Running"))
    configuration = kubernetes.client.Configuration()
    configuration.host = fake.url
    previous = signal.getsignal(signal.SIGTERM)
    with kubernetes.client.ApiClient(configuration) as api:
        try:
            t.launcher("jobset", api).run(t.WORKERS)
        except LaunchError as err:
            print("raised:", err)
    print("jobset left:", fake.get("jobsets", t.NS, t.NAME) is not None)
    print("handler restored:", signal.getsignal(signal.SIGTERM) is previous)
"""


def test_sigterm_deletes_the_jobset():
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run([sys.executable, "-c", SIGTERM_RUN], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert any(line.startswith("raised:") and "SIGTERM" in line for line in lines), done.stdout
    assert "jobset left: False" in lines and "handler restored: True" in lines


def test_explicit_jobset_on_a_cluster_without_the_crd_names_it(fake, api):
    fake.hidden.add("jobsets")
    with pytest.raises(LaunchError, match=r"does not serve JobSet.*jobsets.jobset.x-k8s.io CRD.*launcher=job"):
        launcher("jobset", api).run(WORKERS)
    assert not [r for r in fake.requests if r[0] in ("PATCH", "POST")]


def test_indexed_job_fallback_completes_and_deletes_job_and_service(fake, api):
    fake.controllers["jobs"] = by_read(
        lambda obj, nth: {
            "active": 2,
            "conditions": [condition("Complete")] if nth >= 2 else [],
        }
    )
    fake.add_pods(NS, worker_pods("Running"))
    launcher("job", api).run(WORKERS)
    assert deletes(fake) == [("jobs", ["Background"]), ("services", ["Background"])]
    assert fake.get("jobs", NS, NAME) is None and fake.get("services", NS, NAME) is None


def test_indexed_job_failure_fails_the_step_for_kfps_retry(fake, api):
    fake.controllers["jobs"] = by_read(
        lambda obj, nth: {
            "conditions": [condition("Failed", "Job has reached the specified backoff limit", "BackoffLimitExceeded")]
        }
    )
    with pytest.raises(LaunchError, match=r"BackoffLimitExceeded.*no gang restart.*KFP's retry"):
        launcher("job", api).run(WORKERS)
    assert fake.get("jobs", NS, NAME) is None


def test_auto_picks_jobset_where_served_else_the_job_fallback(fake, api):
    assert choose_cluster_launcher(SETTINGS, api).name == "jobset"
    fake.hidden.add("jobsets")
    assert choose_cluster_launcher(SETTINGS, api).name == "job"


def test_no_crd_and_no_rights_for_the_fallback_is_one_error_naming_both(fake, api):
    fake.hidden.add("jobsets")
    fake.deny.update({"services", "jobs"})
    chosen = choose_cluster_launcher(SETTINGS, api)
    with pytest.raises(LaunchError) as raised:
        chosen.run(WORKERS)
    message = str(raised.value)
    assert "does not serve JobSet" in message and "jobsets.jobset.x-k8s.io CRD" in message
    assert "HTTP 403" in message and "services and jobs.batch" in message and "manifests/rbac/training" in message


def test_a_local_config_or_model_folder_is_refused_before_anything_is_created(fake, api):
    local = WorkerSet(workers=2, config_path="/tmp/c.yaml", model_dir="gs://b/m", argv=("python",))
    with pytest.raises(LaunchError, match=r"cannot reach the config '/tmp/c.yaml' on the launcher pod's disk"):
        launcher("jobset", api).run(local)
    assert not [r for r in fake.requests if r[0] != "GET"]


def test_the_auto_launcher_runs_the_indexed_job_where_jobset_is_not_served(fake, api):
    fake.hidden.add("jobsets")
    fake.controllers["jobs"] = by_read(lambda obj, nth: {"conditions": [condition("Complete")]})
    fake.add_pods(NS, worker_pods("Running"))
    launcher("auto", api).run(WORKERS)
    assert [plural for plural, _ in deletes(fake)] == ["jobs", "services"]
