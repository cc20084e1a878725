"""Target ``local``: a loopback model server over the stage's model folders, run while it is used."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator, Mapping

from components.serving.targets.base import Endpoints, ServingTarget, register

CHECKS_TIMEOUT_S = 60.0
"""The loopback server is up once :meth:`LocalTarget.endpoints` yields: no rollout to wait for."""


@register
class LocalTarget(ServingTarget):
    """Serves a stage from its registry folders with :class:`~components.serving.server.ModelServer`.

    Nothing runs between actions: serving a version is publishing it (done before the target is
    asked), so :meth:`serve` and :meth:`restore` have nothing to do, and :meth:`endpoints` starts
    the server. A stage store on GCS is downloaded first (the versions served only).

    Args:
        host: the address the server listens on.
        port: its port; 0 picks a free one.
    """

    name = "local"
    load_profile = "loopback"

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.host = host
        self.port = port

    def check(self, stages_root: str) -> None:
        """Any stage store will do: a folder is served as it is, a gs:// one downloaded."""

    def serve(self, stages_root: str, stage: str, models: Mapping[str, int], changed: str, timeout_s: float) -> None:
        """Nothing to do: the published folder is what :meth:`endpoints` serves."""

    def restore(self, stages_root: str, stage: str, models: Mapping[str, int], changed: str, timeout_s: float) -> None:
        """Nothing to do: the retired version left the folder :meth:`endpoints` serves."""

    @contextlib.contextmanager
    def endpoints(self, stages_root: str, stage: str, models: Mapping[str, int]) -> Iterator[Endpoints]:
        """Run one loopback server with every model of ``models``; each model's URL is the server's.

        One model is served at its given version; several each at their newest version in
        service (the server pins one model only), which is the version a consistent registry
        records.

        Raises:
            ValueError: ``models`` is empty.
            FileNotFoundError: a model has no such version in service.
            OSError: the port is taken.
        """
        from components.serving import stages
        from components.serving.server import ModelServer
        from trainer import storage

        if not models:
            raise ValueError(f"{stage}: no model to serve; expected at least one name -> version")
        with contextlib.ExitStack() as stack:
            pairs = []
            for name in sorted(models):
                base = stages.model_base_path(stages_root, stage, name)
                if storage.is_gcs(base):
                    tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"stage-{name}-"))
                    storage.copy_tree(
                        stages.version_path(stages_root, stage, name, models[name]), f"{tmp}/{models[name]}"
                    )
                    base = tmp
                pairs.append((name, base))
            version = next(iter(models.values())) if len(models) == 1 else None
            server = stack.enter_context(ModelServer(pairs, host=self.host, port=self.port, version=version))
            metrics = {name: server.metrics_url for name in models if server.metrics_url is not None}
            yield Endpoints(urls={name: server.url for name in models}, metrics_urls=metrics)

    def checks_timeout_s(self, rollout_timeout_s: float) -> float:
        """The server is already up: :data:`CHECKS_TIMEOUT_S`."""
        return CHECKS_TIMEOUT_S
