"""Uploads compiled pipelines to a Kubeflow Pipelines endpoint (``make upload KFP_HOST=...``).

Each ``<dir>/<name>.yaml`` becomes the pipeline ``lean-tpu-<name>``: created on first upload, a new
version (named after the package version and the time) on every later one.
"""

from __future__ import annotations

import argparse
import sys
import time
from importlib import metadata
from pathlib import Path

PREFIX = "lean-tpu-"


def upload(client, path: Path, version_tag: str) -> str:
    """Uploads one compiled pipeline; returns a line saying what was created."""
    name = PREFIX + path.stem.replace("_", "-")
    pipeline_id = client.get_pipeline_id(name)
    if pipeline_id is None:
        created = client.upload_pipeline(str(path), pipeline_name=name, description=f"lean-tpu-pipelines {path.stem}")
        return f"created pipeline {name} ({created.pipeline_id})"
    version = f"{name}-{version_tag}"
    client.upload_pipeline_version(str(path), pipeline_version_name=version, pipeline_id=pipeline_id)
    return f"added version {version} to pipeline {name} ({pipeline_id})"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True, help="KFP API endpoint, e.g. http://localhost:8080")
    parser.add_argument("--dir", type=Path, default=Path("dist/pipelines"))
    parser.add_argument("--namespace", default="kubeflow", help="the Kubeflow namespace of the KFP API")
    args = parser.parse_args(argv)
    packages = sorted(args.dir.glob("*.yaml"))
    if not packages:
        print(f"error: no compiled pipelines in {args.dir}; run 'make compile' first", file=sys.stderr)
        return 2
    import kfp

    client = kfp.Client(host=args.host, namespace=args.namespace)
    tag = f"{metadata.version('lean-tpu-pipelines')}-{time.strftime('%Y%m%d-%H%M%S')}"
    for path in packages:
        print(upload(client, path, tag))
    return 0


if __name__ == "__main__":
    sys.exit(main())
