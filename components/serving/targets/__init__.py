"""The serving targets by name: ``get_target("local")``, ``get_target("kubernetes", api_client=...)``.

Every module of this package but ``base`` holds target classes decorated with
:func:`~components.serving.targets.base.register`; they are imported on first use, so a new target
is one more module here (and, for a cluster target, its manifests) and nothing else. A target
module imports its client libraries inside its methods, so listing the names stays cheap.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from components.serving.targets.base import Endpoints, ServingTarget, StageUnavailable, register, registered

__all__ = ["Endpoints", "ServingTarget", "StageUnavailable", "get_target", "register", "target_class", "target_names"]


def _load_all() -> None:
    for module in pkgutil.iter_modules(__path__):
        if module.name != "base":
            importlib.import_module(f"{__name__}.{module.name}")


def target_names() -> list[str]:
    """The names of every serving target, sorted."""
    _load_all()
    return sorted(registered())


def target_class(name: str) -> type[ServingTarget]:
    """The class registered as ``name``.

    Raises:
        ValueError: no target has that name (the message lists those that exist).
    """
    _load_all()
    classes = registered()
    if name not in classes:
        raise ValueError(f"unknown serving target {name!r}: expected one of {sorted(classes)}")
    return classes[name]


def get_target(name: str, **options: Any) -> ServingTarget:
    """A target by its registry name, built with ``options`` (its constructor's keyword arguments).

    Raises:
        ValueError: no target has that name (the message lists those that exist).
    """
    return target_class(name)(**options)
