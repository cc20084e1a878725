"""Target ``local``: a loopback model server over the stage's model folders, run while it is used."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Optional

from components.serving.targets.base import Endpoints, ServingTarget, register

if TYPE_CHECKING:
    from trainer.config import MonitorConfig, PromoteConfig

CHECKS_TIMEOUT_S = 60.0
"""The loopback server is up once :meth:`LocalTarget.endpoints` yields: no rollout to wait for."""


@register
class LocalTarget(ServingTarget):
    """Serves a stage from its registry folders with :class:`~components.serving.server.ModelServer`.

    Nothing runs between actions: serving a version is publishing it (done before the target is
    asked), so :meth:`serve` and :meth:`restore` have nothing to do, and :meth:`endpoints` starts
    the server. A stage store on GCS is downloaded first (the versions served only).

    With canary steps, a new version first takes a share of its model's traffic on the server
    (:class:`~components.serving.server.Split`), and a second server answers as the canary alone.

    Args:
        host: the address the server listens on.
        port: its port; 0 picks a free one.
        canary_steps: the new version's traffic shares (increasing, the last 100); empty: none,
            a new version replaces the old at once.
    """

    name = "local"
    load_profile = "loopback"

    def __init__(self, host: str = "127.0.0.1", port: int = 0, canary_steps: Sequence[int] = ()):
        steps = tuple(int(s) for s in canary_steps)
        if steps and (steps[-1] != 100 or list(steps) != sorted(set(steps)) or steps[0] <= 0):
            raise ValueError(f"canary_steps must be increasing percentages in 1..100 ending with 100, got {steps}")
        self.host = host
        self.port = port
        self.steps = steps
        self._split: Optional[tuple[str, int, int]] = None  # (model, canary version, percent) in progress

    @classmethod
    def from_config(cls, config: PromoteConfig | MonitorConfig) -> LocalTarget:
        """A promotion's ``config.canary_steps`` (None: no canary); a monitor's config: no canary."""
        from trainer.config import PromoteConfig

        return cls(canary_steps=(config.canary_steps or ()) if isinstance(config, PromoteConfig) else ())

    def check(self, stages_root: str) -> None:
        """Any stage store will do: a folder is served as it is, a gs:// one downloaded."""

    def canary_steps(self) -> tuple[int, ...]:
        """The configured steps (none by default)."""
        return self.steps

    def serve(self, stages_root: str, stage: str, models: Mapping[str, int], changed: str, timeout_s: float) -> None:
        """Nothing to do but end a split: the published folder is what :meth:`endpoints` serves."""
        self._split = None

    def serve_canary(
        self, stages_root: str, stage: str, models: Mapping[str, int], changed: str, percent: int, timeout_s: float
    ) -> None:
        """Remembers the split :meth:`endpoints` serves: ``percent`` of ``changed``'s requests to its new version."""
        if not self.steps:
            super().serve_canary(stages_root, stage, models, changed, percent, timeout_s)
        self._split = (changed, models[changed], percent) if percent < 100 else None

    def restore(self, stages_root: str, stage: str, models: Mapping[str, int], changed: str, timeout_s: float) -> None:
        """Nothing to do but end a split: the retired version left the folder :meth:`endpoints` serves."""
        self._split = None

    @contextlib.contextmanager
    def endpoints(self, stages_root: str, stage: str, models: Mapping[str, int]) -> Iterator[Endpoints]:
        """Run one loopback server with every model of ``models``; each model's URL is the server's.

        One model is served at its given version; several each at their newest version in
        service (the server pins one model only), which is the version a consistent registry
        records. While a canary is in progress its model's traffic is split between the new
        version and the one before it, and a second server on another port serves the canary alone.

        Raises:
            ValueError: ``models`` is empty.
            FileNotFoundError: a model has no such version in service.
            OSError: the port is taken.
        """
        from components.serving.server import ModelServer, Split

        if not models:
            raise ValueError(f"{stage}: no model to serve; expected at least one name -> version")
        split = self._split if self._split is not None and self._split[0] in models else None
        with contextlib.ExitStack() as stack:
            pairs = [(name, self._local_base(stack, stages_root, stage, name, models[name])) for name in sorted(models)]
            version = next(iter(models.values())) if len(models) == 1 and split is None else None
            server = stack.enter_context(
                ModelServer(
                    pairs, host=self.host, port=self.port, version=version, split=Split(*split) if split else None
                )
            )
            canaries = {}
            if split is not None:
                base = dict(pairs)[split[0]]
                canary = stack.enter_context(ModelServer(base, split[0], host=self.host, version=split[1]))
                canaries[split[0]] = canary.url
            metrics = {name: server.metrics_url for name in models if server.metrics_url is not None}
            yield Endpoints(urls={name: server.url for name in models}, metrics_urls=metrics, canary_urls=canaries)

    def _local_base(self, stack: contextlib.ExitStack, stages_root: str, stage: str, name: str, version: int) -> str:
        """The model's base path on this machine: a gs:// store's versions in service are downloaded
        (only ``version``, and the one before it while a canary of ``name`` is in progress).
        """
        from components.serving import stages
        from trainer import storage

        base = stages.model_base_path(stages_root, stage, name)
        if not storage.is_gcs(base):
            return base
        wanted = [version]
        if self._split is not None and self._split[0] == name:
            wanted = [v for v in stages.list_versions(stages_root, stage, name) if v <= version][-2:]
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"stage-{name}-"))
        for v in wanted:
            storage.copy_tree(stages.version_path(stages_root, stage, name, v), f"{tmp}/{v}")
        return tmp

    def checks_timeout_s(self, rollout_timeout_s: float) -> float:
        """The server is already up: :data:`CHECKS_TIMEOUT_S`."""
        return CHECKS_TIMEOUT_S
