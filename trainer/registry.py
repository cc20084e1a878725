"""One registry helper behind every seam (tasks, source kinds, serving targets, launchers, renderers).

A :class:`Registry` maps names to entries (a class, an instance or a factory). It loads lazily: its
built-in modules and the extension modules ``LTP_EXTENSIONS`` names (:mod:`trainer.extensions`) are
imported on the first look-up, and each registers its entries on import. A look-up of an unknown
name raises the registry's own error type, listing the known names. No TensorFlow, no kfp.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from trainer.extensions import ExtensionError, load_extensions

T = TypeVar("T")


class Registry(Generic[T]):
    """Named entries of one kind, loaded on first use.

    Args:
        kind: what an entry is, for messages (``task``, ``serving target``, ``source kind``).
        builtins: modules that register the built-in entries when imported (imported on the
            first look-up, in order).
        error: the exception type look-ups and double registrations raise (the seam's own).
        replace: a second registration of a name replaces the first (launcher factories); by
            default it is an error unless it registers the very same entry again.
        ordered: the registration order means something (source kinds are tried in it), so
            messages list the names in it; otherwise sorted.
    """

    def __init__(
        self,
        kind: str,
        builtins: Iterable[str] = (),
        error: type[Exception] = LookupError,
        replace: bool = False,
        ordered: bool = False,
    ) -> None:
        self.kind = kind
        self.error = error
        self._builtins = tuple(builtins)
        self._replace = replace
        self._ordered = ordered
        self._entries: dict[str, T] = {}

    def register(self, name: str, entry: T) -> T:
        """Adds ``entry`` under ``name`` and returns it.

        Raises:
            error: another entry holds the name (unless the registry replaces).
        """
        known = self._entries.get(name)
        if known is not None and known is not entry and not self._replace:
            raise self.error(
                f"{self.kind} {name!r} is registered twice: {_origin(known)} and {_origin(entry)}; expected a new name"
            )
        self._entries[name] = entry
        return entry

    def decorator(self, name_of: Callable[[T], str]) -> Callable[[T], T]:
        """A class decorator that registers the class under ``name_of(cls)``."""
        return lambda entry: self.register(name_of(entry), entry)

    def load(self) -> None:
        """Imports the built-in modules and the ``LTP_EXTENSIONS`` modules (once each; cheap after).

        Raises:
            error: an extension module cannot be imported (the message names it and the variable).
        """
        for module in self._builtins:
            importlib.import_module(module)
        try:
            load_extensions()
        except ExtensionError as err:
            raise self.error(str(err)) from err

    def entries(self) -> dict[str, T]:
        """Name -> entry, every registered one, in registration order."""
        self.load()
        return dict(self._entries)

    def names(self) -> list[str]:
        """The registered names, in registration order (built-in modules first, then extensions)."""
        return list(self.entries())

    def get(self, name: str) -> T:
        """The entry called ``name``.

        Raises:
            error: no entry has that name; the message lists the known ones.
        """
        entries = self.entries()
        if name not in entries:
            known = list(entries) if self._ordered else sorted(entries)
            raise self.error(f"unknown {self.kind} {name!r}; expected one of {', '.join(known)}")
        return entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self.entries()


def _origin(entry: object) -> str:
    """Where an entry was defined, for the double-registration message."""
    return getattr(entry, "__module__", None) or type(entry).__module__
