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
    """Training settings that suit an accelerator.

    Attributes:
        precision: the Keras mixed-precision policy name.
        steps_per_execution: steps per host round trip.
        jit_compile: XLA compilation of the train step.
        drop_remainder: batches of a fixed shape (TPUs need static shapes).
    """

    precision: str
    steps_per_execution: int
    jit_compile: bool
    drop_remainder: bool


# CPU: float32 (bfloat16 measured 2.4x slower here, 8x with oneDNN) and no XLA (7-10x slower here);
# a few steps per execution trims Python overhead at no cost. TPU: bfloat16 on the MXU, many steps
# per execution because each host round trip is expensive, static shapes. GPU: float16 tensor cores
# and XLA, which fuses this small model's element-wise ops.
DEFAULTS: Mapping[str, AcceleratorDefaults] = {
    "tpu": AcceleratorDefaults("mixed_bfloat16", 64, True, True),
    "gpu": AcceleratorDefaults("mixed_float16", 8, True, False),
    "cpu": AcceleratorDefaults("float32", 4, False, False),
}


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
