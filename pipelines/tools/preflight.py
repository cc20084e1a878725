"""Before a run asks for a TPU the cluster cannot give: one line naming what to compile with.

``make submit`` runs it with the user's kubeconfig, between compiling and starting the run: a pod
asking for a TPU no node can give stays Pending with no word from the pipeline. It reads what the
compiled pipeline asks for (each step's accelerator, the run's ``accelerator_type`` and
``accelerator_count`` where the request is a parameter, the node selectors of a preset) and what
the cluster's nodes offer (one list of nodes: cluster-scoped, so it needs ``list`` on ``nodes``,
a ClusterRole that Kubeflow's ``pipeline-runner`` usually lacks and a user's kubeconfig usually
has; without it the preflight says so and lets the run go).

The signals, from the nodes:

- **the legacy TPU Node resource**: a node advertising ``cloud-tpus.google.com/<version>`` in its
  ``status.allocatable`` (GKE adds it where the cluster was made with TPUs enabled; the resource's
  end of life for new setups was 2025-04-25);
- **TPU VM node pools**: nodes labelled ``cloud.google.com/gke-tpu-accelerator`` and
  ``cloud.google.com/gke-tpu-topology`` (their ``google.com/tpu`` chips). A pool that scales from
  zero shows no node until a pod asks: ``--no-preflight`` (``PREFLIGHT=off``) lets such a run go.

Not checked here: quota, a pool's size, GKE's own cluster settings (``enableTpu``: the Container
API, not Kubernetes'). Nothing of this ran against a real cluster; the tests run it against the
fake Kubernetes API server.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional

from pipelines.accelerators import GKE_TPU_ACCELERATOR_LABEL, GKE_TPU_RESOURCE, GKE_TPU_TOPOLOGY_LABEL, GKE_TPU_TYPES

LEGACY_PREFIX = "cloud-tpus.google.com/"
_PARAMETER = re.compile(r"\{\{\$\.inputs\.parameters\['(?:pipelinechannel--)?([^']+)'\]\}\}")
# GKE's node label value of a TPU VM type -> the preset's name part (pipelines/accelerators.py).
_TYPE_OF_LABEL = {label: name for name, (label, _chips) in GKE_TPU_TYPES.items()}


class PreflightError(RuntimeError):
    """The cluster cannot give a TPU the run asks for; the message is the one line to show."""


@dataclasses.dataclass(frozen=True)
class TpuAsk:
    """A step's TPU request.

    Attributes:
        step: the executor (``exec-train-model``).
        resource: ``cloud-tpus.google.com/v2`` or ``google.com/tpu``.
        accelerator: the TPU VM node label value a preset selects (``tpu-v5-lite-podslice``), if any.
        topology: the preset's topology (``2x4``), if any.
    """

    step: str
    resource: str
    accelerator: Optional[str] = None
    topology: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class ClusterTpus:
    """What a cluster's nodes offer of TPUs.

    Attributes:
        legacy: the ``cloud-tpus.google.com/*`` resources some node advertises.
        pools: (accelerator label value, topology) of the TPU VM nodes.
    """

    legacy: frozenset[str]
    pools: frozenset[tuple[str, str]]


def _value(text: Any, parameters: Mapping[str, Any]) -> str:
    """A resource field: a literal, or a run parameter's placeholder resolved from ``parameters``."""
    text = str(text or "")
    match = _PARAMETER.fullmatch(text)
    return str(parameters.get(match[1], "") or "") if match else text


def tpu_asks(
    pipeline_spec: Mapping[str, Any], platform_spec: Mapping[str, Any], parameters: Mapping[str, Any]
) -> list[TpuAsk]:
    """The TPU requests of a compiled pipeline's steps, with the run's parameters filled in."""
    executors = (platform_spec.get("deploymentSpec") or {}).get("executors") or {}
    asks = []
    for step, executor in pipeline_spec["deploymentSpec"]["executors"].items():
        accelerator = ((executor.get("container") or {}).get("resources") or {}).get("accelerator") or {}
        resource = _value(accelerator.get("resourceType") or accelerator.get("type"), parameters)
        count = _value(accelerator.get("resourceCount") or accelerator.get("count"), parameters)
        if not (resource.startswith(LEGACY_PREFIX) or resource == GKE_TPU_RESOURCE) or count in ("", "0", "0.0"):
            continue
        selectors = ((executors.get(step) or {}).get("nodeSelector") or {}).get("labels") or {}
        asks.append(
            TpuAsk(step, resource, selectors.get(GKE_TPU_ACCELERATOR_LABEL), selectors.get(GKE_TPU_TOPOLOGY_LABEL))
        )
    return asks


def cluster_tpus(nodes: Iterable[Mapping[str, Any]]) -> ClusterTpus:
    """What the nodes offer: legacy TPU resources in their allocatable, TPU VM node pools by their labels."""
    legacy, pools = set(), set()
    for node in nodes:
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        legacy.update(k for k in allocatable if k.startswith(LEGACY_PREFIX))
        labels = (node.get("metadata") or {}).get("labels") or {}
        if GKE_TPU_ACCELERATOR_LABEL in labels:
            pools.add((labels[GKE_TPU_ACCELERATOR_LABEL], labels.get(GKE_TPU_TOPOLOGY_LABEL, "?")))
    return ClusterTpus(frozenset(legacy), frozenset(pools))


def preset_of(pool: tuple[str, str]) -> str:
    """The compile-time preset for a TPU VM node pool (``gke-tpu-v5e-2x4``), or a hint where unknown."""
    accelerator, topology = pool
    kind = _TYPE_OF_LABEL.get(accelerator)
    return f"gke-tpu-{kind}-{topology}" if kind else f"gke-tpu-<type of {accelerator}>-{topology}"


def _pools_text(cluster: ClusterTpus) -> str:
    return ", ".join(f"{a} {t}" for a, t in sorted(cluster.pools))


def problem(ask: TpuAsk, cluster: ClusterTpus) -> Optional[str]:
    """The one line saying why the cluster cannot give ``ask``, or None when it can."""
    if ask.resource.startswith(LEGACY_PREFIX):
        if ask.resource in cluster.legacy:
            return None
        where = (
            f"no node advertises {ask.resource} (GKE's legacy TPU Node resource, end of life for new setups 2025-04-25)"
        )
        if cluster.pools:
            first = sorted(cluster.pools)[0]
            return (
                f"{ask.step} asks for {ask.resource}, which this cluster cannot give: {where}; it has TPU VM node "
                f"pools ({_pools_text(cluster)}): compile with make compile ACCELERATOR={preset_of(first)} "
                "(docs/training.md)"
            )
        return (
            f"{ask.step} asks for {ask.resource}, which this cluster cannot give: {where} and no node is in a TPU "
            f"VM node pool ({GKE_TPU_ACCELERATOR_LABEL}); add one and compile with ACCELERATOR=gke-tpu-<type>-"
            "<topology>, or run on a GPU or the CPU (accelerator_type=nvidia.com/gpu, or empty)"
        )
    wanted = (ask.accelerator or "", ask.topology or "")
    if wanted in cluster.pools or (not ask.accelerator and cluster.pools):
        return None
    have = f"its TPU VM node pools: {_pools_text(cluster)}" if cluster.pools else "no TPU VM node pool"
    fix = f": compile with ACCELERATOR={preset_of(sorted(cluster.pools)[0])}" if cluster.pools else ""
    return (
        f"{ask.step} asks for {ask.resource} on {ask.accelerator} {ask.topology}, which no node of this cluster is "
        f"({have}; a pool that scales from zero shows no node: then submit with PREFLIGHT=off){fix}"
    )


def check(
    pipeline_spec: Mapping[str, Any],
    platform_spec: Mapping[str, Any],
    parameters: Mapping[str, Any],
    list_nodes: Callable[[], list[dict[str, Any]]],
) -> list[str]:
    """Checks a run before it starts; returns notes (what was skipped and why).

    Args:
        pipeline_spec: the compiled pipeline (the YAML's first document).
        platform_spec: its ``platforms.kubernetes`` (the second document's), or empty.
        parameters: the run's parameter values.
        list_nodes: the cluster's nodes as plain dicts (``kubernetes``' ``list_node``, or the fake's).

    Raises:
        PreflightError: a step asks for a TPU the cluster cannot give (one line per such step).
    """
    asks = tpu_asks(pipeline_spec, platform_spec, parameters)
    if not asks:
        return []
    try:
        nodes = list_nodes()
    except (PermissionError, LookupError) as err:
        return [f"preflight skipped: {err}"]
    cluster = cluster_tpus(nodes)
    problems = [p for p in (problem(ask, cluster) for ask in asks) if p]
    if problems:
        raise PreflightError("\n".join(problems))
    return []


def kube_nodes(context: Optional[str] = None) -> Callable[[], list[dict[str, Any]]]:
    """The nodes of the cluster the kubeconfig points at (``kubernetes`` client, read-only).

    The function it returns raises PermissionError on a 403 (no ``list nodes``) and LookupError
    without a kubeconfig: the preflight then says why it was skipped.
    """

    def nodes() -> list[dict[str, Any]]:
        from kubernetes import client, config
        from kubernetes.client.exceptions import ApiException

        try:
            # KUBECONFIG as it is now (the client read it once, at its import)
            config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None, context=context)
        except config.ConfigException as err:
            raise LookupError(f"no cluster to ask: the kubeconfig cannot be loaded ({err})") from None
        api = client.ApiClient()
        try:
            found = client.CoreV1Api(api).list_node()
        except ApiException as err:
            if err.status == 403:
                raise PermissionError(
                    "cannot list the cluster's nodes (403): it needs a ClusterRole with list on nodes "
                    "(docs/kubernetes.md)"
                ) from None
            raise
        return [api.sanitize_for_serialization(n) for n in found.items]

    return nodes
