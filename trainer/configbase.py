"""The base of every configuration object: typed frozen fields, strict loading, YAML in and out.

A section (``trainer.config``) or a task's options (``trainer.tasks``) subclasses
:class:`ConfigBase`, a strict record (``trainer.records``) that also checks its values whenever it
is made: an unknown key or a value of the wrong type is a :class:`ConfigError` naming the field and
the valid names, and its mappings are read-only. No TensorFlow, no kfp.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import yaml

from trainer.records import Record, RecordError, check_type, whole_int  # noqa: F401  (whole_int: importers' old name)

T = TypeVar("T", bound="ConfigBase")


class ConfigError(RecordError):
    """A configuration value is wrong; the message names the field, the value and the fix."""


@dataclasses.dataclass(frozen=True)
class ConfigBase(Record):
    """Base of every config section: typed fields, strict loading, YAML in and out."""

    _section: ClassVar[str] = ""
    _error = ConfigError

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            try:
                value = check_type(f"{self._section}{f.name}", getattr(self, f.name), hints[f.name], freeze=True)
            except RecordError as err:
                raise (err if isinstance(err, ConfigError) else ConfigError(str(err))) from None
            object.__setattr__(self, f.name, value)
        self.validate()

    def validate(self) -> None:
        """Checks relations between fields; sections override it and raise ConfigError."""

    def _fail(self, field: str, message: str) -> None:
        raise ConfigError(f"{self._section}{field}: {message}")

    @classmethod
    def _build(cls: type[T], values: dict[str, Any], prefix: str) -> T:
        """Constructs the section: ``__post_init__`` checks the values, naming them by ``_section``."""
        return cls(**values)

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
