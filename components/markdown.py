"""Markdown tables, written once for every Markdown report: evaluation, benchmark, sweeps, promotion, monitor."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# The alignment row's mark per column letter: ``l`` left, ``r`` right.
_MARKS = {"l": "---", "r": "---:"}


def escape(text: Any) -> str:
    """A cell's text with the characters that would break a Markdown table row escaped.

    A pipe would end the cell early and a line break would end the row: a pipe gets a backslash
    before it, a line break becomes a space.
    """
    return str(text).replace("|", "\\|").replace("\r\n", " ").replace("\n", " ")


def _row(cells: Sequence[Any]) -> str:
    return "| " + " | ".join(escape(c) for c in cells) + " |"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str) -> list[str]:
    """A Markdown table as lines; every cell (headers too) is escaped with :func:`escape`.

    Args:
        headers: the column titles.
        rows: one sequence of cells per row, as long as ``headers``; a cell is written as
            ``str(cell)`` (format numbers before).
        align: one letter per column: ``l`` left, ``r`` right.

    Returns:
        The header, the alignment row and one line per row.

    Raises:
        ValueError: ``align`` or a row does not match the headers' length, or an unknown letter.
    """
    if len(align) != len(headers) or set(align) - set(_MARKS):
        raise ValueError(f"markdown table: align needs one of l/r per column ({len(headers)}), got {align!r}")
    lines = [_row(headers), "|" + "".join(_MARKS[a] + "|" for a in align)]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"markdown table: a row has {len(row)} cells for {len(headers)} columns: {list(row)}")
        lines.append(_row(row))
    return lines
