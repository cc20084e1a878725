"""The launchers of a training across several workers, by name (``jobset``, ``job``, ``local``)."""

from __future__ import annotations

from components.train.launchers.base import Launcher, LaunchError, WorkerSet

_LAUNCHERS: dict[str, type[Launcher]] = {}


def register(cls: type[Launcher]) -> type[Launcher]:
    """Registers a launcher class under its ``name`` (usable as a class decorator)."""
    _LAUNCHERS[cls.name] = cls
    return cls


def _load_builtins() -> None:
    # Imported on first use: the cluster launchers import the kubernetes client.
    from components.train.launchers import job, jobset  # noqa: F401


def launcher_names() -> list[str]:
    """The registered launchers' names."""
    _load_builtins()
    return sorted(_LAUNCHERS)


def get_launcher(name: str) -> Launcher:
    """A launcher by name.

    Raises:
        LaunchError: no launcher has that name (the message lists those that do).
    """
    _load_builtins()
    if name not in _LAUNCHERS:
        raise LaunchError(f"launcher: unknown {name!r}; expected one of {', '.join(sorted(_LAUNCHERS))}")
    return _LAUNCHERS[name]()


__all__ = ["LaunchError", "Launcher", "WorkerSet", "get_launcher", "launcher_names", "register"]
