"""Target ``kubernetes``: the stage's kustomize overlay, one TensorFlow Serving Deployment per stage.

A stage is the overlay ``manifests/serving/overlays/<stage>`` (TensorFlow Serving, its Service,
ServiceAccount, model config and, in prod, an HPA and a PDB). Serving a stage's models (a
promotion) and serving them again at earlier versions (a rollback) are the same roll-out:

1. ``kubectl kustomize`` renders the overlay into objects (:func:`render_stage`).
2. :func:`configure_stage` writes TensorFlow Serving's model config list: one ``config`` per model
   the stage is to serve, each with its name, ``base_path`` = ``<stages_root>/<stage>/models/<name>``
   and a version policy that pins one version (``model_version_policy { specific { versions: N }
   }``). Rolling out one model keeps the others at the versions they are served at. The
   ConfigMap's name carries a hash of its content, so a new version means a new pod template (a
   rollout), and a rollback re-creates the old template exactly (the Deployment reuses the old
   ReplicaSet).
3. :func:`components.kube.apply_objects` server-side applies every object with the field manager
   ``lean-tpu-pipelines``, forcing conflicts: the pipeline is the source of truth for the fields
   it applies, and an HPA keeps the replica count it owns (prod's manifest leaves it out).
4. :func:`components.kube.wait_for_rollout` polls the Deployment as ``kubectl rollout status`` does
   and raises :class:`~components.kube.RolloutTimeout` with the pods' reasons when it does not
   finish in time.

Tested against a fake API server only (tests/integration/fake_kube_api.py); see docs/kubernetes.md.
The Kubernetes client (``components.kube``) is imported inside the functions that use it, so
listing the targets stays cheap.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import hashlib
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from components.serving.targets.base import Endpoints, ServingTarget, register
from trainer.configbase import ConfigBase

if TYPE_CHECKING:
    from components.serving.stages import StageRegistry
    from components.serving.targets.base import TargetSettings

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


def default_manifests_dir() -> Path:
    """Returns the ``manifests/serving`` folder of this project.

    It is looked up next to the source tree (an editable install or a checkout) and under the
    working directory (the project image's WORKDIR).

    Raises:
        components.kube.KubeDeployError: neither place has ``manifests/serving/overlays``.
    """
    from components import kube

    candidates = [
        Path(__file__).resolve().parents[3] / "manifests" / "serving",
        Path.cwd() / "manifests" / "serving",
    ]
    for candidate in candidates:
        if (candidate / "overlays").is_dir():
            return candidate
    raise kube.KubeDeployError(
        "cannot find the serving manifests: expected manifests/serving/overlays in one of "
        f"{[str(c) for c in candidates]}. Set serving_options.manifests_dir, or ship manifests/ with the "
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
        components.kube.KubeDeployError: the stage has no overlay, or kustomize failed (its message is included).
    """
    from components import kube

    if not _NAME.fullmatch(stage):
        raise kube.KubeDeployError(f"stage must be an overlay's folder name (letters, digits, '-'), got {stage!r}")
    root = Path(manifests_dir) if manifests_dir is not None else default_manifests_dir()
    overlay = root / "overlays" / stage
    if not (overlay / "kustomization.yaml").is_file():
        raise kube.KubeDeployError(
            f"no overlay for stage {stage!r}: expected {overlay}/kustomization.yaml; "
            f"stages with an overlay: {available_stages(root)}"
        )
    return kube.render_kustomize(overlay)


# ---------------------------------------------------------------------------------------------
# Configuring the rendered objects for the models a stage serves

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
    """The one object of ``kind`` among ``objects``; anything else is an error naming what was rendered."""
    from components import kube

    found = [o for o in objects if o.get("kind") == kind]
    if len(found) != 1:
        raise kube.KubeDeployError(
            f"the {stage!r} overlay must render exactly one {kind}, it rendered {len(found)}: "
            f"{[o.get('metadata', {}).get('name') for o in found]}"
        )
    return found[0]


def configure_stage(
    objects: Sequence[dict[str, Any]],
    *,
    stage: str,
    stages: StageRegistry,
    models: Mapping[str, int],
    change_cause: str,
) -> list[dict[str, Any]]:
    """Returns copies of a stage's rendered objects set up to serve ``models`` at their versions.

    Replaces the model config with the list of every model (name, base path, pinned version;
    sorted by name) and names its ConfigMap by a content hash, points the Deployment at it, points
    the probes at ``/v1/models/<first model by name>`` (TensorFlow Serving opens its REST port once
    every configured model is loaded, so one model's status stands for all) and annotates the
    Deployment with the versions. The result depends only on the models and versions (no
    timestamps, not which model changed), so the same set always yields the same pod template.

    Args:
        objects: the output of :func:`render_stage`.
        stage: the stage's name (used in the model paths and messages).
        stages: the stage registry (on ``gs://bucket/prefix``) holding ``<stage>/models/<name>/<version>``.
        models: every model the stage is to serve, name -> version.
        change_cause: recorded in the Deployment's ``kubernetes.io/change-cause`` annotation.

    Raises:
        components.kube.KubeDeployError: the rendered objects lack what the serving overlays always have.
        ValueError: a registry not on GCS, no model, a bad model name or version.
    """
    check_gcs_root(stages.root)
    versions = dict(sorted(models.items()))
    text = model_config_text([(name, stages.model_base_path(stage, name), v) for name, v in versions.items()])
    out = copy.deepcopy(list(objects))
    deployment = _one(out, "Deployment", stage)
    pod_spec = deployment["spec"]["template"]["spec"]
    _pin_model_config(out, pod_spec, stage, text)
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
    annotations[MODEL_PATH_ANNOTATION] = stages.models_dir(stage)
    annotations[CHANGE_CAUSE_ANNOTATION] = change_cause
    return out


def _pin_model_config(objects: list[dict[str, Any]], pod_spec: dict[str, Any], stage: str, text: str) -> None:
    """Puts ``text`` in the model config ConfigMap (renamed by its content hash) and points the volume at it.

    Raises:
        components.kube.KubeDeployError: the pod has no model config volume, or its ConfigMap is not rendered.
    """
    from components import kube

    volume = next((v for v in pod_spec.get("volumes", []) if v.get("name") == MODEL_CONFIG_VOLUME), None)
    if volume is None or "configMap" not in volume:
        raise kube.KubeDeployError(
            f"the {stage!r} Deployment has no configMap volume named {MODEL_CONFIG_VOLUME!r} "
            "(manifests/serving/base/deployment.yaml defines it); cannot set the model version"
        )
    old_name = volume["configMap"]["name"]
    config_maps = [o for o in objects if o.get("kind") == "ConfigMap" and o["metadata"]["name"] == old_name]
    if len(config_maps) != 1 or not old_name.startswith(MODEL_CONFIG_NAME):
        raise kube.KubeDeployError(
            f"the {stage!r} Deployment mounts ConfigMap {old_name!r}, expected one rendered "
            f"ConfigMap generated as {MODEL_CONFIG_NAME!r} (manifests/serving/base/kustomization.yaml)"
        )
    new_name = f"{MODEL_CONFIG_NAME}-{hashlib.sha256(text.encode()).hexdigest()[:10]}"
    config_maps[0]["metadata"]["name"] = new_name
    config_maps[0]["data"] = {MODEL_CONFIG_KEY: text}
    volume["configMap"]["name"] = new_name


def service_url(objects: Sequence[dict[str, Any]], cluster_domain: str = "cluster.local") -> str:
    """Returns the in-cluster base URL of the stage's Service REST port.

    Example: ``http://model-server.ltp-demo.svc.cluster.local:8501``.
    """
    from components import kube

    service = _one(objects, "Service", "rendered")
    ports = [p for p in service["spec"]["ports"] if p.get("name") == HTTP_PORT_NAME]
    if not ports:
        raise kube.KubeDeployError(
            f"Service {service['metadata']['name']!r} has no port named {HTTP_PORT_NAME!r} "
            "(TensorFlow Serving's REST port, 8501)"
        )
    meta = service["metadata"]
    return f"http://{meta['name']}.{meta['namespace']}.svc.{cluster_domain}:{ports[0]['port']}"


@dataclasses.dataclass(frozen=True)
class ClusterOptions(ConfigBase):
    """The settings of a target that applies a stage's objects to a cluster (``serving_options``).

    Attributes:
        manifests_dir: the folder of the target's overlays (``manifests/serving`` for
            kubernetes, ``manifests/kserve`` for kserve); None finds the project's.
        poll_interval_s: the pause between two reads of a rollout's status.
        cluster_domain: the cluster's DNS domain, for the URLs the target names.
    """

    _section: ClassVar[str] = "serving_options."

    manifests_dir: Optional[str] = None
    poll_interval_s: float = 2.0
    cluster_domain: str = "cluster.local"

    def validate(self) -> None:
        if self.poll_interval_s <= 0:
            self._fail("poll_interval_s", f"must be > 0 seconds, got {self.poll_interval_s}")
        if not self.cluster_domain:
            self._fail("cluster_domain", "is empty; give the cluster's DNS domain, e.g. cluster.local")


@register
class KubernetesTarget(ServingTarget):
    """Serves a stage as the Deployment of ``manifests/serving/overlays/<stage>``, models read from GCS.

    Args:
        stages: the stage registry (on GCS: the pods read the models from it).
        options: the target's own settings (:class:`ClusterOptions`).
        settings: the generic settings (the target has no canary steps).
        api_client: a configured ``kubernetes.client.ApiClient``; None loads the in-cluster
            configuration, else the kubeconfig, at each rollout.
    """

    name = "kubernetes"
    load_profile = "cluster"
    options_type = ClusterOptions

    def __init__(
        self,
        stages: StageRegistry,
        options: Mapping[str, Any] | ConfigBase | None = None,
        settings: Optional[TargetSettings] = None,
        *,
        api_client: Optional[Any] = None,
    ) -> None:
        super().__init__(stages, options, settings)
        self.api_client = api_client

    def check(self) -> None:
        """The pods load the models from GCS: the registry's root must be ``gs://bucket[/prefix]``.

        Raises:
            ValueError: it is not.
        """
        check_gcs_root(self.stages.root)

    def serve(self, stage: str, models: Mapping[str, int], changed: str, timeout_s: float) -> None:
        """Apply the stage's objects with ``models`` pinned and wait for the rollout.

        Re-serving what the stage already serves changes nothing (every apply is a no-op).

        Raises:
            components.kube.RolloutTimeout: the rollout did not finish in ``timeout_s``.
            components.kube.KubeDeployError: rendering or applying failed.
        """
        self._roll_out(stage, models, f"deploy {changed} version {models[changed]}", timeout_s)

    def restore(self, stage: str, models: Mapping[str, int], changed: str, timeout_s: float) -> None:
        """Re-apply the stage's objects with ``models`` pinned (the old pod template) and wait.

        When they are the versions of before, the pod template is the one deployed then (same
        content-hashed model config, same annotations), so the Deployment scales the old ReplicaSet
        back up. When ``models`` is empty (the first version of the stage's only model failed)
        nothing is applied: the failed version was retired from the model path.

        Raises:
            components.kube.RolloutTimeout: the rollback itself did not finish (the stage needs a human).
        """
        if not models:
            log.warning("%s had no earlier version; the failed version was retired from the model path", stage)
            return
        name = changed if changed in models else next(iter(sorted(models)))
        self._roll_out(stage, models, f"roll back {name} to version {models[name]}", timeout_s)

    def _roll_out(self, stage: str, models: Mapping[str, int], action: str, timeout_s: float) -> None:
        """Applies the stage's objects serving ``models`` (``action`` is the change cause) and waits.

        Raises:
            ValueError: ``timeout_s`` is not positive, or a bad model name or version.
            components.kube.RolloutTimeout: the rollout did not finish in ``timeout_s``.
            components.kube.KubeDeployError: rendering or applying failed (the message says how to fix it).
        """
        from components import kube

        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
        change_cause = f"lean-tpu-pipelines: {action}"
        rendered = render_stage(stage, self.options.manifests_dir)
        objects = configure_stage(rendered, stage=stage, stages=self.stages, models=models, change_cause=change_cause)
        deployment = _one(objects, "Deployment", stage)["metadata"]
        own_client = self.api_client is None
        api = kube.load_api_client() if own_client else self.api_client
        try:
            log.info("%s: %s (%s)", stage, change_cause, self.stages.models_dir(stage))
            kube.apply_objects(api, objects)
            namespace, name = deployment["namespace"], deployment["name"]
            kube.wait_for_rollout(api, namespace, name, timeout_s, poll_interval_s=self.options.poll_interval_s)
        finally:
            if own_client:
                api.close()

    @contextlib.contextmanager
    def endpoints(self, stage: str, models: Mapping[str, int]) -> Iterator[Endpoints]:
        """Every model answers at the stage's Service (its in-cluster DNS name and REST port)."""
        url = service_url(render_stage(stage, self.options.manifests_dir), self.options.cluster_domain)
        yield Endpoints(urls={name: url for name in models})
