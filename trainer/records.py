"""The base of every record the project reads and writes as plain data (JSON, YAML, KFP parameters).

A record is a frozen dataclass that subclasses :class:`Record`. :meth:`Record.from_dict` reads
plain data into it, its fields' types driving the coercion (``int`` from a whole float, tuples from
lists, nested records, ``Optional``, mappings of either); :meth:`Record.to_dict` writes it back.
Each record class says, in class variables, how it treats a key it does not know (``_mode``) and
which error it raises (``_error``):

- :data:`STRICT`: an unknown key is an error that names it and the known keys (configs,
  ``dataset.json``, the benchmark and sweep rows);
- :data:`FORWARD_COMPATIBLE`: unknown keys (written by a newer version) are kept in the record's
  ``extra`` field and written back by ``to_dict`` (a stage's history, ``training.json``).

A missing required key is an error naming it, and so is a value of the wrong type. Rules between
fields stay with the record (its ``__post_init__``). ``trainer.configbase.ConfigBase`` is a record
that also coerces on construction. No TensorFlow, no kfp.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Optional, TypeVar

R = TypeVar("R", bound="Record")

STRICT = "strict"
FORWARD_COMPATIBLE = "forward-compatible"
EXTRA = "extra"  # the field of a forward-compatible record that keeps the keys it does not know

_META = "record"


class RecordError(ValueError):
    """A record's data is wrong; the message names the key, what was expected and what was received."""


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


def field(
    *,
    key: Optional[str] = None,
    flat: Optional[str] = None,
    dump: Optional[Callable[[Any], Any]] = None,
    load: Optional[Callable[[Any], Any]] = None,
    data: bool = True,
    **kwargs: Any,
) -> Any:
    """A dataclass field whose place in the record's data differs from its name and type's default.

    Args:
        key: the field's key in the data (default: its name).
        flat: for a nested record: its keys are the parent's own, each with this prefix (``""``,
            ``"http_"``); left out when the field is None.
        dump: writes the field's value as data (default: by its type).
        load: reads the value from data (default: coercion by type); raises RecordError.
        data: False for a field that is not a key of the data (set by a loader, or ``extra``).
        **kwargs: ``dataclasses.field``'s (``default``, ``default_factory``, ``compare``, ...).
    """
    options = {"key": key, "flat": flat, "dump": dump, "load": load, "data": data}
    return dataclasses.field(metadata={_META: options}, **kwargs)


def extra_field() -> Any:
    """The ``extra`` field of a forward-compatible record: the keys it does not know, as read."""
    return field(data=False, default_factory=dict)


@dataclasses.dataclass(frozen=True)
class _Slot:
    """How one field of a record sits in its data."""

    name: str
    key: str
    hint: Any
    required: bool
    flat: Optional[str]
    dump: Optional[Callable[[Any], Any]]
    load: Optional[Callable[[Any], Any]]


@functools.cache
def _slots(cls: type) -> tuple[_Slot, ...]:
    """The data fields of a record class, in declaration order."""
    hints = typing.get_type_hints(cls)
    slots = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get(_META, {})
        if meta.get("data", True):
            required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            key, flat, dump, load = meta.get("key") or f.name, meta.get("flat"), meta.get("dump"), meta.get("load")
            slots.append(_Slot(f.name, key, hints[f.name], required, flat, dump, load))
    return tuple(slots)


def _record_type(hint: Any) -> type[Record]:
    """The record class of a (maybe Optional) nested record's annotation."""
    for candidate in (hint, *typing.get_args(hint)):
        if isinstance(candidate, type) and issubclass(candidate, Record):
            return candidate
    raise TypeError(f"a flat field must hold a record, got {hint!r}")


@functools.cache
def _keys(cls: type[Record]) -> tuple[str, ...]:
    """Every key a record's data may have, in the order ``to_dict`` writes them."""
    keys: list[str] = []
    for slot in _slots(cls):
        if slot.flat is None:
            keys.append(slot.key)
        else:
            keys.extend(slot.flat + k for k in _keys(_record_type(slot.hint)))
    return tuple(keys)


def _missing(cls: type[Record], data: Mapping[str, Any]) -> list[str]:
    """The required keys ``data`` lacks (a flat record's, when it is required or partly given).

    A field written only when set (``_omit_empty``) is never missing: its absence reads as empty.
    """
    missing = []
    for slot in _slots(cls):
        if slot.flat is None:
            required = slot.required and slot.name not in cls._omit_empty
            missing.extend([slot.key] if required and slot.key not in data else [])
            continue
        inner = [slot.flat + k for k in _keys(_record_type(slot.hint))]
        if slot.required or any(k in data for k in inner):
            missing.extend(slot.flat + k for k in _missing(_record_type(slot.hint), {}) if slot.flat + k not in data)
    return missing


def _empty(value: Any) -> bool:
    return value is None or (isinstance(value, (Mapping, tuple, list)) and not value)


def _plain(value: Any) -> Any:
    """A value as plain data: records as their ``to_dict``, mappings as dicts, tuples as lists."""
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


class Record:
    """Base of the typed records: ``from_dict`` and ``to_dict`` driven by the dataclass fields.

    A subclass is a frozen dataclass; its class variables (plain assignments) say how it is read:

    - ``_mode``: :data:`STRICT` (the default) or :data:`FORWARD_COMPATIBLE`, which needs an
      ``extra`` field (:func:`extra_field`);
    - ``_error``: the exception its reading raises (a ``ValueError``; :class:`RecordError` by default);
    - ``_what``: how messages name it (default: the class name);
    - ``_hint``: what to do about bad data, appended to every message (``re-run the convert step``);
    - ``_omit_empty``: fields written only when set (not None, not an empty mapping or list); one
      that is absent reads as its default, or None;
    - ``_renamed``: keys of earlier versions -> what to write now (a strict record names it);
    - ``_moved``: a mapping field -> the top-level keys that held its entries in an earlier
      version: a file without the field reads them into it, and the record writes them back as
      copies for the readers of that format (:meth:`upgrade` reads such data as plain data).

    Readers of old formats live here, declared by the record that changed: nowhere else.

    :func:`field` places a field elsewhere in the data (another key, flat under a prefix, its own
    reader and writer, or not in the data at all).
    """

    _mode: ClassVar[str] = STRICT
    _error: ClassVar[type[ValueError]] = RecordError
    _what: ClassVar[str] = ""
    _hint: ClassVar[str] = ""
    _omit_empty: ClassVar[tuple[str, ...]] = ()
    _renamed: ClassVar[Mapping[str, str]] = {}
    _moved: ClassVar[Mapping[str, tuple[str, ...]]] = {}

    @classmethod
    def _bad_data(cls, message: str) -> ValueError:
        return cls._error(message + (f"; {cls._hint}" if cls._hint else ""))

    @classmethod
    def from_dict(cls: type[R], data: Optional[Mapping[str, Any]], _prefix: str = "") -> R:
        """Reads the record from plain data (None reads as an empty mapping).

        Args:
            data: the record's keys and values.
            _prefix: where the data sits, for messages (``train.``, ``dataset.json: splits.train.``).

        Raises:
            ValueError: the record's ``_error``: data that is not a mapping, an unknown key (strict
                records), a missing required key, a value of the wrong type or a broken rule.
        """
        return cls._build(cls._values(data, _prefix), _prefix)

    @classmethod
    def _values(cls, data: Optional[Mapping[str, Any]], prefix: str) -> dict[str, Any]:
        """The data of each field (unknown keys checked or kept, missing ones named), not yet read."""
        name, where = cls._what or cls.__name__, prefix.rstrip(".: ")
        data = {} if data is None else data
        if not isinstance(data, Mapping):
            raise cls._bad_data(f"{where or name}: expected a mapping, got {type(data).__name__}: {str(data)[:200]}")
        data = cls.upgrade(data)
        keys = _keys(cls)
        unknown = [k for k in data if k not in keys]
        if unknown and cls._mode == STRICT:
            if unknown[0] in cls._renamed:
                raise cls._bad_data(f"{prefix}{unknown[0]}: renamed; set {prefix}{cls._renamed[unknown[0]]} instead")
            raise cls._bad_data(f"{prefix}{unknown[0]}: unknown key in {name}; known keys: {', '.join(keys)}")
        missing = _missing(cls, data)
        if missing:
            of = f" of {name}" if where else ""
            raise cls._bad_data(f"{where or name}: missing keys {missing}{of}; known keys: {', '.join(keys)}")
        values: dict[str, Any] = {}
        for slot in _slots(cls):
            if slot.flat is None and slot.key in data:
                values[slot.name] = data[slot.key]
            elif slot.flat is None and slot.required:
                values[slot.name] = None  # left out when empty, with no default of its own
            elif slot.flat is not None:
                group = {k: data[slot.flat + k] for k in _keys(_record_type(slot.hint)) if slot.flat + k in data}
                values.update({slot.name: group} if group else {})
        if cls._mode == FORWARD_COMPATIBLE:
            values[EXTRA] = {k: data[k] for k in unknown}
        return values

    @classmethod
    def upgrade(cls, data: Mapping[str, Any]) -> dict[str, Any]:
        """``data`` in this version's shape: the ``_moved`` keys of an earlier version read into
        their field (where the field is absent), their copies dropped.
        """
        out = dict(data)
        for name, keys in cls._moved.items():
            held = {k: out.pop(k) for k in keys if k in out}
            if out.get(name) is None:
                out[name] = {k: v for k, v in held.items() if v is not None}
        return out

    @classmethod
    def _build(cls: type[R], values: dict[str, Any], prefix: str) -> R:
        """The record of its fields' data: each read by its type, then constructed (its rules checked).

        A value for a field that is no key of the data (a check's name) is taken as it is.
        """
        slots = {slot.name: slot for slot in _slots(cls)}
        try:
            fields = {n: _read(slots[n], v, prefix) if n in slots else v for n, v in values.items()}
        except RecordError as err:
            raise (err if isinstance(err, cls._error) else cls._bad_data(str(err))) from None
        try:
            return cls(**fields)
        except cls._error as err:
            # A rule between fields (``__post_init__``) broke: say where, for a nested record.
            where = prefix.rstrip(".: ")
            raise (cls._error(f"{where}: {err}") if where else err) from None

    def to_dict(self) -> dict[str, Any]:
        """Plain data that ``from_dict`` reads back to an equal record (with ``extra``'s keys)."""
        out: dict[str, Any] = {}
        for slot in _slots(type(self)):
            value = getattr(self, slot.name)
            if slot.flat is not None:
                out.update({slot.flat + k: v for k, v in value.to_dict().items()} if value is not None else {})
            elif not (slot.name in self._omit_empty and _empty(value)):
                out[slot.key] = slot.dump(value) if slot.dump else _plain(value)
        for name, keys in self._moved.items():
            entries = getattr(self, name) or {}
            out.update({k: entries.get(k) for k in keys})
        if self._mode == FORWARD_COMPATIBLE:
            out.update({k: v for k, v in getattr(self, EXTRA).items() if k not in out})
        return out


def _read(slot: _Slot, value: Any, prefix: str) -> Any:
    """One field's value from its data."""
    if slot.load is not None:
        try:
            return slot.load(value)
        except RecordError as err:
            raise RecordError(f"{prefix}{slot.key}: {err}") from None
    if slot.flat is not None:
        return _record_type(slot.hint).from_dict(value, _prefix=prefix + slot.flat)
    return check_type(prefix + slot.key, value, slot.hint)


def check_type(field: str, value: Any, annotation: Any, freeze: bool = False) -> Any:
    """Coerces ``value`` to ``annotation`` where it is lossless, else raises RecordError naming ``field``.

    Args:
        field: the value's name in messages (``train.epochs``, ``splits.train.count``).
        value: the data.
        annotation: the field's type.
        freeze: mappings become read-only (``MappingProxyType``; configs), else plain dicts.
    """
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        return _check_union(field, value, typing.get_args(annotation), freeze)
    if origin is typing.Literal:
        if value not in typing.get_args(annotation):
            raise RecordError(f"{field}: expected one of {list(typing.get_args(annotation))}, got {value!r}")
        return value
    if origin in (tuple, list):
        return _check_sequence(field, value, annotation, freeze)
    if origin in (dict, Mapping, typing.Mapping) or annotation in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise RecordError(f"{field}: expected a mapping, got {value!r}")
        kt, vt = typing.get_args(annotation) or (Any, Any)
        items = {check_type(field, k, kt): check_type(f"{field}.{k}", v, vt, freeze) for k, v in value.items()}
        return types.MappingProxyType(items) if freeze else items
    if isinstance(annotation, type) and issubclass(annotation, Record):
        if isinstance(value, annotation):
            return value
        if not isinstance(value, Mapping):
            raise RecordError(f"{field}: expected a mapping for {annotation.__name__}, got {value!r}")
        return annotation.from_dict(value, _prefix=f"{field}.")
    return _check_scalar(field, value, annotation)


def _check_union(field: str, value: Any, args: tuple[Any, ...], freeze: bool) -> Any:
    if value is None and type(None) in args:
        return None
    if type(value) in args and type(value) in (bool, int, float, str):
        return value  # already one of the union's types (``int | float`` keeps the number as written)
    errors = []
    for arg in args:
        if arg is type(None):
            continue
        try:
            return check_type(field, value, arg, freeze)
        except RecordError as err:
            errors.append(str(err))
    kinds = " or ".join(_describe(a) for a in args if a is not type(None))
    raise RecordError(errors[0] if len(errors) == 1 else f"{field}: expected {kinds}, got {value!r}")


def _check_sequence(field: str, value: Any, annotation: Any, freeze: bool) -> Any:
    if not isinstance(value, (list, tuple)):
        raise RecordError(f"{field}: expected a list, got {value!r}")
    args = typing.get_args(annotation) or (Any, ...)
    if typing.get_origin(annotation) is list:
        return [check_type(f"{field}[{i}]", v, args[0], freeze) for i, v in enumerate(value)]
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(check_type(f"{field}[{i}]", v, args[0], freeze) for i, v in enumerate(value))
    if len(value) != len(args):
        raise RecordError(f"{field}: expected {len(args)} items, got {value!r}")
    return tuple(check_type(f"{field}[{i}]", v, a, freeze) for i, (v, a) in enumerate(zip(value, args, strict=True)))


def _check_scalar(field: str, value: Any, annotation: Any) -> Any:
    if annotation is bool:
        if not isinstance(value, bool):
            raise RecordError(f"{field}: expected true or false, got {value!r}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RecordError(f"{field}: expected a number, got {value!r}")
        return float(value)
    if annotation is int:
        number = whole_int(value)
        if number is None:
            raise RecordError(f"{field}: expected an integer, got {value!r}")
        return number
    if annotation is str:
        if not isinstance(value, str):
            raise RecordError(f"{field}: expected a string, got {value!r}")
        return value
    return value


def _describe(annotation: Any) -> str:
    """A type as a message names it: ``a number``, ``'auto'``, ``a list``."""
    if typing.get_origin(annotation) is typing.Literal:
        return " or ".join(repr(a) for a in typing.get_args(annotation))
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    names.update({tuple: "a list", list: "a list"})
    return names.get(typing.get_origin(annotation) or annotation, str(annotation).replace("typing.", ""))
