"""Shared plumbing of the steps' command lines (``python -m components.<step>``).

Each step's ``__main__.py`` parses its flags, builds the same config object its KFP component
builds, and calls the same library function. What they share lives here: the flags of a config
section's fields (:func:`add_config_flags`, read back by :func:`flags_to_fields`), a config section
from a YAML file plus flags, ``name=value`` pairs, writing the output files, and the exit statuses.
Imports neither TensorFlow nor kfp, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional, TypeVar

import yaml

from trainer.config import ConfigBase, ConfigError

# Exit statuses, as ``python -m components.convert`` and ``python -m trainer`` use them.
EXIT_OK = 0
EXIT_FAILED = 1  # the step ran and its answer is no (e.g. a model not blessed, when asked to fail)
EXIT_BAD_INPUT = 2  # bad flags, config, model or dataset: nothing was computed (argparse uses 2 too)

C = TypeVar("C", bound=ConfigBase)


def load_section(
    cls: type[C], path: Optional[str], flags: Mapping[str, Any], defaults: Optional[Mapping[str, Any]] = None
) -> C:
    """A config section from an optional YAML file, with the flags that were given on top.

    Args:
        cls: the section's class (``EvaluateConfig``, ``BenchmarkConfig``, ...).
        path: a YAML file holding the section's fields, or a whole-run file (``components/run_config.py``) with a
            section named after the step (``evaluate:``, ``benchmark:``); None for the defaults.
        flags: field -> value from the command line; None values (flags not given) are ignored.
        defaults: field -> value under the file and the flags, for the fields neither sets (the
            task's defaults, such as the served model name); the class's defaults lie under these.

    Returns:
        The validated section.

    Raises:
        ConfigError: the file is missing, not a mapping, names an unknown field, or a value is invalid.
    """
    data: dict[str, Any] = {}
    given: set[str] = set()  # the fields the file itself sets
    if path:
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"--config {path}: no such file; give a YAML file of {cls.__name__} fields")
        loaded = yaml.safe_load(file.read_text()) or {}
        if not isinstance(loaded, Mapping):
            raise ConfigError(f"--config {path}: expected a YAML mapping of {cls.__name__} fields, got {loaded!r}")
        # A whole-run file has one section per step (every section validated); a section file has
        # the fields directly.
        from components.run_config import is_run_file, read_run_config

        section = cls._section.rstrip(".")
        if is_run_file(loaded):
            read = read_run_config(loaded)
            data = read[section].to_dict() if section in read else {}
            given = set(loaded.get(section) or {})
        else:
            data = dict(loaded)
            given = set(loaded)
    data.update({k: v for k, v in (defaults or {}).items() if k not in given})
    data.update({k: v for k, v in flags.items() if v is not None})
    return cls.from_dict(data)


def read_json_file(path: str, expected: str) -> Any:
    """The JSON data of a file named on the command line.

    Args:
        path: the file.
        expected: what it should be, for the message (``"row.json files of 'inference'"``).

    Raises:
        ConfigError: the file is missing or not JSON.
    """
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file; give {expected}") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path} is not JSON ({err}); give {expected}") from None


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


# --------------------------------------------------------------------------- flags from config fields

_FIELDS_KEY = "_config_fields"  # where a parser keeps field -> flag for :func:`flags_to_fields`


def field_docs(cls: type) -> dict[str, str]:
    """The ``Attributes:`` entries of a config class's docstring, by field, on one line each.

    Args:
        cls: a class with a Google-style docstring (``ConvertConfig``, ``PromoteConfig``, ...).

    Returns:
        field name -> its description (reST ``double backquotes`` dropped); fields not described
        are absent.
    """
    helps: dict[str, str] = {}
    name = None
    for line in (cls.__doc__ or "").split("Attributes:", 1)[-1].splitlines():
        match = re.match(r"^\s{8}(\w+): (.*)$", line)
        if match:
            name, helps[match[1]] = match[1], match[2]
        elif name and line.strip():
            helps[name] += " " + line.strip()
    return {k: v.replace("``", "") for k, v in helps.items()}


def _yaml_mapping(text: str) -> dict[str, Any]:
    """A nested section's flag value: a YAML or JSON mapping such as ``{clients: 2}``."""
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise argparse.ArgumentTypeError(f"expected a YAML mapping such as '{{clients: 2}}', got {text!r}")
    return data


def _flag_kwargs(hint: Any) -> tuple[dict[str, Any], str]:
    """The ``add_argument`` keywords of a field's annotation, and its kind for :func:`flags_to_fields`.

    Kinds: ``plain`` (the parsed value is the field's), ``tuple`` (a list to make a tuple of) and
    ``pairs`` (repeated ``NAME=VALUE`` items to make a mapping of).

    Raises:
        TypeError: an annotation no flag can express (the caller should exclude the field).
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):  # Optional[X]: the flag takes an X
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"a union of {rest}: give the flag by hand")
        return _flag_kwargs(rest[0])
    if hint is bool:
        return {"action": argparse.BooleanOptionalAction}, "plain"
    if hint in (int, float, str):
        return {"type": hint}, "plain"
    if origin is typing.Literal:
        return {"choices": list(args), "type": type(args[0])}, "plain"
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": args[0], "nargs": "+"}, "tuple"
        if len(set(args)) == 1:
            return {"type": args[0], "nargs": len(args)}, "tuple"
        raise TypeError(f"a tuple of mixed types {args}: give the flag by hand")
    if origin in (dict, Mapping, typing.Mapping) or hint in (dict, Mapping):
        return {"action": "append", "metavar": "NAME=VALUE"}, "pairs"
    if isinstance(hint, type) and issubclass(hint, ConfigBase):
        return {"type": _yaml_mapping, "metavar": "YAML"}, "plain"
    raise TypeError(f"annotation {hint!r}: give the flag by hand")


def add_config_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type[ConfigBase],
    *,
    include: Optional[Sequence[str]] = None,
    exclude: Sequence[str] = (),
    rename: Optional[Mapping[str, str]] = None,
    overrides: Optional[Mapping[str, Mapping[str, Any]]] = None,
) -> None:
    """Adds one flag per field of ``cls`` (``--stages-root`` for ``stages_root``), each defaulting to None.

    The type comes from the annotation: int, float, str; bool as ``--x/--no-x``; ``Optional[X]`` as
    X; a ``Literal`` as choices; a tuple as several values; a mapping as repeated ``NAME=VALUE``; a
    nested section as a YAML mapping. The help is the field's line in the class's ``Attributes:``.
    A flag not given stays None, so :func:`load_section` keeps "flags over YAML over defaults".
    Read the values back with :func:`flags_to_fields`.

    Args:
        parser: the parser, sub-parser or argument group to add to.
        cls: the config section whose fields become flags.
        include: only these fields get a flag (None: every field not excluded).
        exclude: fields that get no flag (positional arguments, hand-written flags).
        rename: field -> flag where the flag users know has another name (``--format``).
        overrides: field -> extra ``add_argument`` keywords (choices from a registry, metavar).

    Raises:
        TypeError: a field's annotation no flag can express and the field is not excluded.
    """
    rename, overrides = rename or {}, overrides or {}
    hints = typing.get_type_hints(cls)
    helps = field_docs(cls)
    fields = dict(parser.get_default(_FIELDS_KEY) or {}) if hasattr(parser, "get_default") else {}
    for f in dataclasses.fields(cls):
        if f.name in exclude or (include is not None and f.name not in include):
            continue
        kwargs, kind = _flag_kwargs(hints[f.name])
        flag = rename.get(f.name, "--" + f.name.replace("_", "-"))
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        shown = "none" if default is None else _plain_default(default)
        repeat = " Repeatable; the flags replace the --config file's mapping." if kind == "pairs" else ""
        help_text = f"{helps.get(f.name, '')} (default {shown}).{repeat}".replace("%", "%%")
        kwargs.update(dest=f.name, default=None, help=help_text)
        kwargs.update(overrides.get(f.name, {}))
        parser.add_argument(flag, **kwargs)
        fields[f.name] = (flag, kind)
    parser.set_defaults(**{_FIELDS_KEY: fields})


def _plain_default(value: Any) -> str:
    if isinstance(value, Mapping):
        return " ".join(f"{k}={v}" for k, v in value.items()) or "none"
    if isinstance(value, tuple):
        return " ".join(map(str, value))
    return str(value)


def flags_to_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The config fields :func:`add_config_flags` flags gave, by field name (None: not given).

    Tuples become tuples; repeated ``NAME=VALUE`` items become a mapping (values read as YAML).

    Raises:
        ConfigError: a ``NAME=VALUE`` item without ``=`` or without a name.
    """
    out: dict[str, Any] = {}
    for name, (flag, kind) in (getattr(args, _FIELDS_KEY, None) or {}).items():
        value = getattr(args, name)
        if value is not None and kind == "tuple":
            value = tuple(value)
        elif value is not None and kind == "pairs":
            value = parse_pairs(value, flag)
        out[name] = value
    return out
