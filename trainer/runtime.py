"""The process environment TensorFlow reads once, when it is imported: set by every entry point.

TensorFlow reads ``TF_ENABLE_ONEDNN_OPTS`` and ``TF_CPP_MIN_LOG_LEVEL`` when it loads, so they must be
in the environment before the first ``import tensorflow``. Every entry point that may import it calls
``configure_tensorflow_env()`` first: the command lines' ``main()``, the body of every KFP component,
and the image's ``ENV`` (Dockerfile). Importing this module changes nothing.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from typing import Optional

# oneDNN kernels make CPU training about 2x faster here (docs/training.md), but TensorFlow leaves
# them off on AVX2-only CPUs. Level 1 hides TensorFlow's INFO lines (they bury the step's own log).
TENSORFLOW_ENV: Mapping[str, str] = {"TF_ENABLE_ONEDNN_OPTS": "1", "TF_CPP_MIN_LOG_LEVEL": "1"}

_log = logging.getLogger(__name__)


# Where the compiled pipelines mount the project's Secret as files (pipelines/platform.py), and the
# key in it that holds a service account's JSON key, for clusters without Workload Identity.
CREDENTIALS_DIR = "/var/secrets/lean-tpu-pipelines"
CREDENTIALS_KEY = "gcp-key.json"


def use_mounted_credentials(environ: Optional[dict[str, str]] = None, folder: Optional[str] = None) -> Optional[str]:
    """Points ``GOOGLE_APPLICATION_CREDENTIALS`` at the mounted key file, where there is one and it is unset.

    google-cloud-storage and TensorFlow's ``gs://`` reader both read that variable; without it (and
    without a key in the Secret) they use the pod's own identity (Workload Identity).

    Args:
        environ: the environment to set (``os.environ`` by default).
        folder: where the Secret is mounted (``LTP_CREDENTIALS_DIR``, else :data:`CREDENTIALS_DIR`).

    Returns:
        The key file now in use, or None.
    """
    environ = os.environ if environ is None else environ
    if environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return environ["GOOGLE_APPLICATION_CREDENTIALS"]
    key = os.path.join(folder or environ.get("LTP_CREDENTIALS_DIR") or CREDENTIALS_DIR, CREDENTIALS_KEY)
    if not os.path.isfile(key):
        return None
    environ["GOOGLE_APPLICATION_CREDENTIALS"] = key
    return key


def configure_tensorflow_env() -> dict[str, str]:
    """Sets TensorFlow's load-time environment (``TENSORFLOW_ENV``) where the user has not set it.

    A value already in the environment (the user's, the image's) wins. Call it before anything
    imports TensorFlow; called later, it still sets the variables (for child processes) but logs a
    warning, since this process's TensorFlow has already read them.

    Returns:
        The values in effect now, name -> value.
    """
    missing = [name for name in TENSORFLOW_ENV if name not in os.environ]
    if missing and "tensorflow" in sys.modules:
        _log.warning(
            "configure_tensorflow_env() was called after TensorFlow was imported: %s take effect only in "
            "child processes; call it first thing in the entry point",
            ", ".join(missing),
        )
    for name in missing:
        os.environ[name] = TENSORFLOW_ENV[name]
    use_mounted_credentials()
    return {name: os.environ[name] for name in TENSORFLOW_ENV}
