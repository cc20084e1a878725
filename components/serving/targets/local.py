"""Target ``local``: a loopback model server over the stage's model folders, run while it is used."""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, ClassVar, Optional

from components.serving.targets.base import Endpoints, ServingTarget, register
from trainer.configbase import ConfigBase
from trainer.export.formats import FORMATS

if TYPE_CHECKING:
    from components.serving.traffic import TrafficLog

CHECKS_TIMEOUT_S = 60.0
"""The loopback server is up once :meth:`LocalTarget.endpoints` yields: no rollout to wait for."""


@dataclasses.dataclass(frozen=True)
class LocalOptions(ConfigBase):
    """The ``local`` target's own settings (``serving_options``).

    Attributes:
        host: the address the loopback model server listens on.
        port: its port; 0 picks a free one.
        traffic_sample_rate: the share of ``:predict`` requests whose summaries the server keeps under
            ``<stages root>/<stage>/traffic/`` (``components.serving.traffic``); None: none.
        traffic_keep: what is kept of a sampled image: ``summary``, ``hash`` or ``image``.
    """

    _section: ClassVar[str] = "serving_options."

    host: str = "127.0.0.1"
    port: int = 0
    traffic_sample_rate: Optional[float] = None
    traffic_keep: str = "summary"

    def validate(self) -> None:
        if not 0 <= self.port <= 65535:
            self._fail("port", f"must be in 0..65535 (0: a free port), got {self.port}")
        if self.traffic_sample_rate is not None and not 0 <= self.traffic_sample_rate <= 1:
            self._fail("traffic_sample_rate", f"must be in [0, 1] (0.02 keeps 2%), got {self.traffic_sample_rate}")
        if self.traffic_keep not in ("summary", "hash", "image"):
            self._fail("traffic_keep", f"must be one of summary, hash, image; got {self.traffic_keep!r}")


@register
class LocalTarget(ServingTarget):
    """Serves a stage from its registry folders with :class:`~components.serving.server.ModelServer`.

    Nothing runs between actions: serving a version is publishing it (done before the target is
    asked), so :meth:`serve` and :meth:`restore` have nothing to do, and :meth:`endpoints` starts
    the server. A stage store on GCS is downloaded first (the versions served only).

    With canary steps (``TargetSettings.canary_steps``; none by default: a new version replaces
    the old at once), a new version first takes a share of its model's traffic on the server
    (:class:`~components.serving.canary.Split`), and a second server answers as the canary alone.
    """

    name = "local"
    load_profile = "loopback"
    options_type = LocalOptions
    # The project's server runs every portable format's runtime (components.serving.portable).
    serving_formats = ("saved_model", *FORMATS)
    _split: Optional[tuple[str, int, int]] = None  # (model, canary version, percent) in progress

    def check(self) -> None:
        """Any stage store will do: a folder is served as it is, a gs:// one downloaded."""

    def canary_steps(self) -> tuple[int, ...]:
        """The configured steps (none by default)."""
        return self.settings.canary_steps or ()

    def serve(self, stage: str, models: Mapping[str, int], changed: str, timeout_s: float) -> None:
        """Nothing to do but end a split: the published folder is what :meth:`endpoints` serves."""
        self._split = None

    def serve_canary(self, stage: str, models: Mapping[str, int], changed: str, percent: int, timeout_s: float) -> None:
        """Remembers the split :meth:`endpoints` serves: ``percent`` of ``changed``'s requests to its new version."""
        if not self.canary_steps():
            super().serve_canary(stage, models, changed, percent, timeout_s)
        self._split = (changed, models[changed], percent) if percent < 100 else None

    def restore(self, stage: str, models: Mapping[str, int], changed: str, timeout_s: float) -> None:
        """Nothing to do but end a split: the retired version left the folder :meth:`endpoints` serves."""
        self._split = None

    @contextlib.contextmanager
    def endpoints(self, stage: str, models: Mapping[str, int]) -> Iterator[Endpoints]:
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
        from components.serving.canary import Split
        from components.serving.server import ModelServer

        if not models:
            raise ValueError(f"{stage}: no model to serve; expected at least one name -> version")
        split = self._split if self._split is not None and self._split[0] in models else None
        with contextlib.ExitStack() as stack:
            pairs = [(name, self._local_base(stack, stage, name, models[name])) for name in sorted(models)]
            version = next(iter(models.values())) if len(models) == 1 and split is None else None
            host, port = self.options.host, self.options.port
            server = stack.enter_context(
                ModelServer(
                    pairs, host=host, port=port, version=version, split=Split(*split) if split else None,
                    traffic=self._traffic(stage),
                )
            )  # fmt: skip
            canaries = {}
            if split is not None:
                base = dict(pairs)[split[0]]
                canary = stack.enter_context(ModelServer(base, split[0], host=host, version=split[1]))
                canaries[split[0]] = canary.url
            metrics = {name: server.metrics_url for name in models if server.metrics_url is not None}
            yield Endpoints(urls={name: server.url for name in models}, metrics_urls=metrics, canary_urls=canaries)

    def _traffic(self, stage: str) -> Optional[TrafficLog]:
        """The stage's traffic log when ``traffic_sample_rate`` is set (None: the server samples nothing)."""
        if self.options.traffic_sample_rate is None:
            return None
        from components.serving.traffic import TrafficConfig, TrafficLog, traffic_dir

        config = TrafficConfig(sample_rate=self.options.traffic_sample_rate, keep=self.options.traffic_keep)
        return TrafficLog(traffic_dir(self.stages.root, stage), config)

    def _local_base(self, stack: contextlib.ExitStack, stage: str, name: str, version: int) -> str:
        """The model's base path on this machine: a gs:// store's versions in service are downloaded
        (only ``version``, and the one before it while a canary of ``name`` is in progress).
        """
        from trainer import storage

        base = self.stages.model_base_path(stage, name)
        if not storage.is_gcs(base):
            return base
        wanted = [version]
        if self._split is not None and self._split[0] == name:
            wanted = [v for v in self.stages.list_versions(stage, name) if v <= version][-2:]
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"stage-{name}-"))
        for v in wanted:
            storage.copy_tree(self.stages.version_path(stage, name, v), f"{tmp}/{v}")
        return tmp

    def checks_timeout_s(self, rollout_timeout_s: float) -> float:
        """The server is already up: :data:`CHECKS_TIMEOUT_S`."""
        return CHECKS_TIMEOUT_S
