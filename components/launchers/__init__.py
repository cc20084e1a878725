"""The launchers of a multi-worker training, by name (``TrainConfig.launcher``).

``local`` runs the workers as processes on this machine; the cluster launchers (``jobset``,
``job``) register here too. ``auto`` is resolved by :func:`choose_launcher`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Optional

from components.launchers.base import Launcher, LaunchError, WorkerSet

__all__ = [
    "LaunchError",
    "Launcher",
    "WorkerSet",
    "choose_launcher",
    "get_launcher",
    "launcher_names",
    "register",
]

_REGISTRY: dict[str, Callable[[], Launcher]] = {}


def register(name: str, factory: Callable[[], Launcher]) -> None:
    """Registers a launcher factory under ``name`` (a later registration of the name replaces it)."""
    _REGISTRY[name] = factory


def launcher_names() -> list[str]:
    """The registered launchers' names, sorted."""
    _load_builtins()
    return sorted(_REGISTRY)


def get_launcher(name: str) -> Launcher:
    """A new launcher of that name.

    Raises:
        LaunchError: no launcher has that name (the message lists the known ones).
    """
    _load_builtins()
    if name not in _REGISTRY:
        raise LaunchError(f"launcher: no launcher named {name!r}; known: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]()


def in_cluster(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether this process runs in a Kubernetes pod (the service host Kubernetes sets is there)."""
    env = os.environ if environ is None else environ
    return bool(env.get("KUBERNETES_SERVICE_HOST"))


def choose_launcher(requested: str, environ: Optional[Mapping[str, str]] = None) -> str:
    """The launcher's name for ``TrainConfig.launcher``; ``auto`` decides here, and only here.

    ``auto`` is ``local`` outside a cluster; inside one it stays ``auto``: the cluster launcher
    that asks the API, when it starts, whether it serves JobSet (then ``jobset``, else ``job``).
    """
    if requested != "auto":
        return requested
    return "auto" if in_cluster(environ) else "local"


def _load_builtins() -> None:
    if "jobset" not in _REGISTRY:
        # The cluster launchers import the kubernetes client: loaded on first use only.
        from components.launchers.job import AutoClusterLauncher, IndexedJobLauncher
        from components.launchers.jobset import JobSetLauncher

        register("jobset", JobSetLauncher)
        register("job", IndexedJobLauncher)
        register("auto", AutoClusterLauncher)
    if "local" not in _REGISTRY:
        from components.launchers.local import LocalLauncher

        register("local", LocalLauncher)
