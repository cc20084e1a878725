"""A serving target from outside the package: it serves nothing and records what it was asked to serve.

``LTP_EXTENSIONS=tests.toy_target`` registers it (``trainer/extensions.py``), with nothing outside
``tests/`` changed: the proof that a target is one module, its settings included
(``tests/unit/architecture/test_target_seam.py`` promotes and rolls back through it). Its own setting is
``region`` (``serving_options.region``), which names the URLs it gives; it splits traffic when the
step sets ``canary_steps``.

Every action is appended to ``<stages root>/toy-target/<stage>.json``: a list of
``{"action", "models", "changed", "region", "percent"}`` records, oldest first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Optional

from components.serving.targets import Endpoints, ServingTarget, register
from trainer import storage
from trainer.configbase import ConfigBase

LOG_FOLDER = "toy-target"


@dataclasses.dataclass(frozen=True)
class ToyOptions(ConfigBase):
    """The toy target's own settings (``serving_options``).

    Attributes:
        region: where its pretend servers run: each model answers at
            ``http://<model>.<stage>.<region>.toy``.
    """

    _section: ClassVar[str] = "serving_options."

    region: str = "nowhere"

    def validate(self) -> None:
        if not self.region.isalnum():
            self._fail("region", f"must be letters and digits (it becomes a host name), got {self.region!r}")


def log_path(stages_root: str, stage: str) -> str:
    """Where the toy target records a stage's actions."""
    return storage.join(stages_root, LOG_FOLDER, f"{stage}.json")


def read_log(stages_root: str, stage: str) -> list[dict[str, Any]]:
    """The actions the toy target was asked for at ``stage``, oldest first (empty: none)."""
    return storage.read_json(log_path(stages_root, stage)) or []


@register
class ToyTarget(ServingTarget):
    """Serves nothing: each action is a record under the stage root, each URL a name in ``region``."""

    name = "toy"
    load_profile = "loopback"
    options_type = ToyOptions
    _canary: Optional[str] = None  # the model whose canary is in progress

    def check(self) -> None:
        """Any stage store will do: nothing reads the models."""

    def canary_steps(self) -> tuple[int, ...]:
        """The step's canary steps; none by default."""
        return self.settings.canary_steps or ()

    def serve(self, stage: str, models: Mapping[str, int], changed: str, timeout_s: float) -> None:
        """Records the models the stage is to serve."""
        self._canary = None
        self._record(stage, "serve", models, changed)

    def serve_canary(self, stage: str, models: Mapping[str, int], changed: str, percent: int, timeout_s: float) -> None:
        """Records the share of ``changed``'s traffic its new version is to take."""
        self._canary = changed if percent < 100 else None
        self._record(stage, "canary", models, changed, percent)

    def restore(self, stage: str, models: Mapping[str, int], changed: str, timeout_s: float) -> None:
        """Records the models the stage is to serve again."""
        self._canary = None
        self._record(stage, "restore", models, changed)

    @contextlib.contextmanager
    def endpoints(self, stage: str, models: Mapping[str, int]) -> Iterator[Endpoints]:
        """Each model's URL in the region; a canary in progress has one of its own."""
        region = self.options.region
        urls = {name: f"http://{name}.{stage}.{region}.toy" for name in models}
        canaries = {self._canary: f"http://canary-{self._canary}.{stage}.{region}.toy"} if self._canary else {}
        yield Endpoints(urls=urls, canary_urls=canaries)

    def _record(
        self, stage: str, action: str, models: Mapping[str, int], changed: str, percent: Optional[int] = None
    ) -> None:
        entries = read_log(self.stages.root, stage)
        entries.append(
            {
                "action": action,
                "models": dict(models),
                "changed": changed,
                "region": self.options.region,
                "percent": percent,
            }
        )
        storage.write_text(log_path(self.stages.root, stage), json.dumps(entries, indent=1))
