"""Resolves each image variant's Python dependencies against the package index, installing nothing.

``python -m pipelines.tools.resolve [cpu gpu tpu tpu-vm]`` (``make resolve``) runs
``pip install --dry-run --ignore-installed --report`` on the project's extra of each variant and
prints what it would install: the count and the TensorFlow distribution, ``libtpu`` for ``tpu-vm``.
A variant whose requirements do not resolve (a pin of a version the index lacks) fails with pip's
own lines. Needs the index (PyPI, or the host's pip configuration); a few seconds a variant.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

VARIANTS = ("cpu", "gpu", "tpu", "tpu-vm")
# The distribution each variant must end up with (exactly one TensorFlow), and what else it needs.
EXPECTED: Mapping[str, tuple[str, ...]] = {
    "cpu": ("tensorflow",),
    "gpu": ("tensorflow",),
    "tpu": ("tensorflow",),
    "tpu-vm": ("tensorflow-tpu", "libtpu"),
}
_TENSORFLOWS = ("tensorflow", "tensorflow-cpu", "tensorflow-tpu", "tf-nightly", "tf-nightly-tpu")


def _norm(name: str) -> str:
    return name.lower().replace("_", "-")


def summary(variant: str, report: Mapping[str, Any]) -> str:
    """One line of a pip report: what the variant installs, its TensorFlow, and the checks' verdict.

    Raises:
        ValueError: a distribution the variant needs is missing, or two TensorFlows would be installed.
    """
    versions = {_norm(i["metadata"]["name"]): i["metadata"]["version"] for i in report.get("install", [])}
    missing = [name for name in EXPECTED[variant] if name not in versions]
    if missing:
        raise ValueError(f"{variant}: the resolution has no {', '.join(missing)}; check the extra in pyproject.toml")
    tensorflows = [name for name in _TENSORFLOWS if name in versions]
    if len(tensorflows) != 1:
        raise ValueError(f"{variant}: {len(tensorflows)} TensorFlow distributions ({', '.join(tensorflows)}); want one")
    shown = ", ".join(f"{name} {versions[name]}" for name in EXPECTED[variant])
    return f"{variant}: {len(versions)} distributions resolve; {shown}"


def resolve(variant: str, project: Path) -> dict[str, Any]:
    """The report pip gives of installing the project's extra ``variant`` into an empty environment.

    Raises:
        RuntimeError: pip could not resolve it (its last lines in the message).
    """
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet"]
        done = subprocess.run([*argv, "--report", str(report), f"{project}[{variant}]"], capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join(line for line in done.stderr.splitlines() if "is ignored" not in line)[-2000:]
            raise RuntimeError(f"{variant}: the dependencies do not resolve:\n{tail}")
        return json.loads(report.read_text())


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: 0 every variant resolves, 1 one does not, 2 an unknown variant."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="*", default=list(VARIANTS), help=f"default: {' '.join(VARIANTS)}")
    parser.add_argument("--project", type=Path, default=Path(__file__).resolve().parents[2])
    args = parser.parse_args(argv)
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        print(f"error: unknown variant {unknown[0]!r}; variants: {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    failed = 0
    for variant in args.variants:
        try:
            print(summary(variant, resolve(variant, args.project)), flush=True)
        except (RuntimeError, ValueError) as err:
            print(f"error: {err}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
