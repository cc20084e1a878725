"""The ``job`` launcher: the workers as an Indexed Job with a headless Service (no JobSet needed).

``completionMode: Indexed`` gives each pod its index (``JOB_COMPLETION_INDEX``) and, with the
pods' ``subdomain`` set to a headless Service of the same name, a stable hostname
``<set>-<index>.<set>``. There is no gang restart: with ``backoffLimit: 0`` a lost worker fails the
Job, the launcher deletes it and the step fails; KFP's retry of the step (the pipelines set
retries on the train task) starts a new set, which resumes from the chief's last checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from components import kube
from components.launchers.base import Launcher, LaunchError, WorkerSet
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


def host_pattern(settings: ClusterSettings) -> str:
    """The workers' host names, ``{index}`` standing for the worker's index."""
    name = settings.set_name
    return f"{name}-{{index}}.{name}"


def render_service(settings: ClusterSettings) -> dict[str, Any]:
    """The headless Service that gives the workers' hostnames DNS records (before they are ready too)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(settings, settings.set_name),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {SET_LABEL: settings.set_name},
        },
    }


def render_job(workers: WorkerSet, pod: WorkerPod, settings: ClusterSettings) -> dict[str, Any]:
    """The Indexed Job of the workers, owned by the launcher pod.

    Raises:
        LaunchError: a worker's hostname would exceed 63 characters.
    """
    pattern = host_pattern(settings)
    check_hostname(pattern.split(".")[0].format(index=workers.workers - 1), settings)
    template = pod_template(workers, pod, settings, pattern, subdomain=settings.set_name)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(settings, settings.set_name),
        "spec": indexed_job_spec(workers, template, ttl_s=settings.ttl_seconds_after_finished),
    }


def _true(obj: Mapping[str, Any], kind: str) -> Optional[Mapping[str, Any]]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return cond
    return None


class IndexedJobLauncher(ClusterLauncher):
    """Runs the workers as an Indexed Job; a lost worker fails the step (KFP's retry resumes).

    Args:
        settings: the cluster settings; None reads them from the environment.
        api_client: a configured API client; None loads the in-cluster configuration.
        fallback_for: why this launcher runs instead of a JobSet (``auto`` on a cluster without
            the CRD), for its errors; None when it was asked for.
    """

    name = "job"
    api_version = "batch/v1"
    kind = "Job"

    def __init__(
        self, settings: Optional[ClusterSettings] = None, api_client: Any = None, fallback_for: Optional[str] = None
    ):
        super().__init__(settings, api_client)
        self.fallback_for = fallback_for

    def render(self, workers: WorkerSet, pod: WorkerPod, settings: ClusterSettings) -> list[dict[str, Any]]:
        return [render_service(settings), render_job(workers, pod, settings)]

    def state(self, obj: Mapping[str, Any], settings: ClusterSettings) -> tuple[str, str]:
        if _true(obj, "Complete") is not None:
            return "succeeded", "all workers completed"
        failed = _true(obj, "Failed")
        if failed is not None:
            return "failed", (
                f"{failed.get('reason', 'Failed')}: {failed.get('message', '')}. An Indexed Job has no gang restart: "
                "the step fails and KFP's retry of the step starts a new set, which resumes from the last checkpoint. "
                f"The workers' logs: kubectl -n {settings.namespace} logs -l {SET_LABEL}={settings.set_name} --prefix"
            )
        status = obj.get("status") or {}
        return "running", f"{status.get('active', 0)} active, {status.get('succeeded', 0)} succeeded"

    def refused(self, settings: ClusterSettings, error: kube.KubeDeployError) -> str:
        before = f"{self.fallback_for}; and the Indexed Job fallback failed too: " if self.fallback_for else ""
        return (
            f"{before}creating the workers' Service and Job {settings.namespace}/{settings.set_name} failed: {error} "
            f"The train step's service account needs get/list/create/patch/delete on services and jobs.batch and "
            f"get/list on pods in {settings.namespace}: a cluster admin applies manifests/rbac/training."
        )


def choose_cluster_launcher(settings: Optional[ClusterSettings] = None, api_client: Any = None) -> ClusterLauncher:
    """``auto`` inside a cluster: a JobSet where the cluster serves the CRD, else the Indexed Job.

    The fallback carries why it was chosen, so a cluster with neither the CRD nor the rights for
    the fallback gets one error naming both.
    """
    from components.launchers.jobset import API_VERSION, JobSetLauncher

    api = api_client or kube.load_api_client()
    if kube.serves_kind(api, API_VERSION, "JobSet"):
        return JobSetLauncher(settings, api)
    reason = f"the cluster does not serve JobSet ({API_VERSION}; the jobsets.jobset.x-k8s.io CRD is not installed)"
    return IndexedJobLauncher(settings, api, fallback_for=reason)


class AutoClusterLauncher(Launcher):
    """``auto`` inside a cluster: the JobSet launcher where the API serves JobSet, else the Indexed Job.

    Args:
        settings: the cluster settings; None reads them from the environment.
        api_client: a configured API client; None loads the in-cluster configuration.
    """

    name = "auto"

    def __init__(self, settings: Optional[ClusterSettings] = None, api_client: Any = None):
        self.settings = settings
        self.api_client = api_client

    def run(self, workers: WorkerSet) -> None:
        """Runs the workers with the launcher :func:`choose_cluster_launcher` picks."""
        try:
            chosen = choose_cluster_launcher(self.settings, self.api_client)
        except kube.KubeDeployError as err:
            raise LaunchError(f"auto launcher: {err}") from err
        chosen.run(workers)
