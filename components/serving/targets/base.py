"""The serving-target seam: where a stage's models are served, and the URLs they answer at.

A target is one module of this package (or of an ``LTP_EXTENSIONS`` module) holding a subclass of
:class:`ServingTarget` decorated with :func:`register`, and its typed options: the settings of
its own that a step's ``serving_options`` gives (``{mode: standard}`` for kserve), parsed
strictly into its ``options_type``. Every target is built the same way: from the stage registry
of the step, its own options and the generic settings (:class:`TargetSettings`). The registry
(:data:`TARGETS`) imports the package's target modules and the extension modules on the first
look-up. Promote, rollback, monitor and ``make serve`` only ever talk to a target through this
interface.
"""

from __future__ import annotations

import abc
import dataclasses
import pkgutil
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from trainer.configbase import ConfigBase, ConfigError
from trainer.registry import Registry

if TYPE_CHECKING:
    from components.serving.stages import StageRegistry

OPTIONS_FIELD = "serving_options"
"""The config field (and run-form parameter) whose keys are the target's own options."""


class TargetError(ValueError):
    """A serving target is unknown, declared wrongly, or given options it does not take; the message
    names the valid ones.
    """


class StageUnavailable(RuntimeError):
    """A stage's servers are not up where the target looks (missing, or not ready): no URL would
    answer for it. The message says which server and what its status reports.
    """


def check_canary_steps(steps: Sequence[int]) -> tuple[int, ...]:
    """``steps`` as canary steps: increasing percentages in 1..100, the last 100.

    Raises:
        TargetError: they are not.
    """
    checked = tuple(int(s) for s in steps)
    if not checked or checked[-1] != 100 or list(checked) != sorted(set(checked)) or checked[0] <= 0:
        raise TargetError(
            f"canary_steps must be increasing percentages in 1..100 ending with 100 (e.g. 10, 50, 100), got {checked}"
        )
    return checked


@dataclasses.dataclass(frozen=True)
class TargetSettings:
    """The generic settings every target is built with: a step config's serving fields that are no
    target's own (each target reads the ones it can use).

    Attributes:
        canary_steps: the traffic shares (percent, increasing, the last 100) a new version takes
            one after the other on a target that splits traffic; None: the target's default.

    Raises:
        TargetError: ``canary_steps`` are not increasing percentages ending with 100.
    """

    canary_steps: Optional[tuple[int, ...]] = None

    def __post_init__(self) -> None:
        if self.canary_steps is not None:
            object.__setattr__(self, "canary_steps", check_canary_steps(self.canary_steps))


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

    Args:
        stages: the stage registry the step acts on (built once per step from its stages root).
        options: the target's own settings (a step's ``serving_options``), a mapping or an
            ``options_type`` instance; None: the defaults.
        settings: the generic settings (canary steps); None: the defaults.

    Attributes:
        name: the registry name (``PromoteConfig.target``, ``MonitorConfig.target``).
        load_profile: which default load tests the target's stages run (``components.serving.config.LOAD_TESTS``):
            ``cluster`` (servers in a cluster) or ``loopback`` (a server on the step's machine).
        options_type: the target's typed options (a frozen ConfigBase whose ``_section`` is
            ``serving_options.``): unknown keys and wrong types are errors that name the valid ones.
        serving_formats: the forms of a model it can serve (``PromoteConfig.serving_format``): the
            SavedModel by default (TensorFlow Serving serves nothing else).
        forms: model name -> the form its version is served in (``saved_model``, ``litert_int8``,
            ...), for the models the next :meth:`serve`, :meth:`serve_canary` or :meth:`restore`
            serves; set by the promotion from the stage's version folders (absent: the SavedModel).
            A target that serves a portable format differently (kserve) reads it.

    Raises:
        TargetError: ``options`` has a key the target does not take, or a value of the wrong type.
    """

    name: ClassVar[str]
    load_profile: ClassVar[str]
    options_type: ClassVar[type[ConfigBase]]
    serving_formats: ClassVar[tuple[str, ...]] = ("saved_model",)

    def __init__(
        self,
        stages: StageRegistry,
        options: Mapping[str, Any] | ConfigBase | None = None,
        settings: Optional[TargetSettings] = None,
    ) -> None:
        self.stages = stages
        self.options = options if isinstance(options, self.options_type) else self.parse_options(options or {})
        self.settings = settings if settings is not None else TargetSettings()
        self.forms: dict[str, str] = {}

    @classmethod
    def parse_options(cls, options: Mapping[str, Any]) -> ConfigBase:
        """The typed options from a mapping (strict: unknown keys and wrong types are errors).

        Raises:
            TargetError: an unknown key (the message lists the known ones) or a wrong value.
        """
        try:
            return cls.options_type.from_dict(options, _prefix=f"{OPTIONS_FIELD}.")
        except ConfigError as err:
            raise TargetError(f"serving target {cls.name!r}: {err}") from None

    def check_registry(self, stages_root: str) -> None:
        """Refuse a step whose stages root is not the one this target's registry is under.

        Raises:
            TargetError: the roots differ (records would go to one store, models served from another).
        """
        if self.stages.root != stages_root:
            raise TargetError(
                f"serving target {self.name!r} was built for the stage registry under {self.stages.root!r}, but the "
                f"step's stages_root is {stages_root!r}; expected the same root"
            )

    @abc.abstractmethod
    def check(self) -> None:
        """Refuse a stage store this target cannot serve from, before anything is published.

        Raises:
            ValueError: the target cannot serve models from its registry's root.
        """

    @abc.abstractmethod
    def serve(self, stage: str, models: Mapping[str, int], changed: str, timeout_s: float) -> None:
        """Make ``stage`` serve ``models`` (``changed`` at its new version) and wait until it does.

        Raises:
            Exception: the stage did not come to serve them (the caller rolls back).
        """

    @abc.abstractmethod
    def restore(self, stage: str, models: Mapping[str, int], changed: str, timeout_s: float) -> None:
        """Return ``stage`` to serving ``models`` (a rollback of ``changed``) and wait until it does."""

    @abc.abstractmethod
    def endpoints(self, stage: str, models: Mapping[str, int]) -> AbstractContextManager[Endpoints]:
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

    def serve_canary(self, stage: str, models: Mapping[str, int], changed: str, percent: int, timeout_s: float) -> None:
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


# The package's own modules are the built-in targets: a new one is one more module here.
_BUILTIN_MODULES = tuple(
    f"{__package__}.{module.name}"
    for module in pkgutil.iter_modules([str(Path(__file__).parent)])
    if module.name != "base"
)

TARGETS: Registry[type[ServingTarget]] = Registry("serving target", _BUILTIN_MODULES, error=TargetError)
"""The target classes by name: the package's modules, then the ``LTP_EXTENSIONS`` modules'."""


def register(cls: type[ServingTarget]) -> type[ServingTarget]:
    """Class decorator: list a target in the registry under ``cls.name``.

    Raises:
        TargetError: the class has no name or no typed options, or another class has the name.
    """
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise TargetError(f"a serving target needs a non-empty class attribute name, {cls.__name__} has {name!r}")
    options = getattr(cls, "options_type", None)
    if not (isinstance(options, type) and issubclass(options, ConfigBase)):
        raise TargetError(
            f"serving target {name!r} needs options_type, a ConfigBase of its own settings, {cls.__name__} has "
            f"{options!r}"
        )
    return TARGETS.register(name, cls)
