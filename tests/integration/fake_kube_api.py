"""A FAKE Kubernetes API server for tests: a small http.server on 127.0.0.1.

It implements only the endpoints the kubernetes serving target
(``components/serving/targets/kubernetes.py``) calls, with the API's semantics as far as they
matter there:

- discovery, what ``kubernetes.dynamic.DynamicClient`` reads before its first request:
  ``/version``, ``/api``, ``/apis`` (APIGroupList) and ``/api/v1``, ``/apis/<group>/<version>``
  (APIResourceList) for the kinds below; a plural in ``hidden`` is served by neither discovery
  nor its object URLs (a cluster without that API);
- namespaced objects under ``/api/v1/namespaces/<ns>/<plural>[/<name>]`` and
  ``/apis/<group>/<version>/namespaces/<ns>/<plural>[/<name>]`` for the serving kinds and pods;
- GET (404 ``NotFound`` Status for a missing object or namespace), list with ``labelSelector``
  (equality terms), POST create (409 ``AlreadyExists``), DELETE (the object goes at once, as
  with no finalizers; 404 when there is none; the answer is a ``Success`` Status);
- server-side apply: ``PATCH`` with ``Content-Type: application/apply-patch+yaml`` and a required
  ``fieldManager``; ``force`` takes fields over. Field ownership is tracked per leaf field (lists
  are atomic, a coarser rule than real SSA's list keys), so a manager's apply removes the fields
  it applied before and no longer applies, conflicts with other managers' differing values give
  409 ``Conflict`` unless forced, and a no-op apply changes nothing (not even resourceVersion,
  as on Kubernetes >= 1.27);
- metadata.generation bumps when ``spec`` changes, resourceVersion on every change, Deployment
  ``spec.replicas`` defaults to 1;
- a Deployment controller simulated on reads: a rollout becomes available after
  ``rollout_polls`` reads of the Deployment, or never when ``pod_failure(deployment)`` returns a
  reason (the synthesized pods then report it as a waiting container), or ends in
  ``ProgressDeadlineExceeded`` when ``deadline_exceeded(deployment)`` is true.

More kinds (a custom resource such as KServe's InferenceService) are served after
``add_kind(plural, api_version, kind)``; ``set_status`` writes an object's status as its
controller would (conditions included); ``controllers[plural]`` is called with an object at each
read and returns the status to store (None: leave it). :class:`FakeKServe` is such a controller
for InferenceServices (revisions, canary traffic, tag URLs, load failures).
``add_pods(namespace, pods)`` stores pods (a JobSet's workers, Pending with the scheduler's
reason) that pod lists return next to the Deployments' synthesized ones.

Cluster-scoped kinds (``CLUSTER_KINDS``: nodes) are served read-only under ``/api/v1/<plural>``
(``[/<name>]``, list with ``labelSelector``) from what ``add_cluster_objects(plural, objects)``
stored, and listed in discovery as not namespaced; ``deny_reads`` makes reads of the named plurals
answer 403 (a client without a ClusterRole).

Not implemented: watch, strategic merge patch, admission, validation against schemas
(``fieldValidation=Strict`` refuses unknown top-level fields only), authentication. ``deny``
makes writes to the named plurals answer 403 to test RBAC errors.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional
from urllib.parse import parse_qs, urlsplit

import yaml

KINDS = {
    "serviceaccounts": ("v1", "ServiceAccount"),
    "configmaps": ("v1", "ConfigMap"),
    "services": ("v1", "Service"),
    "pods": ("v1", "Pod"),
    "deployments": ("apps/v1", "Deployment"),
    "replicasets": ("apps/v1", "ReplicaSet"),
    "horizontalpodautoscalers": ("autoscaling/v2", "HorizontalPodAutoscaler"),
    "poddisruptionbudgets": ("policy/v1", "PodDisruptionBudget"),
    "jobs": ("batch/v1", "Job"),
    "jobsets": ("jobset.x-k8s.io/v1alpha2", "JobSet"),
}
CLUSTER_KINDS = {"nodes": ("v1", "Node")}
_CLUSTER_PATH = re.compile(r"^/api/v1/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?$")
_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/(?P<version>[^/]+))/namespaces/(?P<ns>[^/]+)/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?$"
)
# Top-level fields of the served kinds; strict field validation refuses others (the fake checks
# no deeper: the manifests' schema is checked by kubernetes-validate in the unit tests).
_TOP_LEVEL_FIELDS = {"apiVersion", "kind", "metadata", "spec", "status", "data", "binaryData", "immutable"} | {
    "automountServiceAccountToken",
    "imagePullSecrets",
    "secrets",
}
_SERVER_FIELDS = {"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields"}

Path = tuple[str, ...]


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def _leaves(obj: Any, prefix: Path = ()) -> dict[Path, Any]:
    """Flattens an object into leaf fields; lists and empty maps are leaves (atomic)."""
    if isinstance(obj, dict) and obj:
        out: dict[Path, Any] = {}
        for key, value in obj.items():
            out.update(_leaves(value, (*prefix, key)))
        return out
    return {prefix: obj}


def _owned_leaves(obj: dict[str, Any]) -> dict[Path, Any]:
    body = {k: v for k, v in obj.items() if k != "status"}
    meta = {k: v for k, v in body.get("metadata", {}).items() if k not in _SERVER_FIELDS}
    return _leaves({**body, "metadata": meta})


def _get(obj: Any, path: Path) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def _set(obj: dict[str, Any], path: Path, value: Any) -> None:
    for key in path[:-1]:
        if not isinstance(obj.get(key), dict):
            obj[key] = {}
        obj = obj[key]
    obj[path[-1]] = copy.deepcopy(value)


def _delete(obj: dict[str, Any], path: Path) -> None:
    parents = []
    for key in path[:-1]:
        if not isinstance(obj.get(key), dict):
            return
        parents.append((obj, key))
        obj = obj[key]
    obj.pop(path[-1], None)
    for parent, key in reversed(parents):
        if parent[key]:
            break
        del parent[key]


@dataclass
class _Stored:
    obj: dict[str, Any]
    owners: dict[str, set[Path]] = field(default_factory=dict)
    operations: dict[str, str] = field(default_factory=dict)
    rollout_generation: int = 0
    rollout_reads: int = 0


class FakeKubeAPI:
    """The fake's state and its HTTP server; use :meth:`running` as a context manager.

    Attributes:
        namespaces: the namespaces that exist (others answer 404 like a real cluster).
        rollout_polls: reads of a Deployment after a spec change until its rollout is complete.
        pod_failure: returns why a Deployment's pods never get ready (e.g. ``ImagePullBackOff``),
            or None when they do.
        deadline_exceeded: returns True for a Deployment the controller should mark
            ``ProgressDeadlineExceeded``.
        deny: plurals whose writes answer 403 Forbidden.
        hidden: plurals the server does not serve at all (absent from discovery, 404 on their URLs).
        read_error: given a plural and the number of this GET of one of its objects (1-based),
            returns an HTTP status to answer instead (a transient 503, say), or None.
        requests: every request as (method, path, query dict, content type).
    """

    def __init__(self, namespaces: tuple[str, ...] = ("ltp-demo", "ltp-staging", "ltp-prod")):
        self.namespaces = set(namespaces)
        self.rollout_polls = 2
        self.pod_failure: Callable[[dict[str, Any]], Optional[str]] = lambda deployment: None
        self.deadline_exceeded: Callable[[dict[str, Any]], bool] = lambda deployment: False
        self.deny: set[str] = set()
        self.hidden: set[str] = set()
        self.read_error: Callable[[str, int], Optional[int]] = lambda plural, nth_read: None
        self._pods_stored: dict[str, list[dict[str, Any]]] = {}
        self._reads: dict[str, int] = {}
        self.requests: list[tuple[str, str, dict[str, list[str]], str]] = []
        self._store: dict[tuple[str, str, str], _Stored] = {}
        self._resource_version = 100
        self._lock = threading.RLock()
        self.url = ""
        self.kinds: dict[str, tuple[str, str]] = dict(KINDS)
        self.cluster_objects: dict[str, list[dict[str, Any]]] = {plural: [] for plural in CLUSTER_KINDS}
        self.deny_reads: set[str] = set()
        self.controllers: dict[str, Callable[[dict[str, Any]], Optional[dict[str, Any]]]] = {}

    # ---- inspection helpers for tests

    def add_kind(self, plural: str, api_version: str, kind: str) -> None:
        """Serves one more namespaced kind (a custom resource, say) from now on."""
        with self._lock:
            self.kinds[plural] = (api_version, kind)

    def set_status(self, plural: str, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Replaces a stored object's status, as its controller would."""
        with self._lock:
            stored = self._store[(plural, namespace, name)]
            before = copy.deepcopy(stored.obj)
            stored.obj["status"] = copy.deepcopy(status)
            self._commit(stored, before)

    def add_cluster_objects(self, plural: str, objects: list[dict[str, Any]]) -> None:
        """Stores cluster-scoped objects (whole Node objects, say) that reads return from now on."""
        with self._lock:
            self.cluster_objects[plural].extend(copy.deepcopy(objects))

    def add_pods(self, namespace: str, pods: list[dict[str, Any]]) -> None:
        """Stores pods (whole Pod objects) that pod lists return from now on."""
        with self._lock:
            self._pods_stored.setdefault(namespace, []).extend(copy.deepcopy(pods))

    def get(self, plural: str, namespace: str, name: str) -> Optional[dict[str, Any]]:
        """Returns a copy of a stored object (with status), or None."""
        with self._lock:
            stored = self._store.get((plural, namespace, name))
            return copy.deepcopy(stored.obj) if stored else None

    def objects(self) -> list[dict[str, Any]]:
        with self._lock:
            return [copy.deepcopy(s.obj) for s in self._store.values()]

    def managers(self, plural: str, namespace: str, name: str) -> dict[str, set[Path]]:
        with self._lock:
            return copy.deepcopy(self._store[(plural, namespace, name)].owners)

    def update(self, plural: str, namespace: str, name: str, manager: str, changes: dict[str, Any]) -> None:
        """An Update by another manager (``kubectl edit``, the HPA's scale): takes the changed fields."""
        with self._lock:
            stored = self._store[(plural, namespace, name)]
            before = copy.deepcopy(stored.obj)
            for path, value in _leaves(changes).items():
                if _get(stored.obj, path) != value:
                    for paths in stored.owners.values():
                        paths.discard(path)
                _set(stored.obj, path, value)
                stored.owners.setdefault(manager, set()).add(path)
            stored.operations[manager] = "Update"
            self._commit(stored, before)

    # ---- the server

    @classmethod
    @contextlib.contextmanager
    def running(cls, **kwargs: Any) -> Iterator[FakeKubeAPI]:
        fake = cls(**kwargs)
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(fake))
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="fake-kube-api", daemon=True)
        thread.start()
        fake.url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            yield fake
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)

    # ---- API semantics

    def _next_version(self) -> str:
        self._resource_version += 1
        return str(self._resource_version)

    def _commit(self, stored: _Stored, before: Optional[dict[str, Any]]) -> bool:
        """Sets server fields after a change; returns whether anything changed."""
        obj = stored.obj
        meta = obj.setdefault("metadata", {})
        if obj.get("kind") == "Deployment":
            obj.setdefault("spec", {}).setdefault("replicas", 1)
            obj.setdefault("status", {})
        if before is not None:
            strip = lambda o: {**o, "metadata": {k: v for k, v in o["metadata"].items() if k != "managedFields"}}  # noqa: E731
            if strip(before) == strip(obj):
                stored.obj = before
                return False
            if before.get("spec") != obj.get("spec"):
                meta["generation"] = int(before["metadata"].get("generation", 1)) + 1
        else:
            meta["generation"] = 1
            meta["uid"] = hashlib.sha1(f"{meta['namespace']}/{obj['kind']}/{meta['name']}".encode()).hexdigest()
            meta["creationTimestamp"] = "2025-01-01T00:00:00Z"
        meta["resourceVersion"] = self._next_version()
        meta["managedFields"] = [
            {
                "manager": m,
                "operation": stored.operations.get(m, "Apply"),
                "apiVersion": obj["apiVersion"],
                "fieldsType": "FieldsV1",
                "fieldsV1": {},
            }
            for m, paths in sorted(stored.owners.items())
            if paths
        ]
        return True

    def _check_namespace(self, namespace: str) -> None:
        if namespace not in self.namespaces:
            raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')

    def _check_body(self, plural: str, namespace: str, name: Optional[str], body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body must be one object")
        api_version, kind = self.kinds[plural]
        if body.get("apiVersion") != api_version or body.get("kind") != kind:
            raise ApiError(
                400,
                "BadRequest",
                f"the body is {body.get('apiVersion')}/{body.get('kind')}, the URL is for {api_version}/{kind}",
            )
        meta = body.setdefault("metadata", {})
        if name is not None and meta.get("name") != name:
            raise ApiError(
                400,
                "BadRequest",
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})",
            )
        if meta.get("namespace", namespace) != namespace:
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the request",
            )
        meta["namespace"] = namespace
        if not meta.get("name"):
            raise ApiError(422, "Invalid", "metadata.name: Required value")
        return body

    def handle(
        self, method: str, path: str, query: dict[str, list[str]], content_type: str, body: bytes
    ) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests.append((method, path, query, content_type))
            if method == "GET" and path in self._discovery():
                return 200, self._discovery()[path]
            cluster = _CLUSTER_PATH.match(path)
            if cluster and cluster["plural"] in CLUSTER_KINDS:
                return self._cluster_read(method, cluster["plural"], cluster["name"], query)
            match = _PATH.match(path)
            if not match or match["plural"] not in self.kinds or match["plural"] in self.hidden:
                raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
            plural, namespace, name = match["plural"], match["ns"], match["name"]
            api_version, kind = self.kinds[plural]
            expected_prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            if not path.startswith(expected_prefix + "/"):
                raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
            self._check_namespace(namespace)
            if method != "GET" and plural in self.deny:
                raise ApiError(
                    403,
                    "Forbidden",
                    f'{plural} "{name}" is forbidden: User "system:serviceaccount:test:fake" '
                    f'cannot patch resource "{plural}" in the namespace "{namespace}"',
                )
            if method == "GET" and name is None:
                return 200, self._list(plural, namespace, query)
            if method == "GET":
                self._reads[plural] = self._reads.get(plural, 0) + 1
                injected = self.read_error(plural, self._reads[plural])
                if injected is not None:
                    raise ApiError(injected, "ServiceUnavailable", "injected by the test")
                return 200, self._read(plural, namespace, name)
            if method == "POST" and name is None:
                manager = query.get("fieldManager", ["unnamed-client"])[0]
                return 201, self._create(
                    plural, namespace, manager, self._check_body(plural, namespace, None, _parse(body))
                )
            if method == "PATCH" and name is not None:
                return self._apply(plural, namespace, name, query, content_type, body)
            if method == "DELETE" and name is not None:
                return 200, self._delete_object(plural, namespace, name)
            raise ApiError(405, "MethodNotAllowed", f"{method} {path} is not supported by the fake")

    def _cluster_read(
        self, method: str, plural: str, name: Optional[str], query: dict[str, list[str]]
    ) -> tuple[int, dict[str, Any]]:
        """GET of a cluster-scoped kind: one object, or the list (``labelSelector`` equality terms)."""
        if method != "GET":
            raise ApiError(405, "MethodNotAllowed", f"{method} on {plural}: the fake serves them read-only")
        if plural in self.deny_reads:
            raise ApiError(
                403,
                "Forbidden",
                f'{plural} is forbidden: User "fake" cannot list resource "{plural}" at the cluster scope',
            )
        api_version, kind = CLUSTER_KINDS[plural]
        items = copy.deepcopy(self.cluster_objects[plural])
        if name is not None:
            found = [o for o in items if o["metadata"]["name"] == name]
            if not found:
                raise ApiError(404, "NotFound", f'{plural} "{name}" not found')
            return 200, {"apiVersion": api_version, "kind": kind, **found[0]}
        selector = dict(term.split("=", 1) for term in query.get("labelSelector", [""])[0].split(",") if term)
        items = [o for o in items if all(o["metadata"].get("labels", {}).get(k) == v for k, v in selector.items())]
        meta = {"resourceVersion": str(self._resource_version)}
        return 200, {"apiVersion": api_version, "kind": f"{kind}List", "metadata": meta, "items": items}

    def _discovery(self) -> dict[str, dict[str, Any]]:
        """The discovery documents by path, for the kinds served (``kinds`` less ``hidden``)."""
        by_group_version: dict[str, list[dict[str, Any]]] = {}
        for plural, (api_version, kind) in self.kinds.items():
            if plural in self.hidden:
                continue
            by_group_version.setdefault(api_version, []).append(
                {
                    "name": plural,
                    "singularName": kind.lower(),
                    "namespaced": True,
                    "kind": kind,
                    "verbs": ["create", "delete", "get", "list", "patch"],
                }
            )
        for plural, (api_version, kind) in CLUSTER_KINDS.items():
            by_group_version.setdefault(api_version, []).append(
                {
                    "name": plural,
                    "singularName": kind.lower(),
                    "namespaced": False,
                    "kind": kind,
                    "verbs": ["get", "list"],
                }
            )
        documents: dict[str, dict[str, Any]] = {
            "/version": {"major": "1", "minor": "30", "gitVersion": "v1.30.0-fake", "platform": "linux/amd64"},
            "/api": {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []},
        }
        groups = []
        for api_version, resources in by_group_version.items():
            path = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            documents[path] = {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": api_version,
                "resources": resources,
            }
            if api_version != "v1":
                group, version = api_version.split("/")
                entry = {"groupVersion": api_version, "version": version}
                groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
        documents["/apis"] = {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        return documents

    def _read(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        stored = self._store.get((plural, namespace, name))
        if stored is None:
            raise ApiError(404, "NotFound", f'{plural} "{name}" not found')
        if plural == "deployments":
            self._advance_rollout(stored)
        if plural in self.controllers:
            status = self.controllers[plural](copy.deepcopy(stored.obj))
            if status is not None:
                before = copy.deepcopy(stored.obj)
                stored.obj["status"] = status
                self._commit(stored, before)
        return copy.deepcopy(stored.obj)

    def _list(self, plural: str, namespace: str, query: dict[str, list[str]]) -> dict[str, Any]:
        selector = dict(term.split("=", 1) for term in query.get("labelSelector", [""])[0].split(",") if term)
        if plural == "pods":
            items = self._pods(namespace) + copy.deepcopy(self._pods_stored.get(namespace, []))
        else:
            items = [copy.deepcopy(s.obj) for (p, ns, _), s in self._store.items() if p == plural and ns == namespace]
        items = [o for o in items if all(o["metadata"].get("labels", {}).get(k) == v for k, v in selector.items())]
        api_version, kind = self.kinds[plural]
        return {
            "apiVersion": api_version,
            "kind": f"{kind}List",
            "metadata": {"resourceVersion": str(self._resource_version)},
            "items": items,
        }

    def _delete_object(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        stored = self._store.pop((plural, namespace, name), None)
        if stored is None:
            raise ApiError(404, "NotFound", f'{plural} "{name}" not found')
        self._next_version()
        uid = stored.obj.get("metadata", {}).get("uid", "")
        details = {"name": name, "kind": plural, "uid": uid}
        return {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": details}

    def _create(self, plural: str, namespace: str, manager: str, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        if (plural, namespace, name) in self._store:
            raise ApiError(409, "AlreadyExists", f'{plural} "{name}" already exists')
        stored = _Stored(obj=copy.deepcopy(body))
        stored.obj.pop("status", None)
        stored.owners[manager] = set(_owned_leaves(stored.obj))
        stored.operations[manager] = "Update"
        self._commit(stored, None)
        self._store[(plural, namespace, name)] = stored
        return copy.deepcopy(stored.obj)

    def _apply(
        self, plural: str, namespace: str, name: str, query: dict[str, list[str]], content_type: str, raw: bytes
    ) -> tuple[int, dict[str, Any]]:
        if content_type.split(";")[0].strip() != "application/apply-patch+yaml":
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the fake implements only server-side apply (application/apply-patch+yaml), got {content_type!r}",
            )
        manager = query.get("fieldManager", [""])[0]
        if not manager:
            raise ApiError(
                422,
                "Invalid",
                'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch',
            )
        force = query.get("force", ["false"])[0].lower() in ("true", "1")
        applied = self._check_body(plural, namespace, name, _parse(raw))
        unknown = sorted(set(applied) - _TOP_LEVEL_FIELDS)
        if unknown and query.get("fieldValidation", [""])[0] == "Strict":
            raise ApiError(400, "BadRequest", f'strict decoding error: unknown field "{unknown[0]}"')
        new_leaves = _owned_leaves(applied)
        key = (plural, namespace, name)
        existing = self._store.get(key)
        stored = existing or _Stored(obj={})
        conflicts = sorted(
            (other, path)
            for other, paths in stored.owners.items()
            if other != manager
            for path in paths
            if path in new_leaves and _get(stored.obj, path) != new_leaves[path]
        )
        if conflicts and not force:
            listed = "; ".join(f'conflict with "{m}": .{".".join(p)}' for m, p in conflicts)
            raise ApiError(409, "Conflict", f"Apply failed with {len(conflicts)} conflict(s): {listed}")
        before = copy.deepcopy(stored.obj) if existing else None
        others = set().union(*(paths for m, paths in stored.owners.items() if m != manager)) if stored.owners else set()
        for path in stored.owners.get(manager, set()) - new_leaves.keys():
            if path not in others:
                _delete(stored.obj, path)
        for path, value in new_leaves.items():
            _set(stored.obj, path, value)
        for other, path in conflicts:
            stored.owners[other].discard(path)
        stored.owners[manager] = set(new_leaves)
        stored.operations[manager] = "Apply"
        self._commit(stored, before)
        self._store[key] = stored
        return (201 if existing is None else 200), copy.deepcopy(stored.obj)

    # ---- the simulated Deployment controller

    def _advance_rollout(self, stored: _Stored) -> None:
        deployment = stored.obj
        generation = deployment["metadata"]["generation"]
        if stored.rollout_generation != generation:
            stored.rollout_generation, stored.rollout_reads = generation, 0
        stored.rollout_reads += 1
        before = copy.deepcopy(deployment)
        status = deployment.setdefault("status", {})
        replicas = deployment["spec"].get("replicas", 1)
        if stored.rollout_reads == 1:
            return  # the controller has not seen the new spec yet
        status["observedGeneration"] = generation
        if self.deadline_exceeded(deployment):
            status.update(replicas=replicas, updatedReplicas=1, availableReplicas=0, readyReplicas=0)
            status["conditions"] = [
                _condition(
                    "Progressing",
                    "False",
                    "ProgressDeadlineExceeded",
                    f'ReplicaSet "{deployment["metadata"]["name"]}-{_template_hash(deployment)}" '
                    "has timed out progressing.",
                )
            ]
        elif self.pod_failure(deployment) is not None or stored.rollout_reads <= self.rollout_polls:
            status.update(
                replicas=replicas,
                updatedReplicas=replicas,
                availableReplicas=0,
                readyReplicas=0,
                unavailableReplicas=replicas,
            )
            status["conditions"] = [
                _condition(
                    "Available", "False", "MinimumReplicasUnavailable", "Deployment does not have minimum availability."
                ),
                _condition("Progressing", "True", "ReplicaSetUpdated", "ReplicaSet is progressing."),
            ]
        else:
            status.update(
                replicas=replicas, updatedReplicas=replicas, availableReplicas=replicas, readyReplicas=replicas
            )
            status.pop("unavailableReplicas", None)
            status["conditions"] = [
                _condition("Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability."),
                _condition("Progressing", "True", "NewReplicaSetAvailable", "ReplicaSet has successfully progressed."),
            ]
        if before != deployment:
            deployment["metadata"]["resourceVersion"] = self._next_version()

    def _pods(self, namespace: str) -> list[dict[str, Any]]:
        pods = []
        for (plural, ns, _), stored in self._store.items():
            if plural != "deployments" or ns != namespace:
                continue
            deployment = stored.obj
            template = deployment["spec"]["template"]
            failure = self.pod_failure(deployment)
            available = deployment.get("status", {}).get("availableReplicas", 0)
            for i in range(deployment["spec"].get("replicas", 1)):
                ready = failure is None and i < available
                waiting = {
                    "waiting": {
                        "reason": failure or "ContainerCreating",
                        "message": f"simulated: {failure or 'starting'}",
                    }
                }
                pods.append(
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {
                            "name": f"{deployment['metadata']['name']}-{_template_hash(deployment)}-{i}",
                            "namespace": ns,
                            "labels": dict(template["metadata"].get("labels", {})),
                        },
                        "spec": {
                            "containers": [
                                {"name": c["name"], "image": c.get("image")} for c in template["spec"]["containers"]
                            ]
                        },
                        "status": {
                            "phase": "Running" if ready else "Pending",
                            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                            "containerStatuses": [
                                {
                                    "name": c["name"],
                                    "image": c.get("image", ""),
                                    "imageID": "",
                                    "ready": ready,
                                    "restartCount": 0 if ready else 3,
                                    "state": {"running": {}} if ready else waiting,
                                }
                                for c in template["spec"]["containers"]
                            ],
                        },
                    }
                )
        return pods


def _condition(kind: str, status: str, reason: str, message: str) -> dict[str, str]:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastUpdateTime": "2025-01-01T00:00:00Z",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    }


def _template_hash(deployment: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(deployment["spec"]["template"], sort_keys=True).encode()).hexdigest()[:10]


def _parse(raw: bytes) -> Any:
    try:
        return yaml.safe_load(raw.decode() or "null")  # JSON is YAML
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ApiError(400, "BadRequest", f"cannot parse the body: {err}") from err


def _handler_for(fake: FakeKubeAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in separate writes: without this, delayed ACKs add ~40 ms each.
        disable_nagle_algorithm = True

        def _serve(self) -> None:
            url = urlsplit(self.path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                code, payload = fake.handle(
                    self.command, url.path, parse_qs(url.query), self.headers.get("Content-Type", ""), body
                )
            except ApiError as err:
                code = err.code
                payload = {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": err.message,
                    "reason": err.reason,
                    "code": err.code,
                }
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            pass

    return Handler


@dataclass
class _Revision:
    name: str
    template: str
    ready: bool
    message: str = ""


class FakeKServe:
    """KServe's InferenceService controller, as far as the kserve target reads it.

    ``install(fake)`` serves the InferenceService kind on ``fake`` and reconciles each object when
    it is read: a changed predictor (other than ``canaryTrafficPercent``) is a new revision
    ``<name>-predictor-0000N``; a ready new revision takes ``canaryTrafficPercent`` of the traffic
    when that is set and an earlier revision was ready, else all of it; the status has
    ``observedGeneration``, ``deploymentMode``, the conditions ``Ready``, ``PredictorReady`` and
    ``LatestDeploymentReady``, ``components.predictor`` (latest created and ready revisions,
    ``traffic`` with tags ``latest`` and ``prev`` and their URLs), ``url`` and ``address.url``.

    Attributes:
        mode: the ``status.deploymentMode`` the cluster reports (``Knative``, ``Standard``, ...).
        never_ready: returns True for an InferenceService whose new revision never gets ready, or
            the reason to report (a ``FailedCreate`` of its pods, say) in ``LatestDeploymentReady``.
        load_failure: returns the storage initializer's message for one whose model cannot be
            loaded (``Ready`` False, ``modelStatus.transitionStatus: BlockedByFailedLoad``), or None.
        url_of: (name, namespace, tag or None) -> the URL the status gives.
    """

    def __init__(self, mode: str = "Knative"):
        self.mode = mode
        self.never_ready: Callable[[dict[str, Any]], bool | str] = lambda obj: False
        self.load_failure: Callable[[dict[str, Any]], Optional[str]] = lambda obj: None
        self.url_of: Callable[[str, str, Optional[str]], str] = lambda name, ns, tag: (
            f"http://{tag + '-' if tag else ''}{name}-predictor.{ns}.example.com"
        )
        self.revisions: dict[tuple[str, str], list[_Revision]] = {}

    def install(self, fake: FakeKubeAPI) -> FakeKServe:
        fake.add_kind("inferenceservices", "serving.kserve.io/v1beta1", "InferenceService")
        fake.controllers["inferenceservices"] = self.reconcile
        return self

    def reconcile(self, obj: dict[str, Any]) -> Optional[dict[str, Any]]:
        meta = obj["metadata"]
        if (obj.get("status") or {}).get("observedGeneration") == meta.get("generation"):
            return None
        name, ns = meta["name"], meta["namespace"]
        predictor = {k: v for k, v in obj["spec"]["predictor"].items() if k != "canaryTrafficPercent"}
        template = json.dumps(predictor, sort_keys=True)
        revisions = self.revisions.setdefault((ns, name), [])
        failure = self.load_failure(obj)
        if not revisions or revisions[-1].template != template:
            stuck = self.never_ready(obj)
            ready = failure is None and not stuck
            message = stuck if isinstance(stuck, str) else ""
            revisions.append(_Revision(f"{name}-predictor-{len(revisions) + 1:05d}", template, ready, message))
        return self._status(obj, revisions, failure)

    def _status(self, obj: dict[str, Any], revisions: list[_Revision], failure: Optional[str]) -> dict[str, Any]:
        meta = obj["metadata"]
        name, ns = meta["name"], meta["namespace"]
        latest = revisions[-1]
        ready = [r for r in revisions if r.ready]
        prev = next((r for r in reversed(ready) if r is not latest), None)
        percent = obj["spec"]["predictor"].get("canaryTrafficPercent")
        if not latest.ready:
            traffic = [{"revisionName": prev.name, "percent": 100, "latestRevision": False}] if prev else []
        elif percent is not None and prev is not None and percent < 100:
            traffic = [
                {"tag": "latest", "revisionName": latest.name, "percent": percent, "latestRevision": True},
                {"tag": "prev", "revisionName": prev.name, "percent": 100 - percent, "latestRevision": False},
            ]
        else:
            traffic = [{"tag": "latest", "revisionName": latest.name, "percent": 100, "latestRevision": True}]
        for entry in traffic:
            entry["url"] = self.url_of(name, ns, entry.get("tag"))
        serving = bool(traffic)
        conditions = [
            _condition("Ready", "True" if serving and failure is None else "False", "", failure or ""),
            _condition("PredictorReady", "True" if serving else "False", "", ""),
            _condition("LatestDeploymentReady", "True" if latest.ready else "False", "RevisionFailed", latest.message),
        ]
        status: dict[str, Any] = {
            "observedGeneration": meta.get("generation"),
            "deploymentMode": self.mode,
            "conditions": conditions,
            "url": self.url_of(name, ns, None),
            "address": {"url": self.url_of(name, ns, None)},
            "components": {
                "predictor": {
                    "latestCreatedRevision": latest.name,
                    "latestReadyRevision": ready[-1].name if ready else None,
                    "traffic": traffic,
                }
            },
        }
        if failure is not None:
            status["modelStatus"] = {
                "transitionStatus": "BlockedByFailedLoad",
                "lastFailureInfo": {"reason": "ModelLoadFailed", "message": failure},
            }
        return status
