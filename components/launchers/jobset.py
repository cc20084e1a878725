"""The ``jobset`` launcher: the workers as one JobSet (``jobset.x-k8s.io/v1alpha2``).

One replicated Job of N pods (``parallelism = completions = N``, Indexed), DNS hostnames
``<set>-workers-0-<index>.<set>`` (``network.enableDNSHostnames``), and a gang restart: when a
worker is lost (a preempted node), the JobSet controller recreates *all* workers, up to
``failurePolicy.maxRestarts`` times, and they resume from the chief's last checkpoint. The Job
template has ``backoffLimit: 0``, so a lost pod is never recreated alone while its peers wait.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from components import kube
from components.launchers.base import WorkerSet
from components.launchers.cluster import (
    SET_LABEL,
    ClusterLauncher,
    ClusterSettings,
    WorkerPod,
    check_hostname,
    indexed_job_spec,
    metadata,
    pod_template,
)

API_VERSION = "jobset.x-k8s.io/v1alpha2"
REPLICATED_JOB = "workers"


def host_pattern(settings: ClusterSettings) -> str:
    """The workers' host names, ``{index}`` standing for the worker's index."""
    name = settings.set_name
    return f"{name}-{REPLICATED_JOB}-0-{{index}}.{name}"


def render_jobset(workers: WorkerSet, pod: WorkerPod, settings: ClusterSettings) -> dict[str, Any]:
    """The JobSet of the workers, owned by the launcher pod.

    Raises:
        LaunchError: a worker's hostname would exceed 63 characters.
    """
    name = settings.set_name
    pattern = host_pattern(settings)
    check_hostname(pattern.split(".")[0].format(index=workers.workers - 1), settings)
    template = pod_template(workers, pod, settings, pattern)
    return {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": metadata(settings, name),
        "spec": {
            # Peers resolve before they are ready (the workers have no readiness probe to wait for).
            "network": {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True},
            "failurePolicy": {"maxRestarts": settings.max_restarts},
            "ttlSecondsAfterFinished": settings.ttl_seconds_after_finished,
            "replicatedJobs": [
                {
                    "name": REPLICATED_JOB,
                    "replicas": 1,
                    "template": {"spec": indexed_job_spec(workers, template, ttl_s=None)},
                }
            ],
        },
    }


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return cond
    return None


class JobSetLauncher(ClusterLauncher):
    """Runs the workers as a JobSet, restarted together up to ``max_restarts`` times."""

    name = "jobset"
    api_version = API_VERSION
    kind = "JobSet"

    def render(self, workers: WorkerSet, pod: WorkerPod, settings: ClusterSettings) -> list[dict[str, Any]]:
        return [render_jobset(workers, pod, settings)]

    def restarts(self, obj: Mapping[str, Any]) -> int:
        return int((obj.get("status") or {}).get("restarts") or 0)

    def state(self, obj: Mapping[str, Any], settings: ClusterSettings) -> tuple[str, str]:
        done = _condition(obj, "Completed")
        if done is not None:
            return "succeeded", done.get("message") or "all workers completed"
        failed = _condition(obj, "Failed")
        if failed is not None:
            return "failed", (
                f"{failed.get('reason', 'Failed')}: {failed.get('message', '')} "
                f"(after {self.restarts(obj)} restarts of all workers; failurePolicy.maxRestarts "
                f"{settings.max_restarts}). The workers' logs: kubectl -n {settings.namespace} logs "
                f"-l {SET_LABEL}={settings.set_name} --prefix"
            )
        return "running", f"training ({self.restarts(obj)} restarts so far)"

    def missing_api(self, settings: ClusterSettings) -> str:
        return (
            f"the cluster does not serve JobSet ({API_VERSION}): the jobsets.jobset.x-k8s.io CRD and its controller "
            "are not installed. Fix: install JobSet (kubectl apply --server-side -f "
            "https://github.com/kubernetes-sigs/jobset/releases/download/<version>/manifests.yaml), or run with "
            "launcher=job (an Indexed Job, no gang restart)."
        )

    def refused(self, settings: ClusterSettings, error: kube.KubeDeployError) -> str:
        return (
            f"creating JobSet {settings.namespace}/{settings.set_name} failed: {error} The train step's service "
            f"account needs get/list/create/patch/delete on jobsets.jobset.x-k8s.io and get/list on pods in "
            f"{settings.namespace}: a cluster admin applies manifests/rbac/training."
        )
