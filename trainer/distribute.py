"""One function that finds the accelerator and returns the matching ``tf.distribute`` strategy.

Detection order for ``accelerator="auto"``:

1. A Cloud TPU given by GKE's legacy "TPU Node" path: the pod's ``KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS``
   (``TPUClusterResolver()`` reads it), or ``TPU_NAME`` (a named TPU, e.g. on a GCE VM).
2. A TPU VM (current GKE TPU node pools, ``google.com/tpu``): the chips are local
   (``/dev/accel*`` or ``/dev/vfio``, or ``TPU_ACCELERATOR_TYPE``/``TPU_WORKER_ID`` set by GKE),
   resolver ``tpu='local'``.
3. Several GPUs: ``MirroredStrategy``; one GPU: ``OneDeviceStrategy``.
4. CPU: the default strategy.

An explicit ``tpu``/``gpu`` that cannot be met raises ``AcceleratorNotFoundError`` rather than
falling back silently to something 50x slower.
"""

from __future__ import annotations

import dataclasses
import glob
import logging
import os
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

ACCELERATORS = ("auto", "tpu", "gpu", "cpu")


class AcceleratorNotFoundError(RuntimeError):
    """An accelerator was asked for explicitly and is not there."""


@dataclasses.dataclass(frozen=True)
class TpuAddress:
    """Where a TPU was found: how to build its cluster resolver.

    Attributes:
        tpu: the ``tpu`` argument of ``TPUClusterResolver``: ``None`` (read
            ``KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS``), a TPU name or ``grpc://`` address, or ``"local"``.
        source: what revealed it, for the log.
    """

    tpu: str | None
    source: str


@dataclasses.dataclass(frozen=True)
class AcceleratorDefaults:
    """Training settings that suit an accelerator (docs/training.md).

    The precision is chosen apart, by :func:`choose_precision`: on a CPU it depends on the processor.

    Attributes:
        steps_per_execution: steps per host round trip.
        jit_compile: XLA compilation of the train step.
        drop_remainder: batches of a fixed shape (TPUs need static shapes).
    """

    steps_per_execution: int
    jit_compile: bool
    drop_remainder: bool


# CPU: no XLA (0.75x to 10x slower, measured on two CPUs); a few steps per execution trims Python
# overhead at no cost. TPU: many steps per execution because each host round trip is expensive,
# static shapes. GPU: XLA, which fuses this small model's element-wise ops.
DEFAULTS: Mapping[str, AcceleratorDefaults] = {
    "tpu": AcceleratorDefaults(64, True, True),
    "gpu": AcceleratorDefaults(8, True, False),
    "cpu": AcceleratorDefaults(4, False, False),
}


# oneDNN's CPU instruction-set levels in increasing order (its ``ONEDNN_MAX_CPU_ISA`` values); the
# bf16 dot-product units are used from AVX512_CORE_BF16 on. ALL and DEFAULT set no cap.
_ONEDNN_ISAS = (
    "SSE41",
    "AVX",
    "AVX2",
    "AVX2_VNNI",
    "AVX2_VNNI_2",
    "AVX512_CORE",
    "AVX512_CORE_VNNI",
    "AVX512_CORE_BF16",
    "AVX10_1_512",
    "AVX512_CORE_FP16",
    "AVX512_CORE_AMX",
    "AVX10_1_512_AMX",
    "AVX512_CORE_AMX_FP16",
    "AVX10_1_512_AMX_FP16",
)
_FIRST_BF16_ISA = _ONEDNN_ISAS.index("AVX512_CORE_BF16")
CPU_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
PRECISIONS = ("auto", "mixed_bfloat16", "mixed_float16", "float32")


@dataclasses.dataclass(frozen=True)
class PrecisionChoice:
    """The mixed-precision policy training uses, and why (recorded in ``training.json``).

    Attributes:
        policy: a Keras policy name: ``mixed_bfloat16``, ``mixed_float16`` or ``float32``.
        reason: one line saying what decided it.
    """

    policy: str
    reason: str


def cpu_flags(cpuinfo: str) -> set[str]:
    """The feature flags of the first processor in a ``/proc/cpuinfo`` text (x86 ``flags``, Arm ``Features``)."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def cpu_bf16_units(cpuinfo: str, environ: Mapping[str, str]) -> str | None:
    """Why oneDNN can run bfloat16 natively on this CPU, or ``None`` when it cannot.

    Native means the CPU has bf16 dot-product units (``avx512_bf16`` or ``amx_bf16``), oneDNN is on
    (``TF_ENABLE_ONEDNN_OPTS`` not ``0``) and ``ONEDNN_MAX_CPU_ISA`` does not hide them: elsewhere
    bfloat16 is emulated, which trained the detector 2.4x slower than float32.
    """
    found = sorted(CPU_BF16_FLAGS & cpu_flags(cpuinfo))
    if not found:
        return None
    if environ.get("TF_ENABLE_ONEDNN_OPTS", "").strip() == "0":
        return None
    cap = environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()
    if cap in _ONEDNN_ISAS and _ONEDNN_ISAS.index(cap) < _FIRST_BF16_ISA:
        return None
    return f"the CPU has {' and '.join(found)} and oneDNN uses them"


def gpu_precision(compute_capability: tuple[int, int] | None) -> PrecisionChoice:
    """The policy for a GPU of a CUDA compute capability (``None``: unknown, float16 assumed)."""
    if compute_capability is None:
        return PrecisionChoice("mixed_float16", "a GPU of unknown compute capability: float16 with loss scaling")
    major, minor = compute_capability
    if major >= 8:
        return PrecisionChoice("mixed_bfloat16", f"compute capability {major}.{minor} has bfloat16 tensor cores")
    if major >= 7:
        return PrecisionChoice(
            "mixed_float16", f"compute capability {major}.{minor}: float16 tensor cores, with loss scaling"
        )
    return PrecisionChoice("float32", f"compute capability {major}.{minor} has no tensor cores")


def choose_precision(
    requested: str,
    kind: str,
    *,
    cpuinfo: str | None = None,
    environ: Mapping[str, str] | None = None,
    gpu_capability: tuple[int, int] | None = None,
) -> PrecisionChoice:
    """The mixed-precision policy for an accelerator kind; ``requested`` other than ``auto`` always wins.

    Args:
        requested: ``auto`` or a policy name (the train config's ``precision``).
        kind: ``tpu``, ``gpu`` or ``cpu`` (:func:`accelerator_kind`).
        cpuinfo: the ``/proc/cpuinfo`` text (read when ``None`` and the kind is ``cpu``).
        environ: the environment (``os.environ`` when ``None``).
        gpu_capability: the first GPU's compute capability, for ``gpu``.

    Raises:
        ValueError: an unknown ``requested`` or ``kind``.
    """
    if requested not in PRECISIONS:
        raise ValueError(f"precision: expected one of {', '.join(PRECISIONS)}, got {requested!r}")
    if requested != "auto":
        return PrecisionChoice(requested, "set in the train config")
    if kind == "tpu":
        return PrecisionChoice("mixed_bfloat16", "TPUs compute in bfloat16")
    if kind == "gpu":
        return gpu_precision(gpu_capability)
    if kind != "cpu":
        raise ValueError(f"accelerator kind: expected tpu, gpu or cpu, got {kind!r}")
    if cpuinfo is None:
        cpuinfo = _read_cpuinfo()
    units = cpu_bf16_units(cpuinfo, os.environ if environ is None else environ)
    if units:
        return PrecisionChoice("mixed_bfloat16", units)
    return PrecisionChoice("float32", "the CPU has no bf16 units oneDNN can use (bfloat16 would be emulated)")


def precision_candidates(
    requested: str, choice: PrecisionChoice, kind: str, workers: int = 1, cpuinfo: str | None = None
) -> tuple[str, ...]:
    """The policies worth timing on this device for ``precision: auto``, the rule's ``choice`` first.

    A CPU with ``avx512_bf16`` units alone or a GPU with tensor cores offers a real choice whose
    speed the rule cannot know (bfloat16 trained at 0.89x of float32 on one CPU with
    ``avx512_bf16``, at 1.18x on another): ``trainer.budget.calibrate`` times each. A CPU with AMX
    tiles (``amx_bf16``) does not: bfloat16 ran the detector's step 2.7x faster than float32 there,
    and timing float32 would cost a budget half a minute (a second model built and traced). A TPU
    computes in bfloat16; a policy set in the config is kept; several workers (each would time and
    choose alone) keep the rule's.
    """
    if requested != "auto" or kind == "tpu" or workers > 1:
        return (choice.policy,)
    if kind == "cpu" and choice.policy == "mixed_bfloat16":
        if "amx_bf16" in cpu_flags(_read_cpuinfo() if cpuinfo is None else cpuinfo):
            return (choice.policy,)
    others = {
        "mixed_bfloat16": ("mixed_float16",) if kind == "gpu" else ("float32",),
        "mixed_float16": ("float32",),
        "float32": (),
    }[choice.policy]
    return (choice.policy, *others)


def gpu_capability() -> tuple[int, int] | None:
    """The first GPU's CUDA compute capability, or ``None`` when TensorFlow does not report one."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    capability = tf.config.experimental.get_device_details(gpus[0]).get("compute_capability")
    return tuple(capability) if capability else None


def _read_cpuinfo(path: str = "/proc/cpuinfo") -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:  # not Linux: no flags known, so no native bf16 assumed
        return ""


def find_tpu(environ: Mapping[str, str] | None = None, dev_root: str = "/dev") -> TpuAddress | None:
    """Looks for a TPU without touching TensorFlow.

    Args:
        environ: the environment to read (``os.environ`` by default).
        dev_root: where device files live (a test can point it at a temporary folder).

    Returns:
        Where the TPU is, or ``None`` when there is no sign of one.
    """
    env = os.environ if environ is None else environ
    if env.get("KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS"):
        return TpuAddress(None, "KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS (GKE TPU Node)")
    if env.get("TPU_NAME"):
        return TpuAddress(env["TPU_NAME"], "TPU_NAME")
    if glob.glob(os.path.join(dev_root, "accel[0-9]*")) or glob.glob(os.path.join(dev_root, "vfio", "[0-9]*")):
        return TpuAddress("local", f"TPU devices under {dev_root} (TPU VM)")
    if env.get("TPU_ACCELERATOR_TYPE") or env.get("TPU_WORKER_ID"):
        return TpuAddress("local", "TPU_ACCELERATOR_TYPE/TPU_WORKER_ID (GKE TPU VM)")
    return None


def accelerator_kind(strategy: Any) -> str:
    """Names what a strategy runs on: ``tpu``, ``gpu`` or ``cpu``."""
    import tensorflow as tf

    if isinstance(strategy, tf.distribute.TPUStrategy):
        return "tpu"
    if strategy is tf.distribute.get_strategy() and not tf.distribute.has_strategy():
        # The default strategy places ops on the first GPU when there is one.
        return "gpu" if tf.config.list_logical_devices("GPU") else "cpu"
    devices = strategy.extended.worker_devices
    return "gpu" if any("GPU" in d.upper() for d in devices) else "cpu"


def strategy_name(strategy: Any) -> str:
    """The strategy's public name (``MultiWorkerMirroredStrategy``'s class is a private subclass)."""
    import tensorflow as tf

    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return "MultiWorkerMirroredStrategy"
    return type(strategy).__name__


def get_strategy(accelerator: str = "auto") -> Any:
    """Finds the accelerator and returns its ``tf.distribute.Strategy``.

    Args:
        accelerator: ``auto`` to detect; ``tpu``, ``gpu`` or ``cpu`` to demand one.

    Returns:
        ``TPUStrategy``, ``MirroredStrategy`` (several GPUs), ``OneDeviceStrategy`` (one GPU) or the
        default strategy (CPU). ``accelerator_kind(strategy)`` names it.

    Raises:
        ValueError: an unknown ``accelerator`` value.
        AcceleratorNotFoundError: ``tpu`` or ``gpu`` asked for and not found, or a TPU found but
            not reachable.
    """
    if accelerator not in ACCELERATORS:
        raise ValueError(f"accelerator: expected one of {', '.join(ACCELERATORS)}, got {accelerator!r}")
    import tensorflow as tf

    if accelerator in ("auto", "tpu"):
        address = find_tpu()
        if address is not None:
            return _tpu_strategy(address)
        if accelerator == "tpu":
            raise AcceleratorNotFoundError(
                "accelerator: 'tpu' was asked for but no TPU was found: no KUBE_GOOGLE_CLOUD_TPU_ENDPOINTS "
                "or TPU_NAME in the environment and no TPU devices (/dev/accel*, /dev/vfio). On GKE, give the "
                "pod a TPU (pipelines.accelerators preset 'tpu-v2-8' or 'gke-tpu-...'), or use "
                "accelerator 'auto' or 'cpu' to train without one."
            )

    gpus = tf.config.list_logical_devices("GPU") if accelerator in ("auto", "gpu") else []
    if len(gpus) > 1:
        log.info("accelerator: %d GPUs, MirroredStrategy", len(gpus))
        return tf.distribute.MirroredStrategy()
    if len(gpus) == 1:
        log.info("accelerator: one GPU (%s)", gpus[0].name)
        return tf.distribute.OneDeviceStrategy(gpus[0].name)
    if accelerator == "gpu":
        raise AcceleratorNotFoundError(
            "accelerator: 'gpu' was asked for but TensorFlow sees no GPU (CUDA_VISIBLE_DEVICES="
            f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!r}). Install the GPU build "
            "(pip install 'lean-tpu-pipelines[gpu]'), give the pod 'nvidia.com/gpu' (preset 'gpu-1'), "
            "or use accelerator 'auto' or 'cpu'."
        )
    log.info("accelerator: CPU (%d logical devices), default strategy", len(tf.config.list_logical_devices("CPU")))
    return tf.distribute.get_strategy()


def _tpu_strategy(address: TpuAddress) -> Any:
    import tensorflow as tf

    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=address.tpu)
        if address.tpu != "local":
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as err:
        raise AcceleratorNotFoundError(
            f"accelerator: a TPU was indicated by {address.source} (tpu={address.tpu!r}) but could not be "
            f"initialised: {err}. Check that the TPU is up and that the image's TensorFlow version matches "
            "the pod's tf-version.cloud-tpus.google.com annotation."
        ) from err
    strategy = tf.distribute.TPUStrategy(resolver)
    log.info("accelerator: TPU from %s, %d cores, TPUStrategy", address.source, strategy.num_replicas_in_sync)
    return strategy
