"""The base of every configuration object: typed frozen fields, strict loading, YAML in and out.

A section (``trainer.config``) or a task's options (``trainer.tasks``) subclasses
:class:`ConfigBase`: an unknown key or a value of the wrong type is a :class:`ConfigError` naming
the field and the valid names. No TensorFlow, no kfp.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import re
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Optional, TypeVar

import yaml

T = TypeVar("T", bound="ConfigBase")


class ConfigError(ValueError):
    """A configuration value is wrong; the message names the field, the value and the fix."""


def _check_type(field: str, value: Any, annotation: Any) -> Any:
    """Coerces ``value`` to ``annotation`` where it is lossless, else raises ConfigError."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _check_type(field, value, arg)
            except ConfigError as err:
                errors.append(str(err))
        kinds = " or ".join(_describe(a) for a in args if a is not type(None))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{field}: expected {kinds}, got {value!r}")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{field}: expected one of {list(args)}, got {value!r}")
        return value
    if origin in (tuple,):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{field}: expected a list, got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_check_type(f"{field}[{i}]", v, args[0]) for i, v in enumerate(value))
        if len(value) != len(args):
            raise ConfigError(f"{field}: expected {len(args)} items, got {value!r}")
        return tuple(_check_type(f"{field}[{i}]", v, a) for i, (v, a) in enumerate(zip(value, args, strict=True)))
    if origin in (dict, Mapping, typing.Mapping) or annotation in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{field}: expected a mapping, got {value!r}")
        kt, vt = args or (Any, Any)
        return types.MappingProxyType(
            {_check_type(field, k, kt): _check_type(f"{field}.{k}", v, vt) for k, v in value.items()}
        )
    if isinstance(annotation, type) and issubclass(annotation, ConfigBase):
        if isinstance(value, annotation):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{field}: expected a mapping for {annotation.__name__}, got {value!r}")
        return annotation.from_dict(value, _prefix=f"{field}.")
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{field}: expected true or false, got {value!r}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{field}: expected a number, got {value!r}")
        return float(value)
    if annotation is int:
        number = whole_int(value)
        if number is None:
            raise ConfigError(f"{field}: expected an integer, got {value!r}")
        return number
    if annotation is str:
        if not isinstance(value, str):
            raise ConfigError(f"{field}: expected a string, got {value!r}")
        return value
    return value


def _describe(annotation: Any) -> str:
    """A type as a message names it: ``a number``, ``'auto'``, ``a list``."""
    if typing.get_origin(annotation) is typing.Literal:
        return " or ".join(repr(a) for a in typing.get_args(annotation))
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string", tuple: "a list"}
    return names.get(typing.get_origin(annotation) or annotation, str(annotation).replace("typing.", ""))


def whole_int(value: Any) -> Optional[int]:
    """``value`` as an int when it is one, or a float with an integral value; else None.

    The one rule for numbers that arrive as floats: kfp.local hands a dict parameter's numbers and
    ``dsl.Collected`` values over as floats (``3`` arrives as ``3.0``), and so does JSON tooling on
    the way. ``True``/``False`` are never numbers here.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _plain(value: Any) -> Any:
    """Turns a config value into plain YAML/JSON data."""
    if isinstance(value, ConfigBase):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


@dataclasses.dataclass(frozen=True)
class ConfigBase:
    """Base of every config section: typed fields, strict loading, YAML in and out."""

    _section: ClassVar[str] = ""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = _check_type(f"{self._section}{f.name}", getattr(self, f.name), hints[f.name])
            object.__setattr__(self, f.name, value)
        self.validate()

    def validate(self) -> None:
        """Checks relations between fields; sections override it and raise ConfigError."""

    def _fail(self, field: str, message: str) -> None:
        raise ConfigError(f"{self._section}{field}: {message}")

    @classmethod
    def from_dict(cls: type[T], data: Mapping[str, Any] | None, _prefix: str = "") -> T:
        """Builds the section from a mapping; an unknown key is an error that lists the known ones."""
        data = dict(data or {})
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ConfigError(f"{_prefix}{unknown[0]}: unknown key in {cls.__name__}; known keys: {', '.join(names)}")
        try:
            return cls(**data)
        except TypeError as err:  # a required field is missing
            raise ConfigError(f"{cls.__name__}: {err}") from None

    @classmethod
    def from_yaml(cls: type[T], text_or_path: str | Path) -> T:
        """Loads from YAML text or a path to a YAML file."""
        text = str(text_or_path)
        if isinstance(text_or_path, Path) or ("\n" not in text and text.endswith((".yaml", ".yml"))):
            text = Path(text).read_text()
        data = yaml.safe_load(text)
        if data is not None and not isinstance(data, Mapping):
            raise ConfigError(f"{cls.__name__}: the YAML must be a mapping, got {type(data).__name__}")
        return cls.from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        """Returns plain data (dicts, lists, scalars) that from_dict accepts back."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def to_yaml(self) -> str:
        """Returns the YAML form; ``from_yaml(to_yaml())`` gives an equal object."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def replace(self: T, **changes: Any) -> T:
        """Returns a copy with some fields changed, validated again."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def field_docs(cls) -> dict[str, str]:
        """Field name -> its documentation, one line, from the class docstring's ``Attributes:``.

        The run forms show these as their parameters' descriptions (``pipelines/flow.py``).
        """
        docs: dict[str, str] = {}
        lines = (inspect.getdoc(cls) or "").splitlines()
        start = next((i + 1 for i, line in enumerate(lines) if line.strip() == "Attributes:"), len(lines))
        name = None
        for line in lines[start:]:
            if line and not line.startswith(" "):
                break  # the next section
            entry = re.fullmatch(r" {4}(\w+): (.*)", line)
            if entry:
                name, docs[entry[1]] = entry[1], entry[2].strip()
            elif name and line.strip():
                docs[name] += " " + line.strip()
        return docs

    def fingerprint(self) -> str:
        """A short stable hash of the values, e.g. for caching and the model card."""
        blob = json.dumps(self.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]
