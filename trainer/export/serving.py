"""Which form of a model a stage serves: the SavedModel or one of its portable formats (``serving_format``).

No TensorFlow: a promotion checks the choice before anything is published or deployed.

``serving_format`` names a form (``saved_model``, a format of :data:`~trainer.export.formats.FORMATS`)
or ``auto``: the form with the best images per dollar in the model's export record
(``export/export.json``) among the SavedModel and the formats that passed there, that the serving
target can serve and whose runtime is installed. A model without an export is served as its
SavedModel. Each refusal is one line naming the valid choices.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Optional

from trainer.export.formats import FORMATS, SERVED

AUTO = "auto"
CHOICES: tuple[str, ...] = (AUTO, SERVED, *FORMATS)
NOT_BUILT: dict[str, str] = {}
"""Format names a reader may expect that this project does not write, and why (none at present)."""


class ServingFormatError(ValueError):
    """A ``serving_format`` that cannot be served; the message names the valid choices."""


@dataclasses.dataclass(frozen=True)
class Choice:
    """The form a promotion serves, and why (one line for the report and the log)."""

    format: str
    reason: str


def check_name(name: str) -> str:
    """``name`` if it is a ``serving_format`` at all (before the model is known); else one line.

    Raises:
        ServingFormatError: an unknown name, or a format this project does not build.
    """
    if name in CHOICES:
        return name
    if name in NOT_BUILT:
        raise ServingFormatError(
            f"serving_format {name!r} is not built ({NOT_BUILT[name]}); the choices are {', '.join(CHOICES)}"
        )
    raise ServingFormatError(f"serving_format {name!r} does not exist; the choices are {', '.join(CHOICES)}")


def installed(name: str) -> bool:
    """Whether the runtime of a form is importable here (the SavedModel's always is)."""
    return name == SERVED or importlib.util.find_spec(FORMATS[name].module) is not None


def _rows(record: Optional[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {str(r.get("format")): r for r in (record or {}).get("rows") or [] if isinstance(r, Mapping)}


def _ipd(row: Optional[Mapping[str, Any]]) -> float:
    value = (row or {}).get("images_per_dollar")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def choose(
    requested: str,
    record: Optional[Mapping[str, Any]],
    target: str,
    target_formats: Collection[str],
    runtime_installed: Callable[[str], bool] = installed,
) -> Choice:
    """The form to serve for ``requested`` given the model's export record and the serving target.

    Args:
        requested: ``auto``, ``saved_model`` or a format name.
        record: the model's ``export.json`` (``passed``, ``rows`` with ``images_per_dollar``); None: no export.
        target: the serving target's name, for messages.
        target_formats: the forms the target can serve (``ServingTarget.serving_formats``).
        runtime_installed: whether a form's runtime is importable here.

    Raises:
        ServingFormatError: the name does not exist, the export refused (or never wrote) the
            format, the target cannot serve it, or its runtime is not installed.
    """
    check_name(requested)
    passed = [str(f) for f in (record or {}).get("passed") or () if f in FORMATS]
    rows = _rows(record)
    if requested == AUTO:
        return _auto(passed, rows, target, target_formats, runtime_installed)
    if requested == SERVED:
        return Choice(SERVED, "the SavedModel, as asked")
    _check_explicit(requested, passed, rows, target, target_formats, runtime_installed)
    return Choice(requested, f"{requested}, as asked: {_figure(rows.get(requested))}")


def _choices_for(passed: Sequence[str], target_formats: Collection[str]) -> str:
    return ", ".join([AUTO, SERVED, *(f for f in passed if f in target_formats)])


def _check_explicit(
    name: str,
    passed: Sequence[str],
    rows: Mapping[str, Mapping[str, Any]],
    target: str,
    target_formats: Collection[str],
    runtime_installed: Callable[[str], bool],
) -> None:
    valid = _choices_for(passed, target_formats)
    if name not in target_formats:
        raise ServingFormatError(
            f"serving_format {name!r}: target {target!r} serves only {', '.join(target_formats)}; choose "
            f"{', '.join(f for f in (AUTO, SERVED) if f == AUTO or f in target_formats)} for it"
        )
    if name not in passed:
        row = rows.get(name)
        why = f"the export refused it ({row.get('reason')})" if row else "the model's export has no such file"
        raise ServingFormatError(f"serving_format {name!r}: {why}; the choices for this model are {valid}")
    if not runtime_installed(name):
        runtime = FORMATS[name].runtime
        raise ServingFormatError(
            f"serving_format {name!r}: its runtime {runtime} is not installed in this image; install it "
            f"(pip install {runtime}) or choose one of {valid}"
        )


def _auto(
    passed: Sequence[str],
    rows: Mapping[str, Mapping[str, Any]],
    target: str,
    target_formats: Collection[str],
    runtime_installed: Callable[[str], bool],
) -> Choice:
    servable = [f for f in passed if f in target_formats and runtime_installed(f)]
    if not rows:
        return Choice(SERVED, "auto: the model has no export record: its SavedModel")
    best = max([SERVED, *servable], key=lambda f: _ipd(rows.get(f)))
    left_out = [f for f in passed if f not in servable]
    aside = f" ({', '.join(left_out)} passed; target {target!r} or this image cannot serve them)" if left_out else ""
    if best == SERVED:
        return Choice(SERVED, f"auto: no servable format that passed beats the SavedModel's images per dollar{aside}")
    return Choice(best, f"auto: {best}, the best images per dollar that passed: {_figure(rows.get(best))}{aside}")


def _figure(row: Optional[Mapping[str, Any]]) -> str:
    """The row's images per dollar against the served SavedModel, in words."""
    vs = (row or {}).get("vs_served")
    return f"{vs:.2f}x the SavedModel's images per dollar" if isinstance(vs, (int, float)) else "not priced"
