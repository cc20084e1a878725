"""The data checks' outcome in a few lines, for the model card and the run report.

The validate step returns ``validation.json``'s content (``components/validate/run.py``:
``passed``, ``counts`` per severity, ``findings`` each with ``kind``, ``severity``, ``message``
and ``split``, ``notes``); the train step appends these lines to the model card, and the run
report shows them in its dataset section. Read here without importing the validate step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

SHOWN = 10  # findings listed; the rest are counted
_MESSAGE_CHARS = 300


def _counts(validation: Mapping[str, Any]) -> str:
    counts = validation.get("counts") or {}
    parts = [f"{counts[k]} {k}{'s' if counts[k] != 1 else ''}" for k in ("error", "warn") if counts.get(k)]
    return ", ".join(parts) or "no findings"


def summary_line(validation: Optional[Mapping[str, Any]]) -> str:
    """One line: whether the data passed, and its findings by severity."""
    if not validation:
        return "not checked (no validation record)"
    verdict = "passed" if validation.get("passed") else "failed"
    return f"{verdict}: {_counts(validation)}"


def finding_lines(validation: Optional[Mapping[str, Any]], shown: int = SHOWN) -> list[str]:
    """One line per finding (``severity kind (split): message``), the first ``shown``, then the notes."""
    if not validation:
        return []
    findings = [f for f in validation.get("findings") or () if f.get("severity") != "ignore"]
    lines = []
    for f in findings[:shown]:
        split = f" ({f['split']})" if f.get("split") else ""
        message = " ".join(str(f.get("message", "")).split())
        if len(message) > _MESSAGE_CHARS:
            message = message[: _MESSAGE_CHARS - 3] + "..."
        lines.append(f"{f.get('severity', '?')} {f.get('kind', '?')}{split}: {message}")
    if len(findings) > shown:
        lines.append(f"... and {len(findings) - shown} more finding(s) in validation.json")
    return lines + [f"note: {n}" for n in validation.get("notes") or ()]


def card_section(validation: Optional[Mapping[str, Any]]) -> list[str]:
    """The model card's ``## Data checks`` section (Markdown lines)."""
    return ["## Data checks", f"- {summary_line(validation)}", *(f"- {line}" for line in finding_lines(validation))]
