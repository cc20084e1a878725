"""CSV and JSONL manifests: one row per image with its path, label and maybe split and extra fields.

Scored (batch prediction), a manifest is a list of paths: column ``path`` (or ``image``,
``file_name``, ``uri``), the label optional.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import posixpath
from typing import Any

from components.image_input.imaging import EXTENSIONS
from components.image_input.sources.base import (
    InputError,
    Item,
    Listing,
    PredictItem,
    Source,
    SourceError,
    SourceKind,
    base_dir,
    digest,
    fingerprint,
    has_suffix,
    resolve,
    version,
)
from trainer import storage
from trainer.storage import is_gcs, read_bytes

# Column names a CSV/JSONL list may give its image paths under when scored, the first one present wins.
PATH_COLUMNS = ("path", "image", "file_name", "uri")


def _read_csv(uri: str, text: str) -> list[dict[str, Any]]:
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in (reader.fieldnames or [])]
    if "path" not in header or "label" not in header:
        raise SourceError(f"bad manifest header in {uri}: expected columns path,label[,split,...], got {header}")
    reader.fieldnames = header
    return [dict(r) for r in reader]


def _read_jsonl(uri: str, text: str) -> list[dict[str, Any]]:
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise SourceError(f"bad JSONL manifest {uri} line {n}: {err}") from None
        if not isinstance(row, dict) or "path" not in row or "label" not in row:
            raise SourceError(
                f"bad JSONL manifest {uri} line {n}: expected an object with 'path' and 'label', got {line[:80]}"
            )
        rows.append(row)
    return rows


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    return None


def labels_of(values: list[Any], classes: list[str] | None, where: str) -> tuple[list[int], list[str]]:
    """Label indices and class names from names or indices, checked against declared classes.

    Raises:
        SourceError: a negative index, or a label outside the declared classes.
    """
    ints = [_as_int(v) for v in values]
    names = [str(v).strip() for v in values]
    if classes is None:
        if all(i is not None for i in ints):
            top = max(ints)
            if min(ints) < 0:
                raise SourceError(f"{where}: label indices must be >= 0, got {min(ints)}")
            return ints, [str(i) for i in range(top + 1)]
        classes = sorted(set(names))
        index = {c: i for i, c in enumerate(classes)}
        return [index[n] for n in names], classes
    index = {c: i for i, c in enumerate(classes)}
    out = []
    for row, (i, name) in enumerate(zip(ints, names, strict=True), 1):
        if name in index:
            out.append(index[name])
        elif i is not None and 0 <= i < len(classes):
            out.append(i)
        else:
            raise SourceError(
                f"{where} row {row}: label {name!r} is outside the declared classes {list(classes)} "
                f"(give a class name or an index 0..{len(classes) - 1})"
            )
    return out, list(classes)


class ManifestKind(SourceKind):
    """A ``.csv`` (header ``path,label[,split,...]``) or ``.jsonl`` (one object per line) manifest."""

    description = "a .csv/.jsonl manifest"

    def __init__(self, name: str):
        self.name = name

    def matches(self, uri: str) -> bool:
        return has_suffix(uri, f".{self.name}")

    def _rows(self, uri: str) -> list[dict[str, Any]]:
        text = read_bytes(uri).decode("utf-8-sig")
        rows = _read_csv(uri, text) if self.name == "csv" else _read_jsonl(uri, text)
        if not rows:
            raise SourceError(f"no images in {uri}: the manifest has no rows; expected path,label[,split] rows")
        for n, row in enumerate(rows, 1):
            if not str(row.get("path") or "").strip() or str(row.get("label", "")).strip() == "":
                raise SourceError(f"{uri} row {n}: empty path or label: {row}")
        return rows

    def open(self, uri: str, classes: list[str] | None) -> Source:
        rows = self._rows(uri)
        base = base_dir(uri)
        labels, names = labels_of([r["label"] for r in rows], classes, uri)
        items, missing, fp = [], [], []
        for row, label in zip(rows, labels, strict=True):
            path = resolve(base, str(row["path"]).strip())
            size = 0
            if not is_gcs(path):
                try:
                    st = os.stat(path)
                    size = st.st_size
                    fp.append((path, st.st_size, st.st_mtime_ns))
                except OSError:
                    missing.append(str(row["path"]))
                    continue
            else:
                fp.append((path,))
            split = str(row.get("split") or "").strip() or None
            extra = {k: v for k, v in row.items() if k not in ("path", "label", "split") and v not in (None, "")}
            ext = posixpath.splitext(path)[1].lower()
            items.append(Item(str(row["path"]).strip(), label, path, split, size, EXTENSIONS.get(ext), extra or None))
        if missing:
            raise SourceError(
                f"{uri}: {len(missing)} rows point nowhere (e.g. {missing[:3]}); paths are relative to the "
                "manifest's folder or absolute; fix or drop those rows"
            )
        return Source(self.name, uri, names, items, fingerprint([read_bytes(uri), *fp]))

    def prediction_listing(self, uri: str) -> Listing:
        """The images the list names, as kind ``list``; labels when every row has one.

        A listed file that does not exist stays an item: scoring lists it among the failures with
        its reason, and scores the others.

        Raises:
            InputError: no such list, no path column, or no rows.
        """
        try:
            text = storage.read_text(uri)
        except FileNotFoundError:
            raise InputError(f"{uri}: no such file; give a CSV or JSONL list of image paths") from None
        rows = _rows_to_score(uri, text, self.name)
        if not rows:
            raise InputError(f"{uri}: the list is empty; give one image path per row (column 'path')")
        column = next((c for c in PATH_COLUMNS if c in rows[0]), None)
        if column is None:
            raise InputError(f"{uri}: no path column; expected one of {list(PATH_COLUMNS)}, got {sorted(rows[0])}")
        base = base_dir(uri)
        labelled = all(str(r.get("label") or "").strip() for r in rows)
        items = []
        for i, row in enumerate(rows):
            path = str(row.get(column) or "").strip()
            if not path:
                raise InputError(f"{uri}, row {i + 1}: the {column!r} column is empty")
            label = str(row["label"]).strip() if labelled else None
            items.append(PredictItem(resolve(base, path), path, i + 1, label))
        fp = digest([hashlib.sha256(text.encode()).hexdigest(), *(version(it.uri) for it in items)])
        return Listing("list", items, fp, labelled)


def _rows_to_score(uri: str, text: str, kind: str) -> list[dict[str, Any]]:
    """A list's rows as batch prediction reads them: any columns, the label optional."""
    if kind != "jsonl":
        return list(csv.DictReader(io.StringIO(text)))
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as err:
            raise InputError(f"{uri}, line {n}: not JSON ({err}); write one object per line") from None
        if not isinstance(row, dict):
            raise InputError(f'{uri}, line {n}: expected an object such as {{"path": "a.jpg"}}, got {row!r}')
        rows.append(row)
    return rows


CSV = ManifestKind("csv")
JSONL = ManifestKind("jsonl")
