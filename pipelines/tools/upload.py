"""Uploads compiled pipelines to a Kubeflow Pipelines endpoint (``make upload KFP_HOST=...``).

Each ``<dir>/<name>.yaml`` becomes the pipeline ``lean-tpu-<name>``: created on first upload, a new
version (named after the package version and the time) on every later one.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Optional

PREFIX = "lean-tpu-"


def pipeline_name(path: Path) -> str:
    """The Kubeflow pipeline a compiled file is uploaded as: ``lean-tpu-<name>``."""
    return PREFIX + path.stem.replace("_", "-")


def content_version_name(path: Path) -> str:
    """A version name that follows the compiled file's content: ``lean-tpu-<name>-<sha256[:12]>``."""
    return f"{pipeline_name(path)}-{hashlib.sha256(path.read_bytes()).hexdigest()[:12]}"


@dataclasses.dataclass(frozen=True)
class PipelineVersion:
    """A pipeline version on the Kubeflow Pipelines API.

    Attributes:
        pipeline_id: the pipeline's id.
        version_id: the version's id.
        name: the version's name.
        uploaded: whether this call uploaded it (False: an equal version was there).
    """

    pipeline_id: str
    version_id: str
    name: str
    uploaded: bool


def _find_version(client: Any, pipeline_id: str, name: str) -> Optional[str]:
    """The id of the pipeline's version named ``name``, or None."""
    by_name = json.dumps({"predicates": [{"operation": "EQUALS", "key": "display_name", "stringValue": name}]})
    found = client.list_pipeline_versions(pipeline_id, filter=by_name).pipeline_versions or []
    return found[0].pipeline_version_id if found else None


def ensure_version(client: Any, path: Path) -> PipelineVersion:
    """The version of ``lean-tpu-<name>`` holding exactly this compiled file: reused, else uploaded.

    The version is named after the file's content (:func:`content_version_name`), so submitting
    the same pipeline twice uploads it once; the pipeline is created on the first upload.

    Args:
        client: a ``kfp.Client``.
        path: the compiled pipeline (``dist/pipelines/<name>.yaml``).
    """
    name = pipeline_name(path)
    pipeline_id = client.get_pipeline_id(name)
    if pipeline_id is None:
        pipeline_id = client.upload_pipeline(
            str(path), pipeline_name=name, description=f"lean-tpu-pipelines {path.stem}"
        ).pipeline_id
    version = content_version_name(path)
    found = _find_version(client, pipeline_id, version)
    if found is not None:
        return PipelineVersion(pipeline_id, found, version, uploaded=False)
    created = client.upload_pipeline_version(str(path), pipeline_version_name=version, pipeline_id=pipeline_id)
    return PipelineVersion(pipeline_id, created.pipeline_version_id, version, uploaded=True)


def upload(client, path: Path, version_tag: str) -> str:
    """Uploads one compiled pipeline; returns a line saying what was created."""
    name = pipeline_name(path)
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
