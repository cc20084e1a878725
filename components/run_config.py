"""A whole run's settings in one YAML file: a section per step config the steps declare.

Each step's surface (``components/<step>/surface.py``) names the config its components take; a
whole-run file has one mapping per such config, under its section name (``train:``,
``validate:``, ``evaluate:``, ...), each read by that config as a file of its fields would be. A
new step's config is a section here without a line written for it. The ``predict:`` section is
batch prediction's (a run of its own: ``make predict CONFIG=`` and ``python -m
components.batch_predict --config`` read it; ``make run``'s pipelines have no step that does).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from components.surface import surfaces
from trainer.configbase import ConfigBase, ConfigError


def sections() -> dict[str, type[ConfigBase]]:
    """Section name -> its config class, for every config a step's surface declares, by name."""
    found: dict[str, type[ConfigBase]] = {}
    for surface in surfaces().values():
        if surface.config is not None:
            found.setdefault(surface.config._section.rstrip("."), surface.config)
    return dict(sorted(found.items()))


def is_run_file(data: Mapping[str, Any]) -> bool:
    """Whether a YAML mapping is a whole-run file (its keys are sections) rather than one section's fields."""
    return bool(set(data) & set(sections()))


def read_run_config(data: Mapping[str, Any]) -> dict[str, ConfigBase]:
    """The sections of a whole-run file, read and checked: those it has (one left out is the step's defaults).

    Raises:
        ConfigError: a key that is no step's section (naming the sections), or a bad value in one.
    """
    known = sections()
    unknown = [key for key in data if key not in known]
    if unknown:
        raise ConfigError(f"{unknown[0]}: no step takes this section; the sections are {', '.join(known)}")
    return {name: known[name].from_dict(section or {}, _prefix=f"{name}.") for name, section in data.items()}


def read_run_yaml(text_or_path: str | Path) -> dict[str, ConfigBase]:
    """:func:`read_run_config` of a YAML file (a path) or YAML text.

    Raises:
        ConfigError: the YAML is not a mapping of sections, or what :func:`read_run_config` refuses.
    """
    text = str(text_or_path)
    if isinstance(text_or_path, Path) or ("\n" not in text and text.endswith((".yaml", ".yml"))):
        text = Path(text).read_text()
    data = yaml.safe_load(text)
    if data is not None and not isinstance(data, Mapping):
        raise ConfigError(f"a whole-run file must be a mapping of sections ({', '.join(sections())}), got {data!r}")
    return read_run_config(data or {})
