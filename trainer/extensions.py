"""Extra modules that extend the project's registries (tasks, source kinds), named in one variable.

``LTP_EXTENSIONS`` holds comma-separated module names (e.g. ``tests.toy_task``). Each registry
calls :func:`load_extensions` when it is first looked up, so such a module may register a task
(``trainer.tasks.register``), a source kind (``components.image_input.sources.registry.register_kind``)
and evaluation renderers at once. A kfp.local step's subprocess inherits the variable and finds the
same extensions.
"""

from __future__ import annotations

import importlib
import os

EXTENSIONS_ENV = "LTP_EXTENSIONS"

_loaded: set[str] = set()


class ExtensionError(ImportError):
    """A module named in ``LTP_EXTENSIONS`` cannot be imported."""


def extension_modules() -> list[str]:
    """The module names ``LTP_EXTENSIONS`` lists, in order (empty when unset)."""
    return [m.strip() for m in os.environ.get(EXTENSIONS_ENV, "").split(",") if m.strip()]


def load_extensions() -> None:
    """Imports the modules ``LTP_EXTENSIONS`` names, once each (a registry calls it on every look-up).

    Raises:
        ExtensionError: a module cannot be imported; the message names it and the variable.
    """
    for module in extension_modules():
        if module in _loaded:
            continue
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ExtensionError(f"{EXTENSIONS_ENV}: cannot import extension module {module!r}: {err}") from err
        _loaded.add(module)
