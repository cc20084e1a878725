"""The serving-target seam: where a stage's models are served, and the URLs they answer at.

A target is one class, a subclass of :class:`ServingTarget` decorated with :func:`register`, in
a module of this package; the registry (``components.serving.targets``) finds it by its name.
Promote, rollback, monitor and ``make serve`` only ever talk to a target through this interface.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, ClassVar, Optional

if TYPE_CHECKING:
    from trainer.config import MonitorConfig, PromoteConfig


class StageUnavailable(RuntimeError):
    """A stage's servers are not up where the target looks (missing, or not ready): no URL would
    answer for it. The message says which server and what its status reports.
    """


@dataclasses.dataclass(frozen=True)
class Endpoints:
    """Where each model of a stage answers.

    A target with one server per stage gives every model the same URL; a target with one
    server per model (one InferenceService each) gives each its own.

    Attributes:
        urls: model name -> the REST base URL its ``/v1/models/<name>`` is under.
        metrics_urls: model name -> its server's Prometheus metrics page, where the target knows it.
        canary_urls: model name -> the URL only its canary (the new version, while it takes a
            share of the traffic) answers at; absent where no canary is in progress.
    """

    urls: Mapping[str, str]
    metrics_urls: Mapping[str, str] = dataclasses.field(default_factory=dict)
    canary_urls: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def url(self, model_name: str) -> str:
        """The REST base URL of ``model_name``.

        Raises:
            KeyError: the stage does not serve that model here.
        """
        if model_name not in self.urls:
            raise KeyError(f"no endpoint for model {model_name!r}: this stage serves {sorted(self.urls)} here")
        return self.urls[model_name]

    def canary_url(self, model_name: str) -> str:
        """The URL only ``model_name``'s canary answers at; its shared URL where no canary is in progress.

        Raises:
            KeyError: the stage does not serve that model here.
        """
        return self.canary_urls.get(model_name) or self.url(model_name)

    def metrics_url(self, model_name: str) -> Optional[str]:
        """The metrics page of ``model_name``'s server, or None where the target does not know it."""
        return self.metrics_urls.get(model_name)


class ServingTarget(abc.ABC):
    """Where a stage serves its models: a loopback server, a Kubernetes Deployment, ...

    ``models`` arguments are the whole set a stage is to serve, model name -> version; ``changed``
    names the model whose version this action changes (absent from ``models`` when its first
    version failed and the stage returns to serving only the others).

    Attributes:
        name: the registry name (``PromoteConfig.target``, ``MonitorConfig.target``).
        load_profile: which default load tests the target's stages run (``trainer.config.LOAD_TESTS``):
            ``cluster`` (servers in a cluster) or ``loopback`` (a server on the step's machine).
    """

    name: ClassVar[str]
    load_profile: ClassVar[str]

    @classmethod
    def from_config(cls, config: PromoteConfig | MonitorConfig) -> ServingTarget:
        """The target a step's config asks for, with the settings of it this target takes (a
        promotion's canary steps, a mode); the default takes none. The monitor only asks for
        :meth:`endpoints`, so a MonitorConfig carries no such settings.
        """
        return cls()

    @abc.abstractmethod
    def check(self, stages_root: str) -> None:
        """Refuse a stage store this target cannot serve from, before anything is published.

        Raises:
            ValueError: the target cannot serve models from ``stages_root``.
        """

    @abc.abstractmethod
    def serve(self, stages_root: str, stage: str, models: Mapping[str, int], changed: str, timeout_s: float) -> None:
        """Make ``stage`` serve ``models`` (``changed`` at its new version) and wait until it does.

        Raises:
            Exception: the stage did not come to serve them (the caller rolls back).
        """

    @abc.abstractmethod
    def restore(self, stages_root: str, stage: str, models: Mapping[str, int], changed: str, timeout_s: float) -> None:
        """Return ``stage`` to serving ``models`` (a rollback of ``changed``) and wait until it does."""

    @abc.abstractmethod
    def endpoints(self, stages_root: str, stage: str, models: Mapping[str, int]) -> AbstractContextManager[Endpoints]:
        """Where the stage's ``models`` answer, for as long as the context is open.

        A target whose servers run elsewhere just names their URLs; one that runs them itself
        (a loopback server) runs them for the duration.

        Raises:
            StageUnavailable: the target can tell that a model's server is missing or not ready.
        """

    def canary_steps(self) -> tuple[int, ...]:
        """The traffic shares (percent, the last 100) a new version takes one after the other.

        Empty (the default) where the target cannot split traffic: :meth:`serve` replaces the
        version at once and a failure rolls back. A target that returns steps implements
        :meth:`serve_canary`.
        """
        return ()

    def serve_canary(
        self, stages_root: str, stage: str, models: Mapping[str, int], changed: str, percent: int, timeout_s: float
    ) -> None:
        """Send ``percent`` of ``changed``'s traffic to its new version in ``models`` (the rest to the
        version it served before) and wait until the split is in place; 100 promotes it fully.

        Raises:
            NotImplementedError: the target cannot split traffic (its :meth:`canary_steps` is empty).
            Exception: the canary did not come to serve (the caller rolls back with :meth:`restore`).
        """
        raise NotImplementedError(f"serving target {self.name!r} cannot split traffic: it has no canary steps")

    def checks_timeout_s(self, rollout_timeout_s: float) -> float:
        """How long a serving check waits for the stage to answer, given the rollout timeout."""
        return rollout_timeout_s


_TARGETS: dict[str, type[ServingTarget]] = {}


def register(cls: type[ServingTarget]) -> type[ServingTarget]:
    """Class decorator: list a target in the registry under ``cls.name``.

    Raises:
        ValueError: another class already has that name.
    """
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"a serving target needs a non-empty class attribute name, {cls.__name__} has {name!r}")
    if _TARGETS.get(name, cls) is not cls:
        raise ValueError(
            f"serving target name {name!r} is taken by {_TARGETS[name].__name__}; {cls.__name__} needs another"
        )
    _TARGETS[name] = cls
    return cls


def registered() -> Mapping[str, type[ServingTarget]]:
    """The registered target classes by name (those whose modules are imported)."""
    return dict(_TARGETS)
