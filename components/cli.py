"""Shared plumbing of the steps' command lines (``python -m components.<step>``).

Each step's ``__main__.py`` parses its flags, builds the same config object its KFP component
builds, and calls the same library function. What they share lives here: a config section from a
YAML file plus flags, ``name=value`` pairs, writing the output files, and the exit statuses.
Imports neither TensorFlow nor kfp, so ``--help`` is instant.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional, TypeVar

import yaml

from trainer.config import Config, ConfigBase, ConfigError

# Exit statuses, as ``python -m components.convert`` and ``python -m trainer`` use them.
EXIT_OK = 0
EXIT_FAILED = 1  # the step ran and its answer is no (e.g. a model not blessed, when asked to fail)
EXIT_BAD_INPUT = 2  # bad flags, config, model or dataset: nothing was computed (argparse uses 2 too)

C = TypeVar("C", bound=ConfigBase)


def load_section(cls: type[C], path: Optional[str], flags: Mapping[str, Any]) -> C:
    """A config section from an optional YAML file, with the flags that were given on top.

    Args:
        cls: the section's class (``EvaluateConfig``, ``BenchmarkConfig``, ...).
        path: a YAML file holding the section's fields, or a whole-run ``Config`` file with a
            section named after the step (``evaluate:``, ``benchmark:``); None for the defaults.
        flags: field -> value from the command line; None values (flags not given) are ignored.

    Returns:
        The validated section.

    Raises:
        ConfigError: the file is missing, not a mapping, names an unknown field, or a value is invalid.
    """
    data: dict[str, Any] = {}
    if path:
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"--config {path}: no such file; give a YAML file of {cls.__name__} fields")
        loaded = yaml.safe_load(file.read_text()) or {}
        if not isinstance(loaded, Mapping):
            raise ConfigError(f"--config {path}: expected a YAML mapping of {cls.__name__} fields, got {loaded!r}")
        # A whole-run Config file has one section per step (validated whole, as trainer's CLI does);
        # a section file has the fields directly.
        sections = [f.name for f in dataclasses.fields(Config)]
        if set(loaded) & set(sections):
            data = getattr(Config.from_dict(loaded), cls._section.rstrip(".")).to_dict()
        else:
            data = dict(loaded)
    data.update({k: v for k, v in flags.items() if v is not None})
    return cls.from_dict(data)


def parse_pairs(items: Sequence[str], flag: str) -> dict[str, Any]:
    """``["accuracy=0.8", ...]`` as ``{"accuracy": 0.8}`` (values read as YAML scalars).

    Raises:
        ConfigError: an item without ``=`` or without a name.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag} {item!r}: expected name=value, e.g. {flag} accuracy=0.8")
        out[key.strip()] = yaml.safe_load(value)
    return out


def check_folder(path: str, what: str, hint: str) -> None:
    """Fails fast (before TensorFlow loads) when a local input folder does not exist.

    gs:// URIs are left to the library, which reads them.

    Raises:
        ConfigError: the local folder is missing.
    """
    if "://" not in path and not os.path.isdir(path):
        raise ConfigError(f"{what} {path} does not exist or is not a folder; {hint}")


def write_files(output_dir: str, files: Mapping[str, Any]) -> list[str]:
    """Writes name -> content under ``output_dir`` (str as text, anything else as JSON).

    Returns:
        The paths written, in order.
    """
    os.makedirs(output_dir, exist_ok=True)
    paths = []
    for name, content in files.items():
        path = os.path.join(output_dir, name)
        text = content if isinstance(content, str) else json.dumps(content, indent=2) + "\n"
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        paths.append(path)
    return paths


def fail(err: BaseException) -> int:
    """Prints a one-line ``error: ...`` on stderr and returns :data:`EXIT_BAD_INPUT`."""
    message = " ".join(str(err).split())  # one line, whatever the library's message looks like
    print(f"error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT
