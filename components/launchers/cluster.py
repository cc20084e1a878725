"""What the cluster launchers (``jobset``, ``job``) share: their settings, the worker pod, and the
launch / wait / delete cycle.

The train step's pod is the *launcher*: it creates the workers' objects in its own namespace,
owned by itself (an ownerReference to its pod, so Kubernetes' garbage collector removes them if
the launcher pod goes first), follows them while reporting progress, and deletes them on
success, on failure and on SIGTERM (a terminated run). Everything a launcher needs beyond the
:class:`~components.launchers.base.WorkerSet` is one :class:`ClusterSettings`, read from the
launcher pod's environment (docs/training.md lists the variables); what the workers run on (the
image, the accelerator request, node selectors, tolerations, the service account) is by default
the launcher pod's own, read from the API.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import signal
import threading
import time
from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, ClassVar, Optional

from components import kube
from components.launchers.base import DEFAULT_MAX_RESTARTS, Launcher, LaunchError, WorkerSet
from components.launchers.identity import POD_FIELD_PATHS
from trainer import storage

log = logging.getLogger(__name__)

SET_LABEL = "lean-tpu-pipelines.dev/worker-set"
# The labels a compiled pipeline gives its steps (pipelines/platform.py): the workers inherit them.
LABEL_PREFIX = "lean-tpu-pipelines.dev/"
PART_OF = {"app.kubernetes.io/part-of": "lean-tpu-pipelines", "app.kubernetes.io/component": "train-worker"}
WORKER_CONTAINER = "worker"
# Limits that are accelerators (extended resources): copied from the launcher pod unless overridden.
_STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
MAX_HOSTNAME = 63


@dataclasses.dataclass(frozen=True)
class ClusterSettings:
    """Everything a cluster launcher needs that the worker set does not say.

    Attributes:
        namespace: the launcher pod's namespace; the workers' objects go there (``LTP_POD_NAMESPACE``).
        pod_name: the launcher pod's name, the owner of the workers' objects (``LTP_POD_NAME``).
        pod_uid: the launcher pod's uid, for the ownerReference (``LTP_POD_UID``).
        name: the worker set's name; None for ``ltp-train-<first 8 characters of the pod uid>``
            (``LTP_WORKER_SET_NAME``). Hostnames built from it must stay within 63 characters.
        image: the workers' image; None for the launcher container's (``LTP_WORKER_IMAGE``).
        accelerator_type: the workers' accelerator resource (``nvidia.com/gpu``); None for the
            launcher pod's limits as they are (``LTP_WORKER_ACCELERATOR_TYPE``).
        accelerator_count: how many of it per worker (``LTP_WORKER_ACCELERATOR_COUNT``).
        node_selector: the workers' node selector (``{"cloud.google.com/gke-accelerator":
            "nvidia-tesla-v100"}``); None for the launcher pod's (``LTP_WORKER_NODE_SELECTOR``, JSON).
        service_account: the workers' service account; None for the launcher pod's
            (``LTP_WORKER_SERVICE_ACCOUNT``).
        worker_port: the port the workers talk on (``LTP_WORKER_PORT``).
        peer_timeout_s: how long a worker waits for its peers' names to resolve (``LTP_PEER_TIMEOUT_S``).
        pending_timeout_s: how long the workers may stay unscheduled before the step fails
            (``LTP_PENDING_TIMEOUT_S``).
        max_restarts: JobSet restarts of the whole set after a worker is lost (``LTP_MAX_RESTARTS``).
        ttl_seconds_after_finished: the objects' time to live once finished, should the launcher
            die before deleting them (``LTP_JOB_TTL_S``).
        poll_interval_s: the pause between status reads (``LTP_POLL_INTERVAL_S``).
    """

    namespace: str
    pod_name: str
    pod_uid: str
    name: Optional[str] = None
    image: Optional[str] = None
    accelerator_type: Optional[str] = None
    accelerator_count: Optional[int] = None
    node_selector: Optional[Mapping[str, str]] = None
    service_account: Optional[str] = None
    worker_port: int = 2222
    peer_timeout_s: float = 600.0
    pending_timeout_s: float = 900.0
    max_restarts: int = DEFAULT_MAX_RESTARTS
    ttl_seconds_after_finished: int = 3600
    poll_interval_s: float = 10.0

    def __post_init__(self) -> None:
        if (self.accelerator_type is None) != (self.accelerator_count is None):
            raise LaunchError(
                "worker accelerator: give LTP_WORKER_ACCELERATOR_TYPE and LTP_WORKER_ACCELERATOR_COUNT together "
                f"(or neither, for the launcher pod's), got {self.accelerator_type!r} and {self.accelerator_count!r}"
            )
        for field in ("worker_port", "max_restarts", "ttl_seconds_after_finished"):
            if getattr(self, field) < 0:
                raise LaunchError(f"cluster settings: {field} must be >= 0, got {getattr(self, field)}")
        for field in ("peer_timeout_s", "pending_timeout_s", "poll_interval_s"):
            if getattr(self, field) <= 0:
                raise LaunchError(f"cluster settings: {field} must be > 0, got {getattr(self, field)}")

    @property
    def set_name(self) -> str:
        """The worker set's name (the JobSet's or the Job's, and the Service's)."""
        return self.name or f"ltp-train-{re.sub('[^a-z0-9]', '', self.pod_uid.lower())[:8]}"

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> ClusterSettings:
        """Reads the settings from the launcher pod's environment (``LTP_*``, see the attributes).

        Raises:
            LaunchError: the pod's identity is missing (not a pipeline pod) or a value is malformed.
        """
        env = os.environ if environ is None else environ
        missing = [name for name in POD_FIELD_PATHS if not env.get(name)]
        if missing:
            raise LaunchError(
                f"cluster launcher: {', '.join(missing)} not set; the train step's pod gets them from field paths "
                "(pipelines/flow.py: kfp.kubernetes.use_field_path_as_env). Outside a pipeline pod use launcher=local."
            )
        number = lambda name, kind, default: _number(env, name, kind, default)  # noqa: E731
        return cls(
            namespace=env["LTP_POD_NAMESPACE"],
            pod_name=env["LTP_POD_NAME"],
            pod_uid=env["LTP_POD_UID"],
            name=env.get("LTP_WORKER_SET_NAME") or None,
            image=env.get("LTP_WORKER_IMAGE") or None,
            accelerator_type=env.get("LTP_WORKER_ACCELERATOR_TYPE") or None,
            accelerator_count=number("LTP_WORKER_ACCELERATOR_COUNT", int, None),
            node_selector=_json_map(env, "LTP_WORKER_NODE_SELECTOR"),
            service_account=env.get("LTP_WORKER_SERVICE_ACCOUNT") or None,
            worker_port=number("LTP_WORKER_PORT", int, 2222),
            peer_timeout_s=number("LTP_PEER_TIMEOUT_S", float, 600.0),
            pending_timeout_s=number("LTP_PENDING_TIMEOUT_S", float, 900.0),
            max_restarts=number("LTP_MAX_RESTARTS", int, DEFAULT_MAX_RESTARTS),
            ttl_seconds_after_finished=number("LTP_JOB_TTL_S", int, 3600),
            poll_interval_s=number("LTP_POLL_INTERVAL_S", float, 10.0),
        )


def _number(env: Mapping[str, str], name: str, kind: type, default: Any) -> Any:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return kind(raw)
    except ValueError as err:
        raise LaunchError(f"cluster settings: {name} must be a {kind.__name__}, got {raw!r}") from err


def _json_map(env: Mapping[str, str], name: str) -> Optional[dict[str, str]]:
    raw = env.get(name)
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError as err:
        raise LaunchError(f"cluster settings: {name} must be a JSON object of label -> value, got {raw!r}") from err
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise LaunchError(f"cluster settings: {name} must be a JSON object of label -> value strings, got {raw!r}")
    return value


@dataclasses.dataclass(frozen=True)
class WorkerPod:
    """What every worker pod gets, resolved from the settings and the launcher pod.

    Attributes:
        image: the container image.
        resources: the container's ``resources`` (requests and limits, the accelerator's included).
        node_selector: the pod's node selector.
        tolerations: the pod's tolerations.
        annotations: the pod's annotations (e.g. GKE's TPU ``tf-version`` one).
        service_account: the pod's service account, None for the namespace's default.
        env: plain environment variables copied from the launcher container (name, value).
        secret_env: the launcher container's variables read from Secrets (``valueFrom.secretKeyRef``,
            as the compiled pipelines' ``secret_name`` gives them), copied whole.
        pull_secrets: the launcher pod's ``imagePullSecrets`` (a private registry).
        labels: the launcher pod's own labels (``lean-tpu-pipelines/*``: pipeline, step, stage,
            preset), so that cost tools attribute the workers to the same step.
    """

    image: str
    resources: dict[str, Any]
    node_selector: dict[str, str]
    tolerations: list[dict[str, Any]]
    annotations: dict[str, str]
    service_account: Optional[str]
    env: tuple[tuple[str, str], ...] = ()
    secret_env: tuple[dict[str, Any], ...] = ()
    pull_secrets: tuple[dict[str, Any], ...] = ()
    labels: dict[str, str] = dataclasses.field(default_factory=dict)


def _launcher_container(pod: Mapping[str, Any]) -> dict[str, Any]:
    containers = (pod.get("spec") or {}).get("containers") or []
    if not containers:
        raise LaunchError(f"launcher pod {pod.get('metadata', {}).get('name')!r} has no containers to copy")
    # KFP's step container is named "main"; a hand-made pod has one container.
    return next((c for c in containers if c.get("name") == "main"), containers[0])


def _copied_env(container: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The launcher's plain variables a worker needs too (LTP_EXTENSIONS, TF_*, ...), not KFP's own."""
    skip = ("KFP_", "LTP_POD_", "LTP_WORKER", "LTP_PEER_", "JOB_COMPLETION_INDEX", "TF_CONFIG")
    return tuple(
        (e["name"], str(e["value"]))
        for e in container.get("env") or []
        if "value" in e and not e["name"].startswith(skip)
    )


def _secret_env(container: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    """The launcher's variables read from Secrets, whole (their ``optional`` kept)."""
    return tuple(
        json.loads(json.dumps(e))
        for e in container.get("env") or []
        if "secretKeyRef" in (e.get("valueFrom") or {}) and not e["name"].startswith(("KFP_", "LTP_POD_"))
    )


def _own_labels(launcher_pod: Mapping[str, Any]) -> dict[str, str]:
    """The launcher pod's labels this project set (``lean-tpu-pipelines/*``), not KFP's or Argo's."""
    labels = (launcher_pod.get("metadata") or {}).get("labels") or {}
    return {k: str(v) for k, v in labels.items() if k.startswith(LABEL_PREFIX)}


def worker_pod(settings: ClusterSettings, launcher_pod: Mapping[str, Any]) -> WorkerPod:
    """The workers' pod settings: the launcher pod's, with the settings' overrides.

    With ``accelerator_type`` set, the launcher's accelerator limits (its extended resources) are
    replaced by that one; otherwise they are copied as they are.
    """
    container = _launcher_container(launcher_pod)
    spec = launcher_pod.get("spec") or {}
    resources = json.loads(json.dumps(container.get("resources") or {}))
    if settings.accelerator_type is not None:
        for part in ("limits", "requests"):
            kept = {k: v for k, v in (resources.get(part) or {}).items() if k in _STANDARD_RESOURCES}
            resources[part] = kept
        resources["limits"][settings.accelerator_type] = str(settings.accelerator_count)
        resources = {k: v for k, v in resources.items() if v}
    image = settings.image or container.get("image")
    if not image:
        raise LaunchError("the launcher container has no image to give the workers; set LTP_WORKER_IMAGE")
    return WorkerPod(
        image=image,
        resources=resources,
        node_selector=dict(
            spec.get("nodeSelector") or {} if settings.node_selector is None else settings.node_selector
        ),
        tolerations=list(spec.get("tolerations") or []),
        annotations={
            k: v
            for k, v in ((launcher_pod.get("metadata") or {}).get("annotations") or {}).items()
            if not k.startswith(("pipelines.kubeflow.org/", "workflows.argoproj.io/", "kubectl.kubernetes.io/"))
        },
        service_account=settings.service_account or spec.get("serviceAccountName"),
        env=_copied_env(container),
        secret_env=_secret_env(container),
        pull_secrets=tuple(json.loads(json.dumps(s)) for s in spec.get("imagePullSecrets") or []),
        labels=_own_labels(launcher_pod),
    )


def check_hostname(hostname: str, settings: ClusterSettings) -> None:
    """Refuses a worker hostname that is no DNS label of at most 63 characters (the fix named).

    Raises:
        LaunchError: the hostname is too long or malformed.
    """
    if len(hostname) > MAX_HOSTNAME or not _DNS_LABEL.fullmatch(hostname):
        raise LaunchError(
            f"worker hostname {hostname!r} ({len(hostname)} characters) is not a DNS label of at most "
            f"{MAX_HOSTNAME} lowercase letters, digits and '-': the set's name {settings.set_name!r} is too long "
            "or malformed. Fix: set LTP_WORKER_SET_NAME to a shorter name (e.g. ltp-train-1), or leave it unset "
            "for ltp-train-<pod uid prefix>."
        )


def check_shared_paths(workers: WorkerSet) -> None:
    """Refuses a config or model folder that only the launcher pod can reach.

    The workers are other pods: they read the config and write the chief's folder through
    storage every pod reaches (gs://), never the launcher's local disk.

    Raises:
        LaunchError: a local path (the message names it).
    """
    paths = (("config", workers.config_path), ("model folder", workers.model_dir))
    local = [(what, path) for what, path in paths if not storage.is_gcs(path)]
    if local:
        listed = ", ".join(f"the {what} {path!r}" for what, path in local)
        raise LaunchError(
            f"the workers run in other pods and cannot reach {listed} on the launcher pod's disk: give gs:// "
            "locations (the Model artifact's URI on a cluster), or run with launcher=local"
        )


def owner_reference(settings: ClusterSettings) -> dict[str, Any]:
    """The ownerReference to the launcher pod: its objects go when it goes."""
    return {"apiVersion": "v1", "kind": "Pod", "name": settings.pod_name, "uid": settings.pod_uid}


def metadata(settings: ClusterSettings, name: str) -> dict[str, Any]:
    """An owned object's metadata in the launcher's namespace."""
    return {
        "name": name,
        "namespace": settings.namespace,
        "labels": {**PART_OF, SET_LABEL: settings.set_name},
        "ownerReferences": [owner_reference(settings)],
    }


def pod_template(
    workers: WorkerSet, pod: WorkerPod, settings: ClusterSettings, host_pattern: str, subdomain: Optional[str] = None
) -> dict[str, Any]:
    """The workers' pod template: the worker command with the peers' contract in its environment.

    ``JOB_COMPLETION_INDEX`` (the worker's index) comes from the Indexed Job itself.
    """
    env = [
        *({"name": k, "value": v} for k, v in pod.env),
        *pod.secret_env,
        {"name": "LTP_WORKERS", "value": str(workers.workers)},
        {"name": "LTP_WORKER_HOST_PATTERN", "value": host_pattern},
        {"name": "LTP_WORKER_PORT", "value": str(settings.worker_port)},
        {"name": "LTP_PEER_TIMEOUT_S", "value": f"{settings.peer_timeout_s:g}"},
    ]
    container = {
        "name": WORKER_CONTAINER,
        "image": pod.image,
        "command": list(workers.argv),
        "env": env,
        "ports": [{"name": "tf-worker", "containerPort": settings.worker_port, "protocol": "TCP"}],
    }
    if pod.resources:
        container["resources"] = pod.resources
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    optional = {
        "subdomain": subdomain,
        "serviceAccountName": pod.service_account,
        "nodeSelector": pod.node_selector,
        "tolerations": pod.tolerations,
        "imagePullSecrets": list(pod.pull_secrets),
    }
    spec.update({k: v for k, v in optional.items() if v})
    meta: dict[str, Any] = {"labels": {**pod.labels, **PART_OF, SET_LABEL: settings.set_name}}
    if pod.annotations:
        meta["annotations"] = dict(pod.annotations)
    return {"metadata": meta, "spec": spec}


def indexed_job_spec(workers: WorkerSet, template: dict[str, Any], ttl_s: Optional[int]) -> dict[str, Any]:
    """An Indexed Job's spec running N workers at once, a lost pod never recreated alone.

    ``backoffLimit: 0``: Kubernetes would otherwise recreate a lost worker by itself while its
    peers wait in a collective for the old one.
    """
    spec = {
        "completionMode": "Indexed",
        "completions": workers.workers,
        "parallelism": workers.workers,
        "backoffLimit": 0,
        "template": template,
    }
    if ttl_s is not None:
        spec["ttlSecondsAfterFinished"] = ttl_s
    return spec


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Turns SIGTERM (a terminated run, a deleted pod) into a LaunchError, so cleanup runs.

    Only the main thread can install a handler; elsewhere the context does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the cleanup that follows runs once
        raise LaunchError("the train step received SIGTERM (the run was terminated): the workers are deleted")

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _pod_reason(pod: Mapping[str, Any]) -> str:
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"unschedulable: {cond.get('message') or cond.get('reason')}"
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting:
            return f"{cs.get('name')} waiting: {waiting.get('reason')} {waiting.get('message') or ''}".strip()
    return f"phase {status.get('phase', 'unknown')}"


def pods_summary(pods: Sequence[Mapping[str, Any]]) -> str:
    """``2 Running, 1 Pending`` for the progress line."""
    phases: dict[str, int] = {}
    for pod in pods:
        phase = (pod.get("status") or {}).get("phase", "Unknown")
        phases[phase] = phases.get(phase, 0) + 1
    return ", ".join(f"{n} {phase}" for phase, n in sorted(phases.items())) or "no pods yet"


class ClusterLauncher(Launcher):
    """The launch / wait / delete cycle over a set of owned objects; subclasses render and judge them.

    Attributes:
        api_version: the main object's apiVersion (the one whose status says how training goes).
        kind: its kind.
    """

    api_version: ClassVar[str]
    kind: ClassVar[str]
    extra_kinds: ClassVar[tuple[tuple[str, str], ...]] = (
        ("batch/v1", "Job"),
        ("jobset.x-k8s.io/v1alpha2", "JobSet"),
    )

    def __init__(self, settings: Optional[ClusterSettings] = None, api_client: Any = None):
        self.settings = settings
        self.api_client = api_client

    @abstractmethod
    def render(self, workers: WorkerSet, pod: WorkerPod, settings: ClusterSettings) -> list[dict[str, Any]]:
        """The objects to apply; the main object (``api_version``/``kind``) among them."""

    @abstractmethod
    def state(self, obj: Mapping[str, Any], settings: ClusterSettings) -> tuple[str, str]:
        """(``running``, ``succeeded`` or ``failed``; what the status says) of the main object."""

    def restarts(self, obj: Mapping[str, Any]) -> int:
        """How often the whole set was restarted (0 where the kind has no gang restart)."""
        return 0

    def missing_api(self, settings: ClusterSettings) -> str:
        """The error when the cluster does not serve :attr:`kind`."""
        return f"the cluster does not serve {self.kind} ({self.api_version}) in namespace {settings.namespace}"

    def refused(self, settings: ClusterSettings, error: kube.KubeDeployError) -> str:
        """The error when the API refused the objects (a missing right, say)."""
        return f"creating the {self.kind} of the workers failed: {error}"

    def run(self, workers: WorkerSet) -> None:
        """Creates the workers' objects, follows them to the end and deletes them, whatever happens.

        Raises:
            LaunchError: the API is missing or refused, the workers failed or stayed unscheduled,
                or the step was terminated; the message names the cause.
        """
        if workers.workers < 2:
            raise LaunchError(f"a cluster launcher runs 2 or more workers, got {workers.workers}")
        check_shared_paths(workers)
        settings = self.settings or ClusterSettings.from_env()
        try:
            api = self.api_client or kube.load_api_client()
            if not kube.serves_kind(api, self.api_version, self.kind):
                raise LaunchError(self.missing_api(settings))
            launcher_pod = kube.get_object(api, "v1", "Pod", settings.namespace, settings.pod_name)
            if launcher_pod is None:
                raise LaunchError(f"the launcher pod {settings.namespace}/{settings.pod_name} does not exist")
            objects = self.render(workers, worker_pod(settings, launcher_pod), settings)
            with sigterm_raises():
                try:
                    self._apply(api, objects, settings)
                    self._wait(api, workers, settings)
                finally:
                    self._delete(api, objects)
        except kube.KubeDeployError as err:
            raise LaunchError(f"{self.name} launcher: {err}") from err

    def _apply(self, api: Any, objects: list[dict[str, Any]], settings: ClusterSettings) -> None:
        try:
            applied = kube.apply_objects(api, objects, extra_kinds=self.extra_kinds)
        except kube.KubeDeployError as err:
            raise LaunchError(self.refused(settings, err)) from err
        for a in applied:
            log.info("%s %s/%s %s", a.kind, a.namespace, a.name, a.outcome)

    def _wait(self, api: Any, workers: WorkerSet, settings: ClusterSettings) -> None:
        """Polls the main object and its pods until it ends; fails on pods Pending too long."""
        name, namespace = settings.set_name, settings.namespace
        waiting_since, restarts, last = time.monotonic(), 0, ""
        while True:
            obj = kube.get_object(api, self.api_version, self.kind, namespace, name)
            if obj is None:
                raise LaunchError(f"{self.kind} {namespace}/{name} disappeared while training (deleted by hand?)")
            state, message = self.state(obj, settings)
            if state == "succeeded":
                log.info("%s %s/%s finished: %s", self.kind, namespace, name, message)
                return
            if state == "failed":
                raise LaunchError(f"{self.kind} {namespace}/{name} failed: {message}")
            pods = kube.list_objects(api, "v1", "Pod", namespace, {SET_LABEL: name})
            if self.restarts(obj) != restarts:  # a restart makes new pods: their scheduling starts over
                restarts, waiting_since = self.restarts(obj), time.monotonic()
            started = [p for p in pods if (p.get("status") or {}).get("phase") in ("Running", "Succeeded")]
            if len(started) >= workers.workers:
                waiting_since = time.monotonic()
            elif time.monotonic() - waiting_since > settings.pending_timeout_s:
                raise LaunchError(self._pending_message(pods, workers, settings))
            line = f"{self.kind} {namespace}/{name}: {message}; pods: {pods_summary(pods)}; restarts: {restarts}"
            if line != last:
                log.info("%s", line)
                last = line
            time.sleep(settings.poll_interval_s)

    def _pending_message(self, pods: Sequence[Mapping[str, Any]], workers: WorkerSet, settings: ClusterSettings) -> str:
        waiting = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Running", "Succeeded")]
        reasons = [f"pod {p['metadata']['name']}: {_pod_reason(p)}" for p in waiting[:5]]
        if len(pods) < workers.workers:
            reasons.append(f"{workers.workers - len(pods)} of {workers.workers} worker pods not created yet")
        return (
            f"the {workers.workers} workers of {self.kind} {settings.namespace}/{settings.set_name} were not all "
            f"running after {settings.pending_timeout_s:g} s (LTP_PENDING_TIMEOUT_S):"
            + "".join(f"\n  {r}" for r in reasons)
            + "\nFix: a node pool with free accelerators of the requested type (or a node selector that matches one)."
        )

    def _delete(self, api: Any, objects: list[dict[str, Any]]) -> None:
        """Deletes what was applied, what it owns included; a failure is logged, not raised.

        Not raised: the step's own outcome (its model, or its first error) matters more, and the
        ownerReference to the launcher pod and ttlSecondsAfterFinished remove the objects later.
        """
        for obj in reversed(objects):
            meta = obj["metadata"]
            try:
                kube.delete_object(
                    api,
                    obj["apiVersion"],
                    obj["kind"],
                    meta["namespace"],
                    meta["name"],
                    propagation_policy="Background",
                )
            except kube.KubeDeployError as err:
                log.warning(
                    "could not delete %s %s/%s (%s); its ownerReference and TTL remove it later",
                    obj["kind"],
                    meta["namespace"],
                    meta["name"],
                    err,
                )
