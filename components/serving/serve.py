"""``make serve``: serve every stage that serves a model, from the local stage registry, until Ctrl-C.

After ``make run`` the stages under ``<pipeline root>/stages`` hold the promoted versions; this
starts the ``local`` serving target (``components.serving.targets.local``: one loopback model
server) of each stage that serves a model, with every model its registry serves, prints each
model's REST URL and its Prometheus metrics page, and stops them all on Ctrl-C (SIGINT) or SIGTERM.

Command line::

    python -m components.serving.serve --stages-root local_outputs/stages [--base-port 8501]

Ports: demo ``base-port``, staging ``base-port + 1``, prod ``base-port + 2`` (0: free ports).
A version promoted in a portable format (``serving_format``) is served through that format's
runtime, with the same REST API; its line names the format.
Each server keeps a sample of its requests' summaries under ``<stage>/traffic/``
(``components.serving.traffic``; ``--traffic-sample-rate``, default the stage's).
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

from components.serving.config import STAGES
from components.serving.portable import served_format
from components.serving.stages import StageRegistry
from components.serving.targets import Endpoints
from components.serving.targets.local import LocalTarget
from components.serving.traffic import DEFAULT_RATES
from trainer import storage
from trainer.export.formats import SERVED


@dataclasses.dataclass(frozen=True)
class StageServer:
    """One stage's running server: every model the stage serves (name -> version), and where."""

    stage: str
    models: dict[str, int]
    endpoints: Endpoints


def serving_stages(stages: StageRegistry) -> list[tuple[str, dict[str, int]]]:
    """``(stage, {model name: version})`` of every stage whose registry serves a version in service."""
    found = []
    for stage in STAGES:
        models = {
            name: version
            for name, version in stages.served_versions(stage).items()
            if version in stages.list_versions(stage, name)
        }
        if models:
            found.append((stage, models))
    return found


def start_servers(
    stages_root: str, stack: contextlib.ExitStack, base_port: int = 8501, sample_rate: Optional[float] = None
) -> list[StageServer]:
    """Start the ``local`` serving target of every serving stage, with all its models (module docstring).

    The servers stop when ``stack`` closes. Each keeps ``sample_rate`` of its requests' summaries
    under ``<stage>/traffic/`` (None: the stage's default, ``traffic.DEFAULT_RATES``; 0: none).

    Raises:
        FileNotFoundError: no stage serves a model under ``stages_root``.
        OSError: a port is taken (the message names it).
    """
    if storage.is_gcs(stages_root):
        raise ValueError(f"make serve reads a local stage registry, got {stages_root!r}")
    stages = StageRegistry(stages_root)
    found = serving_stages(stages)
    if not found:
        raise FileNotFoundError(
            f"no stage serves a model under {stages_root}: run `make run` first (it promotes to demo and staging)"
        )
    started = []
    for stage, models in found:
        port = 0 if base_port == 0 else base_port + STAGES.index(stage)
        rate = DEFAULT_RATES[stage] if sample_rate is None else sample_rate
        target = LocalTarget(stages, {"port": port, "traffic_sample_rate": rate or None})
        try:
            endpoints = stack.enter_context(target.endpoints(stage, models))
        except OSError as err:
            raise OSError(f"{stage}: cannot listen on port {port}: {err}; pass --base-port (0: free ports)") from err
        started.append(StageServer(stage, models, endpoints))
    return started


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Serve until Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m components.serving.serve", description=__doc__.split("\n\n")[0])
    parser.add_argument("--stages-root", default="local_outputs/stages", help="the local stage registry")
    parser.add_argument("--base-port", type=int, default=8501, help="demo's port; staging +1, prod +2; 0: free ports")
    parser.add_argument("--traffic-sample-rate", type=float, help="share of requests sampled (default: per stage)")
    args = parser.parse_args(argv)
    if args.traffic_sample_rate is not None and not 0 <= args.traffic_sample_rate <= 1:
        parser.error(f"--traffic-sample-rate must be in [0, 1], got {args.traffic_sample_rate}")
    with contextlib.ExitStack() as stack:
        try:
            servers = start_servers(args.stages_root, stack, args.base_port, args.traffic_sample_rate)
        except (FileNotFoundError, OSError, ValueError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        stopped = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopped.set())
        signal.signal(signal.SIGINT, lambda *_: stopped.set())
        stages = StageRegistry(args.stages_root)
        for s in servers:
            for name, version in s.models.items():
                form = served_format(stages.version_path(s.stage, name, version))
                shown = "" if form == SERVED else f" ({form})"
                print(
                    f"{s.stage:8s} {name} version {version}{shown}: {s.endpoints.url(name)}/v1/models/{name}"
                    f"   metrics: {s.endpoints.metrics_url(name)}",
                    flush=True,
                )
        rates = ", ".join(f"{s.stage} {DEFAULT_RATES[s.stage]:.0%}" for s in servers)
        rate = rates if args.traffic_sample_rate is None else f"{args.traffic_sample_rate:.0%}"
        print(f"sampled traffic ({rate}): {args.stages_root}/<stage>/traffic, checked by `make monitor`", flush=True)
        print("serving; Ctrl-C stops", flush=True)
        stopped.wait()
    print("stopped", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
