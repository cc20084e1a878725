"""The cluster launchers' objects (JobSet, Indexed Job, headless Service) and their settings.

Each rendered object goes through kubeflow-trainer-api's typed models (the JobSet's, the batch/v1
Job's, the core/v1 Service's) and must come back unchanged: the models refuse wrong types and
drop unknown keys silently, so a misspelt field shows as a difference.
"""

import pytest
from kubeflow_trainer_api import models

from components.launchers import LaunchError, WorkerSet, choose_launcher, jobset
from components.launchers import job as job_launcher
from components.launchers.cluster import SET_LABEL, ClusterSettings, worker_pod

SETTINGS = ClusterSettings(namespace="kubeflow-user", pod_name="end-to-end-abc-train-42", pod_uid="0f1e2d3c-aaaa-bbbb")
WORKERS = WorkerSet(
    workers=5,
    config_path="gs://b/run/model/worker-config.yaml",
    model_dir="gs://b/run/model",
    argv=("python", "-m", "trainer.worker", "--config", "gs://b/run/model/worker-config.yaml"),
)
LAUNCHER_POD = {
    "metadata": {
        "name": "end-to-end-abc-train-42",
        "annotations": {"tf-version.cloud-tpus.google.com": "2.21.0", "pipelines.kubeflow.org/v2_component": "true"},
    },
    "spec": {
        "serviceAccountName": "default-editor",
        "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-tesla-v100"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [
            {
                "name": "main",
                "image": "us-docker.pkg.dev/p/ltp/lean-tpu-pipelines:0.1.0-gpu",
                "env": [
                    {"name": "LTP_EXTENSIONS", "value": "my_tasks"},
                    {"name": "KFP_POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "KFP_RUN_ID", "value": "r1"},
                    {"name": "LTP_POD_UID", "value": "copied-never"},
                ],
                "resources": {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"nvidia.com/gpu": "1"}},
            }
        ],
    },
}


def roundtrip(model, obj):
    return model.from_dict(obj).to_dict()


def test_auto_is_the_cluster_launcher_inside_a_cluster_and_local_outside():
    assert choose_launcher("auto", {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) == "auto"
    assert choose_launcher("auto", {}) == "local"
    assert choose_launcher("job", {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) == "job"
    assert (job_launcher.AutoClusterLauncher.name, job_launcher.IndexedJobLauncher.name) == ("auto", "job")
    assert jobset.JobSetLauncher.name == "jobset"


def test_jobset_is_typed_gang_restarted_and_owned_by_the_launcher_pod():
    pod = worker_pod(SETTINGS, LAUNCHER_POD)
    obj = jobset.render_jobset(WORKERS, pod, SETTINGS)
    assert roundtrip(models.JobsetV1alpha2JobSet, obj) == obj
    spec = obj["spec"]
    assert obj["metadata"]["name"] == "ltp-train-0f1e2d3c" and obj["metadata"]["namespace"] == "kubeflow-user"
    assert obj["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "end-to-end-abc-train-42", "uid": "0f1e2d3c-aaaa-bbbb"}
    ]
    assert spec["network"] == {
        "enableDNSHostnames": True,
        "subdomain": "ltp-train-0f1e2d3c",
        "publishNotReadyAddresses": True,
    }
    assert spec["failurePolicy"] == {"maxRestarts": 3} and spec["ttlSecondsAfterFinished"] == 3600
    [rjob] = spec["replicatedJobs"]
    job = rjob["template"]["spec"]
    assert (job["parallelism"], job["completions"], job["completionMode"], job["backoffLimit"]) == (5, 5, "Indexed", 0)
    template = job["template"]
    assert template["metadata"]["labels"][SET_LABEL] == "ltp-train-0f1e2d3c"
    assert template["metadata"]["annotations"] == {"tf-version.cloud-tpus.google.com": "2.21.0"}
    assert template["spec"]["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-v100"}
    assert template["spec"]["serviceAccountName"] == "default-editor"
    [container] = template["spec"]["containers"]
    assert container["command"] == list(WORKERS.argv)
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1"}  # each worker: the step's request
    env = {e["name"]: e["value"] for e in container["env"]}
    # The launcher's own plain variables travel (KFP's and the launcher's identity do not).
    assert env == {
        "LTP_EXTENSIONS": "my_tasks",
        "LTP_WORKERS": "5",
        "LTP_WORKER_HOST_PATTERN": "ltp-train-0f1e2d3c-workers-0-{index}.ltp-train-0f1e2d3c",
        "LTP_WORKER_PORT": "2222",
        "LTP_PEER_TIMEOUT_S": "600",
    }


def test_indexed_job_fallback_has_a_headless_service_and_the_pods_subdomain():
    launcher = job_launcher.IndexedJobLauncher()
    pod = worker_pod(SETTINGS, LAUNCHER_POD)
    service, job = launcher.render(WORKERS, pod, SETTINGS)
    assert roundtrip(models.IoK8sApiCoreV1Service, service) == service
    assert roundtrip(models.IoK8sApiBatchV1Job, job) == job
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {SET_LABEL: "ltp-train-0f1e2d3c"}
    spec = job["spec"]
    assert (spec["completionMode"], spec["parallelism"], spec["completions"], spec["backoffLimit"]) == (
        "Indexed", 5, 5, 0
    )  # fmt: skip
    assert spec["template"]["spec"]["subdomain"] == service["metadata"]["name"]
    env = {e["name"]: e["value"] for e in spec["template"]["spec"]["containers"][0]["env"]}
    assert env["LTP_WORKER_HOST_PATTERN"] == "ltp-train-0f1e2d3c-{index}.ltp-train-0f1e2d3c"
    assert job["metadata"]["ownerReferences"][0]["uid"] == SETTINGS.pod_uid


def test_worker_accelerator_and_node_selector_can_be_set_apart_from_the_launcher_pod():
    settings = ClusterSettings.from_env(
        {
            "LTP_POD_NAME": "p",
            "LTP_POD_UID": "u1",
            "LTP_POD_NAMESPACE": "ns",
            "LTP_WORKER_ACCELERATOR_TYPE": "nvidia.com/gpu",
            "LTP_WORKER_ACCELERATOR_COUNT": "2",
            "LTP_WORKER_NODE_SELECTOR": '{"cloud.google.com/gke-accelerator": "nvidia-tesla-p100"}',
        }
    )
    cpu_launcher = {**LAUNCHER_POD, "spec": {**LAUNCHER_POD["spec"], "nodeSelector": {}}}
    cpu_launcher["spec"]["containers"] = [{**LAUNCHER_POD["spec"]["containers"][0], "resources": {"limits": {}}}]
    pod = worker_pod(settings, cpu_launcher)
    assert pod.resources == {"limits": {"nvidia.com/gpu": "2"}}
    assert pod.node_selector == {"cloud.google.com/gke-accelerator": "nvidia-tesla-p100"}


def test_a_name_giving_hostnames_over_63_characters_is_refused_with_the_fix():
    long = ClusterSettings(namespace="n", pod_name="p", pod_uid="u", name="n" * 52)
    pod = worker_pod(long, LAUNCHER_POD)
    with pytest.raises(LaunchError, match=r"hostname 'n+-workers-0-4' \(64 characters\).*LTP_WORKER_SET_NAME"):
        jobset.render_jobset(WORKERS, pod, long)
    # The fallback's hostnames are shorter (<set>-<index>): the same name fits there.
    job_launcher.render_job(WORKERS, pod, long)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "LTP_POD_NAME, LTP_POD_UID, LTP_POD_NAMESPACE not set"),
        ({"LTP_WORKER_PORT": "http"}, "LTP_WORKER_PORT must be a int"),
        ({"LTP_WORKER_ACCELERATOR_TYPE": "nvidia.com/gpu"}, "together"),
        ({"LTP_WORKER_NODE_SELECTOR": "[1]"}, "JSON object"),
        ({"LTP_PENDING_TIMEOUT_S": "0"}, "pending_timeout_s must be > 0"),
    ],
)
def test_bad_settings_are_refused(env, message):
    pod = {} if not env else {"LTP_POD_NAME": "p", "LTP_POD_UID": "u", "LTP_POD_NAMESPACE": "n"}
    with pytest.raises(LaunchError, match=message):
        ClusterSettings.from_env({**pod, **env})


def test_worker_pods_train_on_the_artifacts_uris_and_everything_else_on_local_paths(monkeypatch):
    from components.launchers.locations import training_locations

    dataset, model = ("/gcs/b/ds", "gs://b/ds"), ("/gcs/b/model", "gs://b/model")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert training_locations(dataset, model, 5, "auto") == ("gs://b/ds", "gs://b/model")
    assert training_locations(dataset, model, 5, "local") == ("/gcs/b/ds", "/gcs/b/model")
    assert training_locations(dataset, model, 1, "jobset") == ("/gcs/b/ds", "/gcs/b/model")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    assert training_locations(dataset, model, 5, "auto") == ("/gcs/b/ds", "/gcs/b/model")  # kfp.local: local


def test_workers_inherit_the_launcher_s_secret_variables_pull_secrets_and_labels():
    secret_ref = {"secretKeyRef": {"name": "lean-tpu-pipelines", "key": "HF_TOKEN", "optional": True}}
    launcher = {
        **LAUNCHER_POD,
        "metadata": {
            **LAUNCHER_POD["metadata"],
            "labels": {
                "lean-tpu-pipelines.dev/pipeline": "end-to-end",
                "lean-tpu-pipelines.dev/step": "train-model",
                "pipelines.kubeflow.org/v2_component": "true",
                "workflows.argoproj.io/workflow": "end-to-end-abc",
            },
        },
        "spec": {**LAUNCHER_POD["spec"], "imagePullSecrets": [{"name": "regcred"}]},
    }
    main = {**LAUNCHER_POD["spec"]["containers"][0]}
    main["env"] = [*main["env"], {"name": "HF_TOKEN", "valueFrom": secret_ref}]
    launcher["spec"]["containers"] = [main]
    pod = worker_pod(SETTINGS, launcher)
    obj = jobset.render_jobset(WORKERS, pod, SETTINGS)
    assert roundtrip(models.JobsetV1alpha2JobSet, obj) == obj
    template = obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert template["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    labels = template["metadata"]["labels"]
    assert labels["lean-tpu-pipelines.dev/step"] == "train-model" and labels[SET_LABEL] == "ltp-train-0f1e2d3c"
    assert not any(k.startswith(("pipelines.kubeflow.org/", "workflows.argoproj.io/")) for k in labels)
    [container] = template["spec"]["containers"]
    assert {"name": "HF_TOKEN", "valueFrom": secret_ref} in container["env"]
    # the Indexed Job fallback's pods get the same
    job = job_launcher.render_job(WORKERS, pod, SETTINGS)
    assert job["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert job["spec"]["template"]["metadata"]["labels"]["lean-tpu-pipelines.dev/pipeline"] == "end-to-end"
