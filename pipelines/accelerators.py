"""Accelerator settings for a pipeline task: Cloud TPU (legacy TPU Node or GKE TPU VM), GPU, CPU.

Two ways in (docs/training.md has the presets):

- ``set_accelerator(task, accelerator_type, accelerator_count)`` takes literals *or pipeline
  parameters*: one compiled YAML then serves TPU, GPU and CPU, the choice made when a run starts.
  KFP compiles parameters into placeholders that its driver resolves and writes verbatim into the
  pod's ``resources.limits``.
- ``apply_preset(task, "tpu-v2-8")`` fixes everything at compile time, including what parameters
  cannot express (node selectors and tolerations of GKE TPU node pools).

The KFP SDK validates none of these strings; tests/pipelines/test_accelerators.py reads the
compiled YAML. On the cluster, ``trainer.distribute.get_strategy()`` detects what the pod got.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Optional

from kfp import kubernetes

from components.images import TF_VERSION

# The GKE "TPU Node" path: a TPU v2-8 attached to the pod through this extended resource.
DEFAULT_ACCELERATOR_TYPE = "cloud-tpus.google.com/v2"
DEFAULT_ACCELERATOR_COUNT = 8
DEFAULT_PRESET = "tpu-v2-8"
# Without this annotation GKE's TPU webhook rejects a pod asking for cloud-tpus.google.com/*; its
# value must match the TensorFlow in the image (the TPU runtime is started at that version).
TPU_TF_VERSION_ANNOTATION = "tf-version.cloud-tpus.google.com"
GKE_TPU_RESOURCE = "google.com/tpu"
GKE_TPU_ACCELERATOR_LABEL = "cloud.google.com/gke-tpu-accelerator"
GKE_TPU_TOPOLOGY_LABEL = "cloud.google.com/gke-tpu-topology"
GKE_SPOT_LABEL = "cloud.google.com/gke-spot"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_TYPE_LABEL = "cloud.google.com/gke-accelerator"

# Retries for preemption: a preempted TPU (or spot node) kills the pod; the retried pod writes to
# the same model URI and resumes from its checkpoints (trainer.train).
PREEMPTION_RETRIES = 3
RETRY_BACKOFF = "60s"
RETRY_BACKOFF_FACTOR = 2.0
RETRY_BACKOFF_MAX = "3600s"

# Legacy TPU Node pod slices larger than 8 cores: (version, cores). The pipelines' runtime
# parameters take the same values (accelerator_type cloud-tpus.google.com/v3, count 32).
LEGACY_POD_SLICES = (("v2", 32), ("v3", 32), ("v3", 64), ("v3", 128))

# GKE TPU VM types: preset name part -> (node label value, chips on one host at most).
GKE_TPU_TYPES: dict[str, tuple[str, int]] = {
    "v4": ("tpu-v4-podslice", 4),
    "v5e": ("tpu-v5-lite-podslice", 8),
    "v5p": ("tpu-v5p-slice", 4),
    "v6e": ("tpu-v6e-slice", 8),
}


@dataclasses.dataclass(frozen=True)
class Preset:
    """What one preset gives the pod.

    Attributes:
        name: the preset's name.
        accelerator_type: the resource limit name (``cloud-tpus.google.com/v2``, ``google.com/tpu``,
            ``nvidia.com/gpu``), or ``None`` for CPU only.
        accelerator_count: how many of it.
        cpu: CPU request (and limit for ``cpu``) for the host side (tf.data input pipeline).
        memory: memory request.
        annotations: pod annotations.
        node_selectors: node labels the pod must land on.
        tolerations: taint keys tolerated (operator Exists, effect NoSchedule).
        retries: task retries (preemption).
        limit_cpu_memory: set cpu/memory limits equal to the requests (CPU-only pods).
    """

    name: str
    accelerator_type: str | None
    accelerator_count: int
    cpu: str
    memory: str
    annotations: dict[str, str] = dataclasses.field(default_factory=dict)
    node_selectors: dict[str, str] = dataclasses.field(default_factory=dict)
    tolerations: tuple[str, ...] = ()
    retries: int = PREEMPTION_RETRIES
    limit_cpu_memory: bool = False


def _legacy_tpu(name: str, version: str, preemptible: bool, cores: int = 8) -> Preset:
    kind = f"preemptible-{version}" if preemptible else version
    return Preset(
        name=name,
        accelerator_type=f"cloud-tpus.google.com/{kind}",
        # More than 8 cores is a pod slice: still one pod with one annotation; GKE puts the slice's
        # several worker endpoints in KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS and TPUClusterResolver() builds
        # the multi-worker cluster spec from them (checked with TF 2.21). Replicas = cores, so the
        # global batch (per replica x replicas) and the learning rate (scaled with it) follow.
        accelerator_count=cores,
        # The TPU is remote on this path: the pod only runs the input pipeline and the host loop.
        cpu="4",
        memory="16Gi",
        annotations={TPU_TF_VERSION_ANNOTATION: TF_VERSION},
    )


def gke_tpu_preset(name: str) -> Preset:
    """A ``gke-tpu-<type>-<topology>[-spot]`` preset, e.g. ``gke-tpu-v5e-2x4``.

    Raises:
        ValueError: an unknown TPU type, a malformed topology, or a multi-host topology (one pod
            cannot use it).
    """
    match = re.fullmatch(r"gke-tpu-([a-z0-9]+)-(\d+(?:x\d+){1,2})(-spot)?", name)
    if not match:
        raise ValueError(f"accelerator preset: {name!r} is not gke-tpu-<type>-<topology>[-spot], e.g. gke-tpu-v5e-2x4")
    tpu_type, topology, spot = match.groups()
    if tpu_type not in GKE_TPU_TYPES:
        raise ValueError(
            f"accelerator preset {name!r}: unknown TPU type {tpu_type!r}; expected one of {', '.join(GKE_TPU_TYPES)}"
        )
    label, host_chips = GKE_TPU_TYPES[tpu_type]
    chips = math.prod(int(v) for v in topology.split("x"))
    if chips > host_chips:
        raise ValueError(
            f"accelerator preset {name!r}: topology {topology} has {chips} chips, more than one {tpu_type} host "
            f"({host_chips}); multi-host slices need one pod per host, which this single-pod step is not"
        )
    selectors = {GKE_TPU_ACCELERATOR_LABEL: label, GKE_TPU_TOPOLOGY_LABEL: topology}
    if spot:
        selectors[GKE_SPOT_LABEL] = "true"
    return Preset(
        name=name,
        accelerator_type=GKE_TPU_RESOURCE,
        accelerator_count=chips,
        # TPU VM hosts are big (100+ vCPUs): give the input pipeline room to keep the chips fed.
        cpu=str(min(8 * chips, 64)),
        memory=f"{min(16 * chips, 128)}Gi",
        node_selectors=selectors,
        tolerations=(GKE_TPU_RESOURCE,),
    )


def gpu_preset(name: str) -> Preset:
    """A ``gpu-<n>[-<gke accelerator label>]`` preset, e.g. ``gpu-1`` or ``gpu-4-nvidia-tesla-v100``.

    Raises:
        ValueError: a malformed name or a count below 1.
    """
    match = re.fullmatch(r"gpu-(\d+)(?:-([a-z0-9-]+))?", name)
    if not match or int(match.group(1)) < 1:
        raise ValueError(f"accelerator preset: {name!r} is not gpu-<n>[-<gpu type>] with n >= 1, e.g. gpu-1")
    count = int(match.group(1))
    gpu_type = match.group(2)
    return Preset(
        name=name,
        accelerator_type=GPU_RESOURCE,
        accelerator_count=count,
        cpu=str(4 * count),
        memory=f"{16 * count}Gi",
        node_selectors={GPU_TYPE_LABEL: gpu_type} if gpu_type else {},
        tolerations=(GPU_RESOURCE,),
        retries=1,
    )


PRESETS: dict[str, Preset] = {
    "tpu-v2-8": _legacy_tpu("tpu-v2-8", "v2", preemptible=False),
    "tpu-v3-8": _legacy_tpu("tpu-v3-8", "v3", preemptible=False),
    "preemptible-v2-8": _legacy_tpu("preemptible-v2-8", "v2", preemptible=True),
    "preemptible-v3-8": _legacy_tpu("preemptible-v3-8", "v3", preemptible=True),
    # Legacy TPU Node pod slices (GKE's TPU Node integration, end of life announced for 2025-04-25).
    **{
        f"tpu-{version}-{cores}": _legacy_tpu(f"tpu-{version}-{cores}", version, preemptible=False, cores=cores)
        for version, cores in LEGACY_POD_SLICES
    },
    **{
        p.name: p
        for p in map(
            gke_tpu_preset,
            [
                "gke-tpu-v4-2x2x1",
                "gke-tpu-v5e-1x1",
                "gke-tpu-v5e-2x2",
                "gke-tpu-v5e-2x4",
                "gke-tpu-v5p-2x2x1",
                "gke-tpu-v6e-1x1",
                "gke-tpu-v6e-2x2",
                "gke-tpu-v6e-2x4",
            ],
        )
    },
    "gpu-1": gpu_preset("gpu-1"),
    "gpu-2": gpu_preset("gpu-2"),
    "gpu-4": gpu_preset("gpu-4"),
    "gpu-8": gpu_preset("gpu-8"),
    "cpu": Preset(
        name="cpu", accelerator_type=None, accelerator_count=0, cpu="8", memory="16Gi", retries=1, limit_cpu_memory=True
    ),
}


def get_preset(name: str) -> Preset:
    """Looks up a preset; ``gke-tpu-*`` and ``gpu-*`` names beyond the listed ones are parsed.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    if name in PRESETS:
        return PRESETS[name]
    if name.startswith("gke-tpu-"):
        return gke_tpu_preset(name)
    if name.startswith("gpu-"):
        return gpu_preset(name)
    raise ValueError(
        f"accelerator preset: unknown {name!r}; expected one of {', '.join(PRESETS)} "
        "(or gke-tpu-<type>-<topology>, gpu-<n>)"
    )


def set_retries(task: Any, retries: int = PREEMPTION_RETRIES) -> Any:
    """Retries with backoff, so a preempted TPU or spot node restarts training (which resumes)."""
    if retries > 0:
        task.set_retry(
            num_retries=retries,
            backoff_duration=RETRY_BACKOFF,
            backoff_factor=RETRY_BACKOFF_FACTOR,
            backoff_max_duration=RETRY_BACKOFF_MAX,
        )
    return task


def set_accelerator(
    task: Any,
    accelerator_type: Any = DEFAULT_ACCELERATOR_TYPE,
    accelerator_count: Any = DEFAULT_ACCELERATOR_COUNT,
    cpu: str = "4",
    memory: str = "16Gi",
    retries: int = PREEMPTION_RETRIES,
) -> Any:
    """Gives a task an accelerator; type and count may be pipeline parameters (runtime choice).

    Also adds the ``tf-version.cloud-tpus.google.com`` pod annotation (required by GKE for
    ``cloud-tpus.google.com/*`` and ignored otherwise), CPU/memory requests for the host side, and
    retries for preemption. Caching stays on: KFP caches only tasks that succeeded, and this step
    succeeds only after the export, so a half-trained model is never reused from the cache.

    Args:
        task: the pipeline task (e.g. the ``train_model`` task).
        accelerator_type: a resource name such as ``cloud-tpus.google.com/v2``,
            ``cloud-tpus.google.com/preemptible-v3``, ``nvidia.com/gpu``, or a pipeline parameter.
        accelerator_count: how many (an int, a digit string, or a pipeline parameter).
        cpu: CPU request.
        memory: memory request.
        retries: task retries (0 for none).

    Returns:
        The task, for chaining.
    """
    task.set_accelerator_type(accelerator_type)
    task.set_accelerator_limit(accelerator_count)
    kubernetes.add_pod_annotation(task, TPU_TF_VERSION_ANNOTATION, TF_VERSION)
    task.set_cpu_request(cpu)
    task.set_memory_request(memory)
    return set_retries(task, retries)


def apply_preset(task: Any, preset: str = DEFAULT_PRESET, retries: Optional[int] = None) -> Any:
    """Applies a compile-time accelerator preset (``tpu-v2-8``, ``gke-tpu-v5e-2x4``, ``gpu-1``, ``cpu``...).

    Args:
        task: the pipeline task.
        preset: a key of ``PRESETS``, or a parseable ``gke-tpu-*``/``gpu-*`` name.
        retries: task retries; None for the preset's (preemption retries suit resumable training,
            not a step that would rerun a failing cell from the start).

    Returns:
        The task, for chaining.

    Raises:
        ValueError: an unknown or impossible preset.
    """
    p = get_preset(preset)
    if p.accelerator_type is not None:
        task.set_accelerator_type(p.accelerator_type)
        task.set_accelerator_limit(p.accelerator_count)
    task.set_cpu_request(p.cpu)
    task.set_memory_request(p.memory)
    if p.limit_cpu_memory:
        task.set_cpu_limit(p.cpu)
        task.set_memory_limit(p.memory)
    for key, value in p.annotations.items():
        kubernetes.add_pod_annotation(task, key, value)
    for key, value in p.node_selectors.items():
        kubernetes.add_node_selector(task, key, value)
    for key in p.tolerations:
        kubernetes.add_toleration(task, key=key, operator="Exists", effect="NoSchedule")
    return set_retries(task, p.retries if retries is None else retries)
