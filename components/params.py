"""The one translation of KFP's stand-ins for "none" into ``None``.

kfp 2.17.3 cannot leave every parameter out: ``kfp.local`` refuses ``Optional[int] = None`` on a
component (it calls ``int(None)``), and a pipeline refuses ``Optional[str] = None`` (its default has
no parameter type). So those parameters take ``0`` or ``""`` for "none" in the run form, and a
component hands them on as ``None`` through this helper, never by its own ``x or None``. Where
kfp.local accepts it (``Optional[str|float|dict] = None`` on a component), a component declares
``Optional[...] = None`` and a pipeline's ``""`` still arrives as ``""``: the helper covers both.
"""

from __future__ import annotations

from typing import Any, Optional, TypeVar

T = TypeVar("T")


def none_if_empty(value: Optional[T]) -> Optional[T]:
    """``None`` for KFP's stand-ins of "none" (``None``, ``""``, ``0``, ``0.0``, ``{}``, ``[]``), else ``value``.

    Booleans pass unchanged (``False`` is a value, not "none").

    Args:
        value: a component parameter whose empty form means "not given".

    Returns:
        ``None`` or ``value`` itself.
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float, str, dict, list, tuple)) and not value:
        return None
    return value


def without_none(value: Any) -> Any:
    """``value`` with every ``None`` left out of its mappings and lists: a parameter another task may take.

    kfp.local hands a task's returned dict on to the next task as a protobuf ``Struct``, which has
    no ``None``; a key whose value is None reads as absent.
    """
    if isinstance(value, dict):
        return {k: without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [without_none(v) for v in value if v is not None]
    return value
