"""Image folders: one subfolder per class, local or under a gs:// prefix (scored: every image under it)."""

from __future__ import annotations

import logging
import os
import posixpath
from collections import Counter
from typing import Any

from components.image_input.imaging import EXTENSIONS
from components.image_input.sources.base import (
    Claim,
    InputError,
    Item,
    Listing,
    PredictItem,
    Source,
    SourceError,
    SourceKind,
    digest,
    fingerprint,
)
from trainer import storage
from trainer.storage import is_gcs

log = logging.getLogger(__name__)

# What batch prediction scores in a folder (any case): the image files; the others (a README, a label file) are skipped.
IMAGE_SUFFIXES = tuple(EXTENSIONS)

Walk = tuple[list[tuple[str, int]], Counter, list[Any], set[str]]


def _walk_local(root: str) -> Walk:
    """Lists the visible files under root; hidden ones are counted.

    Returns:
        (relative posix path, size) per file, the skipped counts, (path, size, mtime) per file, and
        the visible subfolders of root (the class folders, empty ones included).
    """
    files: list[tuple[str, int]] = []
    fp: list[Any] = []
    skipped: Counter = Counter()
    folders: set[str] = set()
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(os.path.join(root, rel)) as it:
            for entry in it:
                if entry.name.startswith("."):
                    skipped["hidden"] += 1
                    continue
                path = posixpath.join(rel, entry.name) if rel else entry.name
                if entry.is_dir(follow_symlinks=True):
                    stack.append(path)
                    if not rel:
                        folders.add(entry.name)
                elif entry.is_file(follow_symlinks=True):
                    st = entry.stat()
                    files.append((path, st.st_size))
                    fp.append((path, st.st_size, st.st_mtime_ns))
                elif entry.is_symlink():  # dangling: listed, so that it is rejected as unreadable
                    files.append((path, 0))
                    fp.append((path, 0, 0))
    files.sort()
    return files, skipped, sorted(fp), folders


def _walk_gcs(uri: str) -> Walk:
    """What :func:`_walk_local` returns, for a gs:// prefix."""
    bucket, name = storage.split_gcs(uri)
    prefix = f"{name}/" if name else ""
    files, skipped, fp, folders = [], Counter(), [], set()
    for blob in storage.client().list_blobs(bucket, prefix=prefix):
        rel = blob.name[len(prefix) :]
        top = rel.split("/", 1)[0]
        if "/" in rel and not top.startswith("."):
            folders.add(top)  # a folder placeholder ("cat/") or any object under it makes a class folder
        if not rel or rel.endswith("/"):
            continue
        if any(part.startswith(".") for part in rel.split("/")):
            skipped["hidden"] += 1
            continue
        files.append((rel, blob.size))
        fp.append((rel, blob.size, blob.generation))
    files.sort()
    return files, skipped, sorted(fp), folders


def _by_class(uri: str, root: str, files: list[tuple[str, int]], skipped: Counter) -> dict[str, list]:
    """The images of each class folder as (relative path, size, format); other files are counted as skipped.

    Raises:
        SourceError: no image lies inside a class subfolder.
    """
    by_class: dict[str, list[tuple[str, int, str]]] = {}
    other_ext: Counter = Counter()
    for rel, size in files:
        ext = posixpath.splitext(rel)[1].lower()
        fmt = EXTENSIONS.get(ext)
        if fmt is None:
            skipped["not_image"] += 1
            other_ext[ext or "(none)"] += 1
            continue
        if "/" not in rel:
            skipped["outside_class_folder"] += 1
            continue
        by_class.setdefault(rel.split("/", 1)[0], []).append((rel, size, fmt))
    if not by_class:
        found = ", ".join(f"{n} {e}" for e, n in other_ext.most_common(5)) or "none"
        loose = skipped.get("outside_class_folder", 0)
        raise SourceError(
            f"no images in {uri}: found {len(files)} files (extensions: {found}; {loose} images directly "
            f"in the folder), none inside a class subfolder; expected {root}/<class>/<image> with "
            f"extensions {', '.join(sorted(EXTENSIONS))}"
        )
    return by_class


def _class_names(
    uri: str, root: str, by_class: dict[str, list], folders: set[str], classes: list[str] | None
) -> tuple[list[str], list[str]]:
    """(class names, class folders without images); warns about the empty ones.

    Raises:
        SourceError: a class folder is not among the declared classes.
    """
    names = sorted(by_class)
    if classes is not None:
        unknown = sorted(set(names) - set(classes))
        if unknown:
            raise SourceError(
                f"class folders {unknown} are not among the declared classes {list(classes)}; "
                "rename the folders or add the classes"
            )
        names = list(classes)
        empty = [c for c in names if c not in by_class]  # declared: kept as classes, with no images
    else:
        empty = sorted(folders - set(by_class))  # undeclared: a folder without images is no class
    if empty:
        log.warning(
            "%s: %d class folder(s) hold no images: %s; %s. A class without images cannot be learned: "
            "add images (%s) or remove the folder",
            uri,
            len(empty),
            ", ".join(f"{root}/{c}" for c in empty),
            "they stay among the declared classes, with 0 images"
            if classes is not None
            else "they are left out of the classes",
            ", ".join(sorted(EXTENSIONS)),
        )
    return names, empty


class FolderKind(SourceKind):
    """An image folder with one subfolder per class: any folder no other kind claims (it claims last)."""

    name = "folder"
    description = "an image folder (one subfolder per class)"
    claim = Claim.ANY_FOLDER

    def matches(self, uri: str) -> bool:
        return storage.isdir(uri)

    def open(self, uri: str, classes: list[str] | None) -> Source:
        root = uri.rstrip("/")
        files, skipped, fp, folders = _walk_gcs(uri) if is_gcs(uri) else _walk_local(root)
        if not files:
            raise SourceError(
                f"no images in {uri}: the folder is empty; expected one subfolder per class holding "
                f"images (.jpg/.png/.gif/.bmp/.webp, any case) (e.g. {root}/cat/001.jpg)"
            )
        by_class = _by_class(uri, root, files, skipped)
        names, empty = _class_names(uri, root, by_class, folders, classes)
        items = [
            Item(rel, label, f"{root}/{rel}", size=size, expected=fmt)
            for label, name in enumerate(names)
            for rel, size, fmt in by_class.get(name, [])
        ]
        # Empty folders join the fingerprint only when there are any: datasets made before stay up to date.
        fp_hash = fingerprint(fp + [("empty_classes", empty)] if empty else fp)
        return Source(self.name, uri, names, items, fp_hash, ignored=dict(skipped), empty_classes=empty)

    def prediction_listing(self, uri: str) -> Listing:
        """Every image file under the folder or ``gs://`` prefix, at any depth, by relative path; no labels.

        Raises:
            InputError: nothing under it, or no image file among what is.
        """
        files = storage.list_info(uri)
        if not files:
            raise InputError(
                f"{uri}: no such folder, or it is empty; give a folder (or gs:// prefix) of images, a CSV/JSONL "
                "list, a COCO file or a converted dataset"
            )
        images = [f for f in files if f.path.lower().endswith(IMAGE_SUFFIXES)]
        if not images:
            raise InputError(
                f"{uri}: {len(files)} files but no image among them (e.g. {files[0].path}); image files end in "
                f"{', '.join(IMAGE_SUFFIXES)}"
            )
        items = [PredictItem(storage.join(uri, f.path), f.path, i + 1) for i, f in enumerate(images)]
        return Listing(self.name, items, digest(f"{f.path}\t{f.size}:{f.version}" for f in images), labelled=False)


FOLDER = FolderKind()
