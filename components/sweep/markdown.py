"""Markdown tables, written once for every benchmark report (the sweep's, gpu_vs_tpu's)."""

from __future__ import annotations

from collections.abc import Sequence


def escape(text: str) -> str:
    """A cell's text with the characters that would break a Markdown table row escaped."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], align: str) -> list[str]:
    """A Markdown table as lines.

    Args:
        headers: the column titles.
        rows: one sequence of cell texts per row, as long as ``headers``.
        align: one letter per column: ``l`` left, ``r`` right.

    Returns:
        The header, the alignment row and one line per row.

    Raises:
        ValueError: ``align`` or a row does not match the headers' length, or an unknown letter.
    """
    if len(align) != len(headers) or set(align) - {"l", "r"}:
        raise ValueError(f"markdown table: align needs one of l/r per column ({len(headers)}), got {align!r}")
    marks = {"l": "---", "r": "---:"}
    lines = ["| " + " | ".join(headers) + " |", "|" + "".join(marks[a] + "|" for a in align)]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"markdown table: a row has {len(row)} cells for {len(headers)} columns: {list(row)}")
        lines.append("| " + " | ".join(escape(c) for c in row) + " |")
    return lines
