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
"""

from __future__ import annotations

import contextlib
import copy
import logging
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from components.serving.targets.base import Endpoints, ServingTarget, StageUnavailable, register

if TYPE_CHECKING:
    from trainer.config import MonitorConfig, PromoteConfig

log = logging.getLogger(__name__)

API_VERSION = "serving.kserve.io/v1beta1"
KIND = "InferenceService"
PODMONITOR = ("monitoring.coreos.com/v1", "PodMonitor")
TEMPLATE_NAME = "model"
"""The name of the overlay's template InferenceService, copied once per served model."""
MODES = {"knative": ("Knative", "Serverless"), "standard": ("Standard", "RawDeployment")}
"""``kserve_mode`` -> the ``status.deploymentMode`` values that mean it (today's name first, then the legacy one)."""
DEFAULT_CANARY_STEPS = (10, 50, 100)
VERSION_ENV = "LTP_MODEL_VERSION"
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
        raise ValueError(f"kserve_mode must be one of {sorted(MODES)}, got {mode!r}")
    if canary_percent is not None and mode != "knative":
        raise ValueError(
            f"canaryTrafficPercent={canary_percent} for {name!r} in KServe Standard mode: Standard mode ignores it "
            "(all traffic would reach the new version). Use kserve_mode=knative for canary steps."
        )
    obj = copy.deepcopy(dict(template))
    obj["metadata"]["name"] = name
    annotations = obj["metadata"].setdefault("annotations", {})
    annotations["serving.kserve.io/deploymentMode"] = MODES[mode][0]
    if mode != "knative":
        annotations.pop("serving.kserve.io/enable-tag-routing", None)
    predictor = obj["spec"]["predictor"]
    model = predictor["model"]
    model["storageUri"] = storage_uri
    env = [e for e in model.get("env", []) if e.get("name") != VERSION_ENV]
    model["env"] = [*env, {"name": VERSION_ENV, "value": str(version)}]
    predictor.pop("canaryTrafficPercent", None)
    if canary_percent is not None:
        predictor["canaryTrafficPercent"] = canary_percent
    return obj


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


def _check_steps(steps: Sequence[int]) -> tuple[int, ...]:
    steps = tuple(int(s) for s in steps)
    if not steps or steps[-1] != 100 or any(not 0 < s <= 100 for s in steps) or list(steps) != sorted(set(steps)):
        raise ValueError(
            f"canary_steps must be increasing percentages in 1..100 ending with 100 (e.g. 10, 50, 100), got {steps}"
        )
    return steps


@register
class KServeTarget(ServingTarget):
    """Serves each model of a stage as a KServe InferenceService in the stage's namespace.

    Args:
        api_client: a configured ``kubernetes.client.ApiClient``; None loads the in-cluster
            configuration, else the kubeconfig.
        kserve_mode: ``knative`` (canary steps by ``canaryTrafficPercent``) or ``standard`` (no
            traffic split: a new version replaces the old, a failure rolls back); checked against
            the InferenceServices' ``status.deploymentMode``.
        canary_steps: the new version's traffic shares in Knative mode, increasing, ending at 100.
        manifests_dir: the ``manifests/kserve`` folder; None finds the project's.
        poll_interval_s: pause between status reads.
        cluster_domain: the cluster's DNS domain, for URLs the status does not give.
    """

    name = "kserve"
    load_profile = "cluster"

    def __init__(
        self,
        api_client: Optional[Any] = None,
        kserve_mode: str = "knative",
        canary_steps: Sequence[int] = DEFAULT_CANARY_STEPS,
        manifests_dir: Optional[str | Path] = None,
        poll_interval_s: float = 2.0,
        cluster_domain: str = "cluster.local",
    ):
        if kserve_mode not in MODES:
            raise ValueError(f"kserve_mode must be one of {sorted(MODES)}, got {kserve_mode!r}")
        self.api_client = api_client
        self.kserve_mode = kserve_mode
        self.steps = _check_steps(canary_steps)
        self.manifests_dir = manifests_dir
        self.poll_interval_s = poll_interval_s
        self.cluster_domain = cluster_domain
        # The overlays and the cluster's kinds do not change during a promotion: read each once.
        self._overlays: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {}
        self._podmonitors: Optional[bool] = None

    @classmethod
    def from_config(cls, config: PromoteConfig | MonitorConfig) -> KServeTarget:
        """A promotion's ``config.kserve_mode`` and ``config.canary_steps`` (None:
        :data:`DEFAULT_CANARY_STEPS`); a monitor's config: the defaults (its endpoints depend on neither).
        """
        from trainer.config import PromoteConfig

        if not isinstance(config, PromoteConfig):
            return cls()
        steps = DEFAULT_CANARY_STEPS if config.canary_steps is None else config.canary_steps
        return cls(kserve_mode=config.kserve_mode, canary_steps=steps)

    def _client(self) -> Any:
        from components import kube

        if self.api_client is None:
            self.api_client = kube.load_api_client()
        return self.api_client

    def check(self, stages_root: str) -> None:
        """The storage initializer reads GCS, and the cluster must serve InferenceServices.

        Raises:
            ValueError: ``stages_root`` is not ``gs://bucket[/prefix]``.
            components.kube.KubeDeployError: the cluster has no InferenceService CRD (KServe is not
                installed), or is unreachable.
        """
        from components import kube
        from components.serving import deploy

        deploy.check_gcs_root(stages_root)
        if not kube.serves_kind(self._client(), API_VERSION, KIND):
            raise kube.KubeDeployError(
                f"the cluster does not serve {KIND} ({API_VERSION}): KServe is not installed. Fix: install KServe "
                "(docs/kserve.md names the versions), or serve with the plain target (serving_target=kubernetes)."
            )

    def canary_steps(self) -> tuple[int, ...]:
        """The configured steps in Knative mode; none in Standard mode (no traffic split)."""
        return self.steps if self.kserve_mode == "knative" else ()

    def _rendered(self, stage: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The stage's overlay rendered, and its template InferenceService (rendered once per target)."""
        from components import kube
        from components.serving import deploy

        if stage in self._overlays:
            return copy.deepcopy(self._overlays[stage])
        rendered = deploy.render_stage(stage, self.manifests_dir or default_manifests_dir())
        template = next((o for o in rendered if o.get("kind") == KIND and o["metadata"]["name"] == TEMPLATE_NAME), None)
        if template is None:
            raise kube.KubeDeployError(f"the kserve overlay of {stage} renders no {KIND} named {TEMPLATE_NAME!r}")
        self._overlays[stage] = (rendered, template)
        return copy.deepcopy((rendered, template))

    def _namespace(self, stage: str) -> str:
        return self._rendered(stage)[1]["metadata"]["namespace"]

    def _namespace_and_objects(
        self, stages_root: str, stage: str, models: Mapping[str, int], canary: Optional[tuple[str, int]] = None
    ) -> tuple[str, list[dict[str, Any]]]:
        """The stage's namespace, and its objects: the shared ones and one InferenceService per model."""
        from components import kube
        from components.serving import stages

        rendered, template = self._rendered(stage)
        shared = [o for o in rendered if o.get("kind") != KIND]
        if self._podmonitors is None:
            self._podmonitors = kube.serves_kind(self._client(), *PODMONITOR)
        if not self._podmonitors:
            log.warning("the cluster serves no PodMonitor (prometheus-operator): %s's metrics are not scraped", stage)
            shared = [o for o in shared if (o.get("apiVersion"), o.get("kind")) != PODMONITOR]
        services = [
            render_inference_service(
                template,
                name,
                stages.model_base_path(stages_root, stage, name),
                version,
                self.kserve_mode,
                canary[1] if canary is not None and canary[0] == name else None,
            )
            for name, version in sorted(models.items())
        ]
        return template["metadata"]["namespace"], [*shared, *services]

    def _get(self, namespace: str, name: str) -> Optional[dict[str, Any]]:
        from components import kube

        return kube.get_object(self._client(), API_VERSION, KIND, namespace, name)

    def _check_mode(self, obj: Mapping[str, Any]) -> None:
        """Refuse an InferenceService whose reported mode is not ``kserve_mode``.

        Raises:
            components.kube.KubeDeployError: ``status.deploymentMode`` names the other mode.
        """
        from components import kube

        reported = (obj.get("status") or {}).get("deploymentMode")
        if reported is not None and reported not in MODES[self.kserve_mode]:
            meta = obj.get("metadata") or {}
            other = next((m for m, names in MODES.items() if reported in names), reported)
            raise kube.KubeDeployError(
                f"{KIND} {meta.get('namespace')}/{meta.get('name')} runs in deploymentMode {reported}, but the kserve "
                f"target is set to kserve_mode={self.kserve_mode}. Fix: set kserve_mode={other}, or move the "
                "InferenceService to the other mode (delete it and promote again)."
            )

    def _apply(
        self, stages_root: str, stage: str, models: Mapping[str, int], canary: Optional[tuple[str, int]] = None
    ) -> str:
        """Checks the modes of the stage's existing InferenceServices, then applies; returns the namespace."""
        from components import kube

        namespace, objects = self._namespace_and_objects(stages_root, stage, models, canary)
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
                message), or the reported mode is not ``kserve_mode``.
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
            time.sleep(min(self.poll_interval_s, timeout_s - waited))

    def serve(self, stages_root: str, stage: str, models: Mapping[str, int], changed: str, timeout_s: float) -> None:
        """Apply every model's InferenceService (``changed`` at its new version, all its traffic) and wait.

        Raises:
            components.kube.RolloutTimeout: ``changed`` did not become ready in ``timeout_s``.
            components.kube.KubeDeployError: rendering or applying failed, the model did not
                load, or the mode does not match.
        """
        if self.kserve_mode == "standard":
            log.info(
                "KServe Standard mode has no traffic split here: %s version %d replaces the one %s served at once "
                "(a failure rolls back)",
                changed,
                models[changed],
                stage,
            )
        namespace = self._apply(stages_root, stage, models)
        self._wait(namespace, changed, timeout_s)

    def serve_canary(
        self, stages_root: str, stage: str, models: Mapping[str, int], changed: str, percent: int, timeout_s: float
    ) -> None:
        """Give ``changed``'s new version ``percent`` of its traffic (100: all, the canary field removed).

        Raises:
            NotImplementedError: Standard mode (no traffic split).
            components.kube.RolloutTimeout: the canary did not become ready in ``timeout_s``.
        """
        if not self.canary_steps():
            return super().serve_canary(stages_root, stage, models, changed, percent, timeout_s)
        if percent >= 100:
            return self.serve(stages_root, stage, models, changed, timeout_s)
        log.info("%s: canary of %s version %d at %d%% of the traffic", stage, changed, models[changed], percent)
        namespace = self._apply(stages_root, stage, models, canary=(changed, percent))
        self._wait(namespace, changed, timeout_s, canary_percent=percent)
        return None

    def restore(self, stages_root: str, stage: str, models: Mapping[str, int], changed: str, timeout_s: float) -> None:
        """Return ``changed`` to its version in ``models``: a canary first gets 0% of the traffic, then
        the previous spec is applied again; without an earlier version its InferenceService is deleted.
        """
        from components import kube

        namespace = self._namespace(stage)
        current = self._get(namespace, changed)
        if changed not in models:
            kube.delete_object(self._client(), API_VERSION, KIND, namespace, changed)
            if models:
                self._apply(stages_root, stage, models)
            return
        if current is not None and "canaryTrafficPercent" in current.get("spec", {}).get("predictor", {}):
            # The spec still names the failed version: send its revision nothing before replacing it.
            kube.apply_objects(self._client(), [_with_canary_zero(current)], extra_kinds=[(API_VERSION, KIND)])
        self._apply(stages_root, stage, models)
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
    def endpoints(self, stages_root: str, stage: str, models: Mapping[str, int]) -> Iterator[Endpoints]:
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
            fallback = f"http://{name}.{namespace}.svc.{self.cluster_domain}"
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
