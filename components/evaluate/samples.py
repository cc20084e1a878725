"""The evaluation's part of the run report (the ``samples`` artifact, ``samples.json``), the same for every task.

The evaluation's figures say how often the model is wrong; its image sample shows on what. The
record is one JSON object: ``task``, ``split``, ``class_names``, ``scanned`` (images looked at),
``summary`` (one line on what the sample is), ``tile_px`` (the width its images are shown at),
``images`` (each a tile: ``data`` base64, ``mime``, ``caption`` lines and ``ok``, with the task's
own fields beside) and ``sections``: the task's parts of the run report's sections (``dataset``,
``training``, ``evaluation``), HTML its renderers made. The run report (another step, which cannot
import the renderers) shows them as they are.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Sequence
from typing import Any

# The width the run report shows a tile's image at, unless the sample says otherwise.
TILE_PX = 56


def mime(data: bytes) -> str:
    """The MIME type of encoded image bytes, from their signature."""
    if data.startswith(b"\x89PNG"):
        return "image/png"
    if data.startswith(b"\xff\xd8"):
        return "image/jpeg"
    if data.startswith(b"GIF8"):
        return "image/gif"
    if data.startswith(b"BM"):
        return "image/bmp"
    return "application/octet-stream"


def tile(data: bytes, caption: Sequence[str], ok: bool, **fields: Any) -> dict[str, Any]:
    """One image of the sample as the run report shows it: the image, its caption lines, right or not.

    Args:
        data: the encoded image.
        caption: the lines under it (plain text).
        ok: whether the model got it right (the report frames the others in red).
        **fields: the task's own fields (``true``, ``predicted``, ``f1``, ...), kept in the JSON.
    """
    return {"data": base64.b64encode(data).decode("ascii"), "mime": mime(data), "caption": list(caption), "ok": ok,
            **fields}  # fmt: skip


def empty_record(task: str, split: str) -> dict[str, Any]:
    """The record of a task whose renderers publish no sample and no sections."""
    return {"task": task, "split": split, "class_names": [], "scanned": 0, "images": [], "sections": {}}


def write_record(record: dict[str, Any], path: str) -> None:
    """Writes ``samples.json``."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(record, f)
