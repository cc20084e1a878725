"""Target ``kserve``: one KServe InferenceService per served model, canary rollouts, rollback.

The objects come from ``manifests/kserve/overlays/<stage>`` (rendered with ``kubectl kustomize``):
its InferenceService named ``model`` is the template each served model's InferenceService is
copied from (name, ``storageUri``, version), next to TensorFlow Serving's monitoring ConfigMap, the
serving account and a PodMonitor. They are rendered as plain dicts: the ``kserve`` package
imports its model server and drops unknown keys, so it is used nowhere.

KServe facts this relies on (docs/kserve.md): ``modelFormat: tensorflow`` selects the
``kserve-tensorflow-serving`` runtime (TensorFlow Serving, REST on 8080, the v1 protocol);
``predictor.model.args`` are appended to the runtime's; ``status.deploymentMode`` says the mode;
in Knative mode ``predictor.canaryTrafficPercent`` splits traffic between the last ready revision
and the new one, and tag routing gives the new one a URL of its own; Standard mode ignores
``canaryTrafficPercent``, so it is refused there and a new version replaces the old at once.

A version promoted in a portable format (``PromoteConfig.serving_format``: its folder holds
``portable/serving.json``, and the promotion notes its form in :attr:`ServingTarget.forms`) is
served from ``manifests/kserve/portable/<stage>``: the same
InferenceService with the project's own model server as the predictor's container (the same REST
contract and metrics; the storage initializer copies ``STORAGE_URI`` to ``/mnt/models``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import re
import time
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from components.serving.targets.base import Endpoints, ServingTarget, StageUnavailable, register
from components.serving.targets.kubernetes import ClusterOptions, check_gcs_root, render_stage
from trainer.configbase import ConfigBase
from trainer.export.formats import FORMATS, SERVED

if TYPE_CHECKING:
    from components.serving.stages import StageRegistry
    from components.serving.targets.base import TargetSettings

log = logging.getLogger(__name__)

API_VERSION = "serving.kserve.io/v1beta1"
KIND = "InferenceService"
PODMONITOR = ("monitoring.coreos.com/v1", "PodMonitor")
TEMPLATE_NAME = "model"
"""The name of the overlay's template InferenceService, copied once per served model."""
MODES = {"knative": ("Knative", "Serverless"), "standard": ("Standard", "RawDeployment")}
"""``serving_options.mode`` -> the ``status.deploymentMode`` values that mean it (today's name first, then the
legacy one)."""
DEFAULT_CANARY_STEPS = (10, 50, 100)
VERSION_ENV = "LTP_MODEL_VERSION"
STORAGE_ENV = "STORAGE_URI"
PORTABLE_DIR = "portable"
"""``manifests/kserve/portable/<stage>``: the overlays whose predictor runs the project's model server."""
_DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_FAILED_LOAD = "BlockedByFailedLoad"


def check_name(name: str) -> None:
    """An InferenceService's name must be a DNS-1035 label: the served model name is used as it.

    Raises:
        ValueError: it is not; the message suggests one that is.
    """
    if len(name) <= 63 and _DNS_1035.fullmatch(name):
        return
    fixed = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    fixed = re.sub(r"^[^a-z]+", "", fixed)[:63].rstrip("-") or "model"
    raise ValueError(
        f"served model name {name!r} cannot name a KServe InferenceService: it must be a DNS-1035 label "
        f"(lower-case letters, digits and '-', starting with a letter, at most 63 characters). Fix: serve it "
        f"as {fixed!r} (served_model_name / PromoteConfig.model_name)."
    )


def default_manifests_dir() -> Path:
    """The ``manifests/kserve`` folder (next to the source tree, else under the working directory).

    Raises:
        components.kube.KubeDeployError: neither place has ``manifests/kserve/overlays``.
    """
    from components.kube import KubeDeployError

    candidates = [Path(__file__).resolve().parents[3] / "manifests" / "kserve", Path.cwd() / "manifests" / "kserve"]
    for candidate in candidates:
        if (candidate / "overlays").is_dir():
            return candidate
    raise KubeDeployError(f"no manifests/kserve/overlays folder in {[str(c) for c in candidates]}")


def render_inference_service(
    template: Mapping[str, Any],
    name: str,
    storage_uri: str,
    version: int,
    mode: str,
    canary_percent: Optional[int] = None,
) -> dict[str, Any]:
    """One model's InferenceService, copied from the overlay's template.

    Args:
        template: the overlay's InferenceService (namespace, size, args, volumes).
        name: the served model name (the InferenceService's name, TensorFlow Serving's model name).
        storage_uri: the model's base path, version folders inside.
        version: the version to serve; set as an environment variable so that each version is a
            new pod template (a new revision), the newest version folder being what TF Serving serves.
        mode: ``knative`` or ``standard``.
        canary_percent: the new revision's share of traffic (Knative only); None: all of it.

    Raises:
        ValueError: a name that is not a DNS-1035 label, an unknown mode, or a canary share in
            Standard mode (which would ignore it silently).
    """
    check_name(name)
    if mode not in MODES:
        raise ValueError(f"the KServe mode must be one of {sorted(MODES)}, got {mode!r}")
    if canary_percent is not None and mode != "knative":
        raise ValueError(
            f"canaryTrafficPercent={canary_percent} for {name!r} in KServe Standard mode: Standard mode ignores it "
            "(all traffic would reach the new version). Use serving_options.mode=knative for canary steps."
        )
    obj = copy.deepcopy(dict(template))
    obj["metadata"]["name"] = name
    annotations = obj["metadata"].setdefault("annotations", {})
    annotations["serving.kserve.io/deploymentMode"] = MODES[mode][0]
    if mode != "knative":
        annotations.pop("serving.kserve.io/enable-tag-routing", None)
    predictor = obj["spec"]["predictor"]
    if "model" in predictor:
        model = predictor["model"]
        model["storageUri"] = storage_uri
    else:  # the project's model server as a container (a portable format)
        model = _portable_container(predictor, name, storage_uri)
    env = [e for e in model.get("env", []) if e.get("name") != VERSION_ENV]
    model["env"] = [*env, {"name": VERSION_ENV, "value": str(version)}]
    predictor.pop("canaryTrafficPercent", None)
    if canary_percent is not None:
        predictor["canaryTrafficPercent"] = canary_percent
    return obj


def _portable_container(predictor: dict[str, Any], name: str, storage_uri: str) -> dict[str, Any]:
    """The portable template's ``kserve-container``, set to serve ``name`` from ``storage_uri``."""
    (container,) = predictor["containers"]
    env = [e for e in container.get("env", []) if e.get("name") != STORAGE_ENV]
    container["env"] = [*env, {"name": STORAGE_ENV, "value": storage_uri}]
    args = [a for a in container.get("args", []) if not a.startswith("--model-name=")]
    container["args"] = [*args, f"--model-name={name}"]
    probe = (container.get("readinessProbe") or {}).get("httpGet")
    if probe is not None:
        probe["path"] = f"/v1/models/{name}"
    return container


def _predictor_status(obj: Mapping[str, Any]) -> dict[str, Any]:
    return ((obj.get("status") or {}).get("components") or {}).get("predictor") or {}


def _not_ready_conditions(obj: Mapping[str, Any]) -> list[str]:
    return [
        f"{c.get('type')}={c.get('status')} ({c.get('reason', '')}: {c.get('message', '')})"
        for c in (obj.get("status") or {}).get("conditions") or []
        if c.get("status") != "True"
    ]


def failed_load(obj: Mapping[str, Any]) -> Optional[str]:
    """The model's load failure (the storage initializer's message, say), or None."""
    model_status = (obj.get("status") or {}).get("modelStatus") or {}
    if model_status.get("transitionStatus") != _FAILED_LOAD:
        return None
    info = model_status.get("lastFailureInfo") or {}
    return f"{info.get('reason', 'ModelLoadFailed')}: {info.get('message', '(no message)')}"


def readiness(obj: Mapping[str, Any], canary_percent: Optional[int]) -> Optional[str]:
    """None when ``obj`` serves its current spec (with ``canary_percent`` on its newest revision),
    else what is still missing.
    """
    status = obj.get("status") or {}
    generation = (obj.get("metadata") or {}).get("generation", 0)
    if status.get("observedGeneration", 0) < generation:
        return f"the controller has not reconciled generation {generation} yet"
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if conditions.get("Ready") != "True":
        return "not Ready: " + ("; ".join(_not_ready_conditions(obj)) or "no conditions yet")
    predictor = _predictor_status(obj)
    created, ready = predictor.get("latestCreatedRevision"), predictor.get("latestReadyRevision")
    if created and created != ready:
        return f"the newest revision {created} is not ready (the ready one is {ready}): " + "; ".join(
            _not_ready_conditions(obj)
        )
    latest = next((t for t in predictor.get("traffic") or [] if t.get("latestRevision")), None)
    wanted = 100 if canary_percent is None else canary_percent
    if predictor.get("traffic") is not None and (latest or {}).get("percent", 0) != wanted:
        return f"the newest revision takes {(latest or {}).get('percent', 0)}% of the traffic, not {wanted}%"
    return None


def tag_url(obj: Mapping[str, Any], tag: str = "latest") -> Optional[str]:
    """The URL of the predictor revision tagged ``tag`` (Knative tag routing), or None."""
    for entry in _predictor_status(obj).get("traffic") or []:
        if entry.get("tag") == tag and entry.get("url"):
            return str(entry["url"])
    return None


@dataclasses.dataclass(frozen=True)
class KServeOptions(ClusterOptions):
    """The ``kserve`` target's own settings (``serving_options``): a cluster target's, and its mode.

    Attributes:
        manifests_dir: the folder of the overlays (``manifests/kserve``); None finds the project's.
        poll_interval_s: the pause between two reads of an InferenceService's status.
        cluster_domain: the cluster's DNS domain, for the URLs the status does not give.
        mode: the KServe deployment mode the cluster runs the InferenceServices in: ``knative``
            (canary steps by ``canaryTrafficPercent``) or ``standard`` (no traffic split: a new
            version replaces the old, a failure rolls back); checked against each
            InferenceService's ``status.deploymentMode``.
    """

    mode: typing.Literal["knative", "standard"] = "knative"


@register
class KServeTarget(ServingTarget):
    """Serves each model of a stage as a KServe InferenceService in the stage's namespace.

    Args:
        stages: the stage registry (on GCS: the storage initializer reads the models from it).
        options: the target's own settings (:class:`KServeOptions`: the mode, the overlays, the
            poll interval, the cluster's domain).
        settings: the generic settings: the new version's canary steps in Knative mode (None:
            :data:`DEFAULT_CANARY_STEPS`).
        api_client: a configured ``kubernetes.client.ApiClient``; None loads the in-cluster
            configuration, else the kubeconfig.
    """

    name = "kserve"
    load_profile = "cluster"
    options_type = KServeOptions
    # A portable format runs in the project's own model server (manifests/kserve/portable).
    serving_formats = ("saved_model", *FORMATS)

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
        # The overlays and the cluster's kinds do not change during a promotion: read each once.
        self._overlays: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {}
        self._podmonitors: Optional[bool] = None

    def _client(self) -> Any:
        from components import kube

        if self.api_client is None:
            self.api_client = kube.load_api_client()
        return self.api_client

    def check(self) -> None:
        """The storage initializer reads GCS, and the cluster must serve InferenceServices.

        Raises:
            ValueError: the registry's root is not ``gs://bucket[/prefix]``.
            components.kube.KubeDeployError: the cluster has no InferenceService CRD (KServe is not
                installed), or is unreachable.
        """
        from components import kube

        check_gcs_root(self.stages.root)
        if not kube.serves_kind(self._client(), API_VERSION, KIND):
            raise kube.KubeDeployError(
                f"the cluster does not serve {KIND} ({API_VERSION}): KServe is not installed. Fix: install KServe "
                "(docs/kserve.md names the versions), or serve with the plain target (serving_target=kubernetes)."
            )

    def canary_steps(self) -> tuple[int, ...]:
        """The configured steps (None: :data:`DEFAULT_CANARY_STEPS`) in Knative mode; none in Standard mode
        (no traffic split).
        """
        if self.options.mode != "knative":
            return ()
        return self.settings.canary_steps or DEFAULT_CANARY_STEPS

    def _rendered(self, stage: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The stage's overlay rendered, and its template InferenceService (rendered once per target)."""
        from components import kube

        if stage in self._overlays:
            return copy.deepcopy(self._overlays[stage])
        rendered = render_stage(stage, self.options.manifests_dir or default_manifests_dir())
        template = next((o for o in rendered if o.get("kind") == KIND and o["metadata"]["name"] == TEMPLATE_NAME), None)
        if template is None:
            raise kube.KubeDeployError(f"the kserve overlay of {stage} renders no {KIND} named {TEMPLATE_NAME!r}")
        self._overlays[stage] = (rendered, template)
        return copy.deepcopy((rendered, template))

    def _template(self, stage: str, name: str) -> dict[str, Any]:
        """A model's InferenceService template: the stage's, or its portable overlay's where the model's
        version is served in a portable format (:attr:`forms`).
        """
        from components import kube

        if self.forms.get(name, SERVED) == SERVED:
            return self._rendered(stage)[1]
        key = f"{PORTABLE_DIR}/{stage}"
        if key not in self._overlays:
            root = Path(self.options.manifests_dir or default_manifests_dir())
            rendered = kube.render_kustomize(root / PORTABLE_DIR / stage)
            found = [o for o in rendered if o.get("kind") == KIND and o["metadata"]["name"] == TEMPLATE_NAME]
            if not found:
                raise kube.KubeDeployError(f"{root / PORTABLE_DIR / stage} renders no {KIND} named {TEMPLATE_NAME!r}")
            self._overlays[key] = (rendered, found[0])
        return copy.deepcopy(self._overlays[key][1])

    def _namespace(self, stage: str) -> str:
        return self._rendered(stage)[1]["metadata"]["namespace"]

    def _namespace_and_objects(
        self, stage: str, models: Mapping[str, int], canary: Optional[tuple[str, int]] = None
    ) -> tuple[str, list[dict[str, Any]]]:
        """The stage's namespace, and its objects: the shared ones and one InferenceService per model."""
        from components import kube

        rendered, template = self._rendered(stage)
        shared = [o for o in rendered if o.get("kind") != KIND]
        if self._podmonitors is None:
            self._podmonitors = kube.serves_kind(self._client(), *PODMONITOR)
        if not self._podmonitors:
            log.warning("the cluster serves no PodMonitor (prometheus-operator): %s's metrics are not scraped", stage)
            shared = [o for o in shared if (o.get("apiVersion"), o.get("kind")) != PODMONITOR]
        services = [
            render_inference_service(
                self._template(stage, name),
                name,
                self.stages.model_base_path(stage, name),
                version,
                self.options.mode,
                canary[1] if canary is not None and canary[0] == name else None,
            )
            for name, version in sorted(models.items())
        ]
        return template["metadata"]["namespace"], [*shared, *services]

    def _get(self, namespace: str, name: str) -> Optional[dict[str, Any]]:
        from components import kube

        return kube.get_object(self._client(), API_VERSION, KIND, namespace, name)

    def _check_mode(self, obj: Mapping[str, Any]) -> None:
        """Refuse an InferenceService whose reported mode is not ``serving_options.mode``.

        Raises:
            components.kube.KubeDeployError: ``status.deploymentMode`` names the other mode.
        """
        from components import kube

        reported = (obj.get("status") or {}).get("deploymentMode")
        mode = self.options.mode
        if reported is not None and reported not in MODES[mode]:
            meta = obj.get("metadata") or {}
            other = next((m for m, names in MODES.items() if reported in names), reported)
            raise kube.KubeDeployError(
                f"{KIND} {meta.get('namespace')}/{meta.get('name')} runs in deploymentMode {reported}, but the kserve "
                f"target is set to serving_options.mode={mode}. Fix: set serving_options.mode={other}, or move the "
                "InferenceService to the other mode (delete it and promote again)."
            )

    def _apply(self, stage: str, models: Mapping[str, int], canary: Optional[tuple[str, int]] = None) -> str:
        """Checks the modes of the stage's existing InferenceServices, then applies; returns the namespace."""
        from components import kube

        namespace, objects = self._namespace_and_objects(stage, models, canary)
        for name in models:
            existing = self._get(namespace, name)
            if existing is not None:
                self._check_mode(existing)
        kube.apply_objects(self._client(), objects, extra_kinds=[PODMONITOR, (API_VERSION, KIND)])
        return namespace

    def _wait(self, namespace: str, name: str, timeout_s: float, canary_percent: Optional[int] = None) -> None:
        """Waits until the InferenceService serves its spec (and canary share).

        Raises:
            components.kube.KubeDeployError: the model failed to load (the storage initializer's
                message), or the reported mode is not ``serving_options.mode``.
            components.kube.RolloutTimeout: not ready within ``timeout_s``; says what was missing.
        """
        from components import kube

        start = time.monotonic()
        while True:
            obj = self._get(namespace, name)
            missing = "the InferenceService does not exist" if obj is None else readiness(obj, canary_percent)
            if obj is not None:
                self._check_mode(obj)
                problem = failed_load(obj)
                if problem is not None:
                    raise kube.KubeDeployError(
                        f"{KIND} {namespace}/{name} cannot load its model: {problem}. Fix: grant the serving "
                        "account read access to the stages bucket (docs/kserve.md), then promote again."
                    )
            if missing is None:
                return
            waited = time.monotonic() - start
            if waited >= timeout_s:
                raise kube.RolloutTimeout(
                    f"{KIND} {namespace}/{name} did not become ready after {waited:.1f} s: {missing}. "
                    f"Look closer with: kubectl -n {namespace} describe inferenceservice/{name}",
                    namespace=namespace,
                    name=name,
                    waited_s=waited,
                )
            time.sleep(min(self.options.poll_interval_s, timeout_s - waited))

    def serve(self, stage: str, models: Mapping[str, int], changed: str, timeout_s: float) -> None:
        """Apply every model's InferenceService (``changed`` at its new version, all its traffic) and wait.

        Raises:
            components.kube.RolloutTimeout: ``changed`` did not become ready in ``timeout_s``.
            components.kube.KubeDeployError: rendering or applying failed, the model did not
                load, or the mode does not match.
        """
        if self.options.mode == "standard":
            log.info(
                "KServe Standard mode has no traffic split here: %s version %d replaces the one %s served at once "
                "(a failure rolls back)",
                changed,
                models[changed],
                stage,
            )
        namespace = self._apply(stage, models)
        self._wait(namespace, changed, timeout_s)

    def serve_canary(self, stage: str, models: Mapping[str, int], changed: str, percent: int, timeout_s: float) -> None:
        """Give ``changed``'s new version ``percent`` of its traffic (100: all, the canary field removed).

        Raises:
            NotImplementedError: Standard mode (no traffic split).
            components.kube.RolloutTimeout: the canary did not become ready in ``timeout_s``.
        """
        if not self.canary_steps():
            return super().serve_canary(stage, models, changed, percent, timeout_s)
        if percent >= 100:
            return self.serve(stage, models, changed, timeout_s)
        log.info("%s: canary of %s version %d at %d%% of the traffic", stage, changed, models[changed], percent)
        namespace = self._apply(stage, models, canary=(changed, percent))
        self._wait(namespace, changed, timeout_s, canary_percent=percent)
        return None

    def restore(self, stage: str, models: Mapping[str, int], changed: str, timeout_s: float) -> None:
        """Return ``changed`` to its version in ``models``: a canary first gets 0% of the traffic, then
        the previous spec is applied again; without an earlier version its InferenceService is deleted.
        """
        from components import kube

        namespace = self._namespace(stage)
        current = self._get(namespace, changed)
        if changed not in models:
            kube.delete_object(self._client(), API_VERSION, KIND, namespace, changed)
            if models:
                self._apply(stage, models)
            return
        if current is not None and "canaryTrafficPercent" in current.get("spec", {}).get("predictor", {}):
            # The spec still names the failed version: send its revision nothing before replacing it.
            kube.apply_objects(self._client(), [_with_canary_zero(current)], extra_kinds=[(API_VERSION, KIND)])
        self._apply(stage, models)
        self._wait(namespace, changed, timeout_s)

    def _ready(self, namespace: str, name: str) -> dict[str, Any]:
        """The model's InferenceService, which must exist and be ``Ready`` to be given a URL.

        Raises:
            StageUnavailable: it does not exist, or its ``Ready`` condition is not True.
        """
        obj = self._get(namespace, name)
        if obj is None:
            raise StageUnavailable(
                f"{KIND} {namespace}/{name} does not exist: the stage is not serving {name!r} on this cluster. "
                "Fix: promote it again (or check that KServe and the stage's namespace are the ones expected)."
            )
        conditions = {c.get("type"): c.get("status") for c in (obj.get("status") or {}).get("conditions") or []}
        if conditions.get("Ready") != "True":
            found = "; ".join(_not_ready_conditions(obj)) or "no conditions yet"
            raise StageUnavailable(
                f"{KIND} {namespace}/{name} is not Ready (expected Ready=True): {found}. "
                f"Look closer with: kubectl -n {namespace} describe inferenceservice/{name}"
            )
        return obj

    @contextlib.contextmanager
    def endpoints(self, stage: str, models: Mapping[str, int]) -> Iterator[Endpoints]:
        """Each model answers at its InferenceService's cluster-local address; a canary in progress
        also at its ``latest`` tag URL (Knative tag routing).

        Raises:
            StageUnavailable: a model has no InferenceService, or it is not ``Ready`` (its
                conditions are in the message).
            components.kube.KubeDeployError: a canary is in progress but has no tag URL (tag
                routing is off).
        """
        from components import kube

        namespace = self._namespace(stage)
        urls, canaries = {}, {}
        for name in models:
            obj = self._ready(namespace, name)
            status = obj.get("status") or {}
            fallback = f"http://{name}.{namespace}.svc.{self.options.cluster_domain}"
            urls[name] = (status.get("address") or {}).get("url") or status.get("url") or fallback
            if "canaryTrafficPercent" in (obj.get("spec") or {}).get("predictor", {}):
                canary = tag_url(obj)
                if canary is None:
                    raise kube.KubeDeployError(
                        f"{KIND} {namespace}/{name} has a canary but no 'latest' tag URL: set the annotation "
                        "serving.kserve.io/enable-tag-routing: 'true' (manifests/kserve/base does)"
                    )
                canaries[name] = canary
        yield Endpoints(urls=urls, canary_urls=canaries)


def _with_canary_zero(current: Mapping[str, Any]) -> dict[str, Any]:
    """The applied fields of ``current`` with ``canaryTrafficPercent: 0`` (all traffic to the previous revision)."""
    meta = current["metadata"]
    keep = {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if meta.get(k)}
    spec = copy.deepcopy(current["spec"])
    spec["predictor"]["canaryTrafficPercent"] = 0
    return {"apiVersion": current["apiVersion"], "kind": current["kind"], "metadata": keep, "spec": spec}
