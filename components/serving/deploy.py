"""Serving stages on Kubernetes: render, pin the model version, server-side apply, wait, roll back.

A stage is the kustomize overlay ``manifests/serving/overlays/<stage>`` (TensorFlow Serving, its
Service, ServiceAccount, model config and, in prod, an HPA and a PDB). Deploying a model version:

1. ``kubectl kustomize`` renders the overlay into objects (:func:`render_stage`).
2. :func:`configure_stage` writes TensorFlow Serving's model config list for this deploy: one
   ``config`` per model the stage serves (its registry, ``stages.served_models``, with the model
   being deployed at its new version), each with its name, ``base_path`` =
   ``<stages_root>/<stage>/models/<model_name>`` and a version policy that pins one version
   (``model_version_policy { specific { versions: N } }``). Deploying or rolling back one model
   keeps the others at the versions they are served at. The ConfigMap's name carries a hash of
   its content, so a new version means a new pod template (a rollout), and a rollback re-creates
   the old template exactly (the Deployment reuses the old ReplicaSet).
3. :func:`components.kube.apply_objects` server-side applies every object with the field manager
   ``lean-tpu-pipelines``, forcing conflicts: the pipeline is the source of truth for the fields
   it applies, and an HPA keeps the replica count it owns (prod's manifest leaves it out).
4. :func:`components.kube.wait_for_rollout` polls the Deployment as ``kubectl rollout status`` does
   (observedGeneration, updatedReplicas, replicas, availableReplicas) and raises
   :class:`RolloutTimeout` with the pods' reasons when it does not finish in time.

:func:`deploy_stage` and :func:`rollback_stage` are what the ``kubernetes`` serving target calls
(``components.serving.targets.kubernetes``). Tested against a
fake API server only (tests/integration/fake_kube_api.py); see docs/kubernetes.md.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from kubernetes import client as k8s_client

from components.kube import (
    FIELD_MANAGER,
    KubeDeployError,
    RolloutTimeout,
    apply_objects,
    load_api_client,
    render_kustomize,
    wait_for_rollout,
)
from components.serving.stages import model_base_path, served_models

__all__ = ["FIELD_MANAGER", "KubeDeployError", "RolloutTimeout", "deploy_stage", "render_stage", "rollback_stage"]

log = logging.getLogger(__name__)


MODEL_CONFIG_NAME = "model-server-config"
"""The ConfigMap holding TensorFlow Serving's model config (a content hash is appended)."""
MODEL_CONFIG_VOLUME = "model-config"
MODEL_CONFIG_KEY = "models.config"
HTTP_PORT_NAME = "http"
# Stage and model names: they become paths and URL parts.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")

VERSIONS_ANNOTATION = "lean-tpu-pipelines.dev/model-versions"
"""The served models and versions, ``classifier=3,detector=1`` (on the Deployment and its pod template)."""
MODEL_PATH_ANNOTATION = "lean-tpu-pipelines.dev/models-path"
"""The stage's models folder, ``<stages_root>/<stage>/models``."""
CHANGE_CAUSE_ANNOTATION = "kubernetes.io/change-cause"


# The namespaced kinds the serving overlays render, with their REST paths, in the order they are
# applied: what a Deployment refers to (ServiceAccount, ConfigMap) exists before it.
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
    return render_kustomize(overlay)


# ---------------------------------------------------------------------------------------------
# Configuring the rendered objects for one model version

_TEXT_PROTO_UNSAFE = re.compile(r'["\\\n\r]')


def check_gcs_root(stages_root: str) -> None:
    """The pods read the models from GCS: ``stages_root`` must be ``gs://<bucket>[/<prefix>]``.

    Raises:
        ValueError: it is not.
    """
    if not stages_root.startswith("gs://") or len(stages_root.rstrip("/")) <= len("gs://"):
        raise ValueError(
            "the kubernetes target serves models from GCS so that TensorFlow Serving in the cluster can load them: "
            f"stages_root must be gs://<bucket>[/<prefix>]; got {stages_root!r}. Use target=local for a folder."
        )


def model_config_text(models: Sequence[tuple[str, str, int]]) -> str:
    """Returns TensorFlow Serving's ModelServerConfig (text proto) serving each model at exactly one version.

    TensorFlow Serving loads the newest version under a ``base_path`` by default; the
    ``specific`` version policy pins one, which is what a rollback needs.

    Args:
        models: ``(name, base_path, version)`` of each model, written in this order.

    Raises:
        ValueError: no model, a name given twice, a value that would break the text proto, or a
            version that is not an int >= 0.
    """
    if not models:
        raise ValueError("a model config needs at least one model: (name, base_path, version)")
    names = [name for name, _, _ in models]
    if len(set(names)) != len(names):
        raise ValueError(f"each model name may appear once in a model config, got {names}")
    configs = []
    for model_name, base_path, version in models:
        if not _NAME.fullmatch(model_name):
            raise ValueError(f"model_name must be letters, digits, '-' and '_', got {model_name!r}")
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ValueError(f"version must be an int >= 0 (a folder name under {base_path}), got {version!r}")
        if _TEXT_PROTO_UNSAFE.search(base_path):
            raise ValueError(f"base_path must have no quotes, backslashes or newlines, got {base_path!r}")
        configs.append(
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
        )
    return "model_config_list {\n" + "".join(configs) + "}\n"


def parse_versions_annotation(text: str) -> dict[str, int]:
    """The inverse of the :data:`VERSIONS_ANNOTATION` value: ``{"classifier": 3, "detector": 1}``."""
    pairs = (item.split("=", 1) for item in text.split(",") if item)
    return {name: int(version) for name, version in pairs}


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
    others: Optional[Mapping[str, int]] = None,
) -> list[dict[str, Any]]:
    """Returns copies of a stage's rendered objects set up to serve a model version next to the others.

    Replaces the model config with the list of every served model (name, base path, pinned
    version; sorted by name) and names its ConfigMap by a content hash, points the Deployment at
    it, points the probes at ``/v1/models/<first model by name>`` (TensorFlow Serving opens its
    REST port once every configured model is loaded, so one model's status stands for all) and
    annotates the Deployment with the versions. The result depends only on the models and
    versions (no timestamps, not which model was deployed last), so the same set always yields
    the same pod template.

    Args:
        objects: the output of :func:`render_stage`.
        stage: the stage's name (used in the model path and messages).
        stages_root: ``gs://bucket/prefix`` holding ``<stage>/models/<model_name>/<version>``.
        model_name: the name the model deployed is served under.
        version: its version to serve.
        change_cause: recorded in the Deployment's ``kubernetes.io/change-cause`` annotation.
        others: the stage's other models, name -> the version they keep being served at; an entry
            for ``model_name`` is overridden by ``version``.

    Raises:
        KubeDeployError: the rendered objects lack what the serving overlays always have.
        ValueError: a bad stages_root, model name or version.
    """
    check_gcs_root(stages_root)
    versions = dict(sorted({**(others or {}), model_name: version}.items()))
    text = model_config_text([(name, model_base_path(stages_root, stage, name), v) for name, v in versions.items()])
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

    probe_path = f"/v1/models/{next(iter(versions))}"
    for container in pod_spec["containers"]:
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            http_get = container.get(probe, {}).get("httpGet")
            if http_get and str(http_get.get("path", "")).startswith("/v1/models/"):
                http_get["path"] = probe_path

    served = ",".join(f"{name}={v}" for name, v in versions.items())
    template_meta = deployment["spec"]["template"].setdefault("metadata", {})
    template_meta.setdefault("annotations", {})[VERSIONS_ANNOTATION] = served
    annotations = deployment["metadata"].setdefault("annotations", {})
    annotations[VERSIONS_ANNOTATION] = served
    annotations[MODEL_PATH_ANNOTATION] = model_base_path(stages_root, stage, model_name).rsplit("/", 1)[0]
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


def stage_versions(stages_root: str, stage: str) -> dict[str, int]:
    """Returns what a stage serves by its registry: model name -> version (``stages.served_models``)."""
    return {name: entry.version for name, entry in served_models(stages_root, stage).items()}


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
    others: Optional[Mapping[str, int]],
) -> str:
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
    if others is None:
        others = stage_versions(stages_root, stage)
    objects = configure_stage(
        render_stage(stage, manifests_dir),
        stage=stage,
        stages_root=stages_root,
        model_name=model_name,
        version=version,
        change_cause=change_cause,
        others=others,
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
    others: Optional[Mapping[str, int]] = None,
) -> str:
    """Deploys a published model version to a stage and waits for the rollout.

    Renders ``manifests/serving/overlays/<stage>``, pins TensorFlow Serving to
    ``<stages_root>/<stage>/models/<model_name>/<version>`` next to the stage's other models (at
    the versions its registry records), server-side applies every object and waits until the
    Deployment is rolled out. Re-deploying the version a stage already serves changes nothing
    (every apply is a no-op) and returns at once.

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
        others: the stage's other models and their versions; None reads them from the stage
            registry under ``stages_root`` (:func:`stage_versions`).

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
        others=others,
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
    others: Optional[Mapping[str, int]] = None,
) -> str:
    """Returns a stage to an earlier model version and waits for that rollout.

    Re-applies the spec that version was deployed with; the stage's other models keep their
    versions. When they are those of then, the pod template is identical to the one deployed then
    (same content-hashed model config, same annotations), so the Deployment controller scales the
    old ReplicaSet back up instead of starting a new one. The version's files must still be under
    ``<stages_root>/<stage>/models/<model_name>/<version>``.

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
        others: as for :func:`deploy_stage`.

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
        others=others,
    )
