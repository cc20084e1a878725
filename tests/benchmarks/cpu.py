"""The line every benchmark prints first: which CPU measured it, and whether it has bf16 units.

Ratios move with the host (a CPU with bf16 units trains the detector faster in bfloat16, one
without emulates it); a figure without the CPU it came from cannot be compared with a target.
"""

from __future__ import annotations

import os
from pathlib import Path

from trainer.distribute import CPU_BF16_FLAGS, cpu_bf16_units, cpu_flags


def cpu_line(cpuinfo: str | None = None) -> str:
    """``CPU: <model name>, <n> cores, bf16 flags: <flags or none> (<whether oneDNN uses them>)``.

    Args:
        cpuinfo: a ``/proc/cpuinfo`` text; None reads this machine's (``unknown`` where there is none).
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    model = next(
        (line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("model name")), "unknown"
    )
    flags = sorted(CPU_BF16_FLAGS & cpu_flags(cpuinfo))
    native = cpu_bf16_units(cpuinfo, os.environ)
    usage = native or "bfloat16 is emulated here"
    return f"CPU: {model}, {os.cpu_count()} cores, bf16 flags: {', '.join(flags) or 'none'} ({usage})"


def versus(name: str, ratio: float, target: str) -> str:
    """``<name>: <ratio>x (target <target>)``: a ratio printed next to the target it is checked against."""
    return f"{name}: {ratio:.2f}x (target {target})"
