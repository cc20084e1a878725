"""manifests/rbac/training: the train step's rights for its workers and their network policy.

Rendered by the real ``kubectl kustomize`` and validated strictly against the Kubernetes schema;
the Role must grant exactly what the launchers do, and the policy must select the pods they render.
"""

import kubernetes_validate
import pytest

from components.launchers import WorkerSet
from components.launchers.cluster import ClusterSettings, worker_pod
from components.launchers.job import IndexedJobLauncher
from components.launchers.jobset import JobSetLauncher
from tests.unit.manifests.test_manifests_serving import KUBERNETES_VERSION, PIPELINE_SA, _grants, objects, one

SETTINGS = ClusterSettings(namespace="kubeflow-user-example-com", pod_name="p", pod_uid="u-1")
WORKERS = WorkerSet(workers=2, config_path="c.yaml", model_dir="m", argv=("python", "-m", "trainer.worker"))
POD = {"spec": {"containers": [{"name": "main", "image": "ltp:1"}]}}


def rendered_by(launcher):
    cls = {"jobset": JobSetLauncher, "job": IndexedJobLauncher}[launcher]
    return cls().render(WORKERS, worker_pod(SETTINGS, POD), SETTINGS)


def test_every_object_validates_strictly():
    objs = objects("rbac/training")
    assert sorted(o["kind"] for o in objs) == ["NetworkPolicy", "Role", "RoleBinding"]
    for obj in objs:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        assert obj["metadata"]["namespace"] == PIPELINE_SA["namespace"]
    assert one(objs, "RoleBinding")["subjects"] == [PIPELINE_SA]


def test_the_role_grants_exactly_what_the_launchers_do():
    group = lambda api_version: api_version.rpartition("/")[0]  # noqa: E731 ("v1": the core group "")
    plural = {"JobSet": "jobsets", "Job": "jobs", "Service": "services"}
    manage = {"get", "list", "watch", "create", "patch", "delete"}
    expected = {
        (group(o["apiVersion"]), plural[o["kind"]]): manage for name in ("jobset", "job") for o in rendered_by(name)
    }
    expected[("", "pods")] = {"get", "list", "watch"}  # its own pod (copied), the workers' (why Pending)
    assert _grants(one(objects("rbac/training"), "Role")) == expected


@pytest.mark.parametrize("launcher", ["jobset", "job"])
def test_the_network_policy_lets_the_workers_reach_each_other_on_their_port(launcher):
    policy = one(objects("rbac/training"), "NetworkPolicy")["spec"]
    main = rendered_by(launcher)[-1]
    job_spec = main["spec"]["replicatedJobs"][0]["template"]["spec"] if launcher == "jobset" else main["spec"]
    labels = job_spec["template"]["metadata"]["labels"]
    selects = lambda selector: selector["matchLabels"].items() <= labels.items()  # noqa: E731
    assert selects(policy["podSelector"])
    [rule] = policy["ingress"]
    assert all(selects(peer["podSelector"]) for peer in rule["from"])
    assert rule["ports"] == [{"protocol": "TCP", "port": SETTINGS.worker_port}]
