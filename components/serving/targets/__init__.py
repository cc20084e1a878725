"""The serving targets by name: ``get_target("local", StageRegistry(root), {"port": 8600})``.

Every module of this package but ``base`` holds target classes decorated with
:func:`~components.serving.targets.base.register`, and so may any module named in
``LTP_EXTENSIONS`` (:mod:`trainer.extensions`); they are imported on the first look-up, so a new
target is one module (its class and its typed options) and, for a cluster target, its manifests.
A target module imports its client libraries inside its methods, so listing the names stays cheap.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

from components.serving.targets.base import (
    TARGETS,
    Endpoints,
    ServingTarget,
    StageUnavailable,
    TargetError,
    TargetSettings,
    register,
)

if TYPE_CHECKING:
    from components.serving.stages import StageRegistry
    from trainer.configbase import ConfigBase

__all__ = [
    "Endpoints",
    "ServingTarget",
    "StageUnavailable",
    "TargetError",
    "TargetSettings",
    "get_target",
    "register",
    "target_class",
    "target_names",
]


def target_names() -> list[str]:
    """The names of every serving target, sorted (built-in and ``LTP_EXTENSIONS``).

    Raises:
        TargetError: a module named in ``LTP_EXTENSIONS`` cannot be imported.
    """
    return sorted(TARGETS.names())


def target_class(name: str) -> type[ServingTarget]:
    """The class registered as ``name``.

    Raises:
        TargetError: no target has that name (the message lists those that exist).
    """
    return TARGETS.get(name)


def get_target(
    name: str,
    stages: StageRegistry,
    options: Mapping[str, Any] | ConfigBase | None = None,
    settings: Optional[TargetSettings] = None,
    **dependencies: Any,
) -> ServingTarget:
    """The target registered as ``name``, built for ``stages`` with its own ``options`` and the generic ``settings``.

    Args:
        name: the target's registry name (``PromoteConfig.target``).
        stages: the stage registry of the step.
        options: the target's own settings (``serving_options``); None: its defaults.
        settings: the generic settings (canary steps); None: the defaults.
        **dependencies: what the target's class takes besides (a cluster target's ``api_client``).

    Raises:
        TargetError: no target has that name (the message lists those that exist), or options it
            does not take (the message lists the ones it does).
    """
    return target_class(name)(stages, options, settings, **dependencies)
