"""The launchers of a multi-worker training, by name (``TrainConfig.launcher``).

``local`` runs the workers as processes on this machine; the cluster launchers (``jobset``,
``job``) register here too. ``auto`` is resolved by :func:`choose_launcher`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Optional

from components.launchers.base import Launcher, LaunchError, WorkerSet
from trainer.registry import Registry

__all__ = [
    "LaunchError",
    "Launcher",
    "WorkerSet",
    "choose_launcher",
    "get_launcher",
    "launcher_names",
    "register",
]

# The cluster launchers import the kubernetes client: their module is imported on first use only.
_LAUNCHERS: Registry[Callable[[], Launcher]] = Registry(
    "launcher", ("components.launchers.builtins",), error=LaunchError, replace=True
)


def register(name: str, factory: Callable[[], Launcher]) -> None:
    """Registers a launcher factory under ``name`` (a later registration of the name replaces it)."""
    _LAUNCHERS.register(name, factory)


def launcher_names() -> list[str]:
    """The registered launchers' names, sorted."""
    return sorted(_LAUNCHERS.names())


def get_launcher(name: str) -> Launcher:
    """A new launcher of that name.

    Raises:
        LaunchError: no launcher has that name (the message lists the known ones).
    """
    return _LAUNCHERS.get(name)()


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
