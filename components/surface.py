"""One declaration per step of how it meets the rest of the project: its surface.

Each step folder's ``surface.py`` lists its components' :class:`Surface` in ``SURFACES``: the config
section a component's parameters repeat (names, types, defaults), the parameters that are no field,
and the step's line in ``make run``'s console. ``pipelines/tools/params.py`` builds a run's step configs
from it (a value a step refuses fails before anything runs), ``tests/unit/architecture/test_parameter_surfaces.py``
checks the components against their sections through it, and ``pipelines/tools/run_local.py`` asks it for
a finished step's line. A new step is its folder and this declaration; nothing else lists it.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Optional

from trainer.configbase import ConfigBase


@dataclasses.dataclass(frozen=True)
class StepOutputs:
    """What a finished step left, as its executor output says.

    Attributes:
        artifacts: output artifact name -> its metadata.
        parameters: output parameter name -> its value (``Output`` for a returned value).
        task: the run's task (the steps' own records name theirs; this is for those that do not).
    """

    artifacts: Mapping[str, Mapping[str, Any]]
    parameters: Mapping[str, Any]
    task: Optional[str] = None

    def metadata(self, artifact: str) -> Mapping[str, Any]:
        """The metadata of one output artifact (empty when the step published none)."""
        return self.artifacts.get(artifact) or {}


@dataclasses.dataclass(frozen=True)
class Surface:
    """How one component meets its config section and the console.

    Attributes:
        component: the KFP component (its ``python_func`` is the adapter).
        config: the section its parameters repeat; None for a component that reads no section.
        aliases: parameter -> field where the names differ; ``field[i]`` is item i of a tuple field.
        step_only: parameters that are no field (artifacts' places, run ids, the step's own knobs).
        own_default: fields whose component default means something only a pipeline has, so it
            differs from the section's on purpose (the type must still agree).
        headline: the step's line in the console once it finished; None for no line.
        hub_secret: the component may download weights from a model hub or run a user's code: its
            pod gets the hub Secret's keys as environment variables (``pipelines/platform.py``).
        long_running: a run-time budget or timeout can keep it running for up to a week: its pod
            gets the long deadline (``pipelines/platform.py``).
        record: which record of a run its outputs are for the run report (``convert``,
            ``validate``, ``train``, ``evaluate``, ``benchmark``: ``components/report/local.py``
            finds them by it); None: none.
    """

    component: Any
    config: Optional[type[ConfigBase]] = None
    aliases: Mapping[str, str] = dataclasses.field(default_factory=dict)
    step_only: frozenset[str] = frozenset()
    own_default: frozenset[str] = frozenset()
    headline: Optional[Callable[[StepOutputs], str]] = None
    hub_secret: bool = False
    long_running: bool = False
    record: Optional[str] = None

    @property
    def name(self) -> str:
        """The component's name as a compiled pipeline spells it (``train-model``)."""
        return self.component.name

    @property
    def func(self) -> Callable[..., Any]:
        """The component's Python function (the adapter)."""
        return self.component.python_func


def step_folders() -> list[str]:
    """The steps: the folders of the ``components`` package with a ``component.py``, sorted.

    The package's ``__path__`` is read, so a folder added to it (a test's step) counts as well.
    """
    import components

    return sorted({p.parent.name for root in components.__path__ for p in Path(root).glob("*/component.py")})


def surfaces() -> dict[str, Surface]:
    """Component name -> its surface, from every step's ``surface.py`` (``SURFACES``)."""
    found: dict[str, Surface] = {}
    for step in step_folders():
        for surface in importlib.import_module(f"components.{step}.surface").SURFACES:
            found[surface.name] = surface
    return found


def recorded_by(record: str) -> tuple[str, ...]:
    """The components whose outputs are a run's ``record`` (:attr:`Surface.record`), in declaration order."""
    return tuple(name for name, surface in surfaces().items() if surface.record == record)


def surface_of(task_name: str) -> Optional[Surface]:
    """The surface of a run's task by its name there (``promote-model-2`` is ``promote-model``)."""
    return surfaces().get(re.sub(r"-\d+$", "", task_name))
