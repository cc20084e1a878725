"""The notebook's ``parameters`` cell: what it declares, and the values given turned to its types.

kfp.local hands a dict parameter's contents over with every number as a float (``{"epochs": 3}``
arrives as ``{"epochs": 3.0}``), and so does JSON tooling on the way. The rule
here: a float with an integral value becomes an int where the notebook's default for that name is
an int (in lists and dicts too, element by element against the default's elements); where the
default is a float, or not a literal, the value is left as given. ``True``/``False`` are never
numbers here.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Mapping
from typing import Any

from trainer.configbase import whole_int

PARAMETERS_TAG = "parameters"


class NotebookParameterError(ValueError):
    """A parameter does not fit the notebook; the message names it and says what the notebook has."""


def parameters_cell(nb: Any) -> Any:
    """The first code cell tagged ``parameters``, or None when the notebook has none."""
    for cell in nb.cells:
        if cell.cell_type == "code" and PARAMETERS_TAG in cell.get("metadata", {}).get("tags", []):
            return cell
    return None


@dataclasses.dataclass(frozen=True)
class Declared:
    """What a parameters cell assigns.

    Attributes:
        names: every name assigned at the top level, in order.
        defaults: name -> value for the defaults that are Python literals (not ``os.environ[...]``
            or a call: those have no type to restore).
    """

    names: tuple[str, ...]
    defaults: dict[str, Any]


def declared_parameters(source: str) -> Declared:
    """Names assigned at the top level of a parameters cell, with their literal defaults.

    Args:
        source: the cell's source.

    Returns:
        The names and literal defaults.

    Raises:
        NotebookParameterError: the cell is not valid Python.
    """
    # IPython magics and shell escapes are not Python; they declare nothing.
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError as err:
        raise NotebookParameterError(f"the notebook's parameters cell is not valid Python: {err}") from None
    names: list[str] = []
    defaults: dict[str, Any] = {}
    for node in tree.body:
        targets: list[ast.expr] = []
        value = None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        for target in targets:
            if isinstance(target, ast.Name):
                names.append(target.id)
                try:
                    defaults[target.id] = ast.literal_eval(value)
                except ValueError:
                    defaults.pop(target.id, None)
    return Declared(tuple(dict.fromkeys(names)), defaults)


def coerce(value: Any, default: Any) -> Any:
    """``value`` with integral floats turned into ints where ``default`` holds an int there."""
    if isinstance(default, bool):
        return value
    if isinstance(default, int) and isinstance(value, float) and whole_int(value) is not None:
        return int(value)
    if isinstance(default, (list, tuple)) and isinstance(value, (list, tuple)) and default:
        # A list default is read as homogeneous: its first element types every given element.
        return type(value)(coerce(v, default[0]) for v in value)
    if isinstance(default, Mapping) and isinstance(value, Mapping):
        return {k: coerce(v, default[k]) if k in default else v for k, v in value.items()}
    return value


def prepare(nb: Any, given: Mapping[str, Any], notebook: str) -> dict[str, Any]:
    """Checks the given parameters against the notebook and restores their types.

    Args:
        nb: the notebook (an ``nbformat`` node).
        given: name -> value as the step received them.
        notebook: where the notebook came from, for messages.

    Returns:
        name -> value to inject.

    Raises:
        NotebookParameterError: parameters given to a notebook with no cell tagged ``parameters``,
            or a name that cell does not assign (a typo would otherwise be ignored silently).
    """
    if not given:
        return {}
    cell = parameters_cell(nb)
    if cell is None:
        raise NotebookParameterError(
            f"{notebook} has no cell tagged {PARAMETERS_TAG!r}, but parameters were given ({', '.join(given)}); "
            "tag the cell that assigns the defaults (Jupyter: View > Cell Toolbar > Tags) or give no parameters"
        )
    declared = declared_parameters(cell.source)
    unknown = sorted(set(given) - set(declared.names))
    if unknown:
        raise NotebookParameterError(
            f"parameter(s) {', '.join(unknown)} are not assigned in the parameters cell of {notebook}; "
            f"it declares: {', '.join(declared.names) or 'nothing'}"
        )
    return {
        name: coerce(value, declared.defaults[name]) if name in declared.defaults else value
        for name, value in given.items()
    }
