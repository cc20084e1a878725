"""``make serve``: serve every stage that serves a model, from the local stage registry, until Ctrl-C.

After ``make run`` the stages under ``<pipeline root>/stages`` hold the promoted versions; this
starts one local model server per stage that serves one (the version its ``current.json`` names,
as the stage's own server would), prints each server's REST URL and its Prometheus metrics page,
and stops them all on Ctrl-C (SIGINT) or SIGTERM.

Command line::

    python -m components.serving.serve --stages-root local_outputs/stages [--base-port 8501]

Ports: demo ``base-port``, staging ``base-port + 1``, prod ``base-port + 2`` (0: free ports).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Optional

from components.serving import stages
from components.serving.server import ModelServer
from trainer import storage


@dataclasses.dataclass(frozen=True)
class StageServer:
    """One stage's running server, with every model the stage serves (name -> version)."""

    stage: str
    models: dict[str, int]
    server: ModelServer


def serving_stages(stages_root: str) -> list[tuple[str, dict[str, int]]]:
    """``(stage, {model name: version})`` of every stage whose registry serves a version in service."""
    found = []
    for stage in stages.STAGES:
        models = {
            name: entry.version
            for name, entry in stages.served_models(stages_root, stage).items()
            if entry.version in stages.list_versions(stages_root, stage, name)
        }
        if models:
            found.append((stage, models))
    return found


def start_servers(stages_root: str, base_port: int = 8501) -> list[StageServer]:
    """Start a local model server for every serving stage, with all its models (module docstring).

    Raises:
        FileNotFoundError: no stage serves a model under ``stages_root``.
        OSError: a port is taken (the message names it).
    """
    if storage.is_gcs(stages_root):
        raise ValueError(f"make serve reads a local stage registry, got {stages_root!r}")
    found = serving_stages(stages_root)
    if not found:
        raise FileNotFoundError(
            f"no stage serves a model under {stages_root}: run `make run` first (it promotes to demo and staging)"
        )
    started: list[StageServer] = []
    try:
        for stage, models in found:
            port = 0 if base_port == 0 else base_port + stages.STAGES.index(stage)
            pairs = [(name, stages.model_base_path(stages_root, stage, name)) for name in sorted(models)]
            # One model: pin the registry's version; several: each serves its newest in service,
            # which is what the registry records (a rollback retires the newer folder).
            version = next(iter(models.values())) if len(models) == 1 else None
            server = ModelServer(pairs, port=port, version=version)
            try:
                server.start()
            except OSError as err:
                raise OSError(
                    f"{stage}: cannot listen on port {port}: {err}; pass --base-port (0: free ports)"
                ) from err
            started.append(StageServer(stage, models, server))
    except BaseException:
        for s in started:
            s.server.stop()
        raise
    return started


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Serve until Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m components.serving.serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--stages-root", default="local_outputs/stages", help="the local stage registry")
    parser.add_argument("--base-port", type=int, default=8501, help="demo's port; staging +1, prod +2; 0: free ports")
    args = parser.parse_args(argv)
    try:
        servers = start_servers(args.stages_root, args.base_port)
    except (FileNotFoundError, OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    with contextlib.ExitStack() as stack:
        for s in servers:
            stack.callback(s.server.stop)
        for s in servers:
            for name, version in s.models.items():
                print(
                    f"{s.stage:8s} {name} version {version}: {s.server.url}/v1/models/{name}"
                    f"   metrics: {s.server.metrics_url}",
                    flush=True,
                )
        print("serving; Ctrl-C stops", flush=True)
        stopped.wait()
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
