"""Files in a local folder or on GCS (gs://): the one storage layer of the project.

Every step reads and writes its own files through this module (docs/CONTRACTS.md, "Storage"):
convert's sources and output folders, the dataset manifest, the stage registry, the trainer's small
JSON files. What TensorFlow writes itself (checkpoints, SavedModels, TensorBoard) stays on
``tf.io.gfile``; this module never imports TensorFlow.

GCS goes through ``google-cloud-storage``, not TensorFlow, whose gs:// client ignores the local
emulator: with ``STORAGE_EMULATOR_HOST`` set, the client talks to that emulator anonymously. The
process keeps one client, made on first use (nothing is read or connected at import time);
:func:`reset_client` drops it (tests, after the emulator address changed). A forked child drops
the client it inherited by itself: an HTTP connection must not be shared between processes.

Writes are atomic per file: locally through a temporary file in the same folder and a rename, on
GCS because an object appears only once its upload is complete. A folder is published atomically
by writing a marker file last (:func:`publish`, :func:`publish_tree`); a reader treats a folder
without its marker as absent (:func:`is_published`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

GCS_PREFIX = "gs://"


# --------------------------------------------------------------------------------------------
# Names
# --------------------------------------------------------------------------------------------


def cache_root() -> str:
    """This machine's cache of generated data and measurements: ``$XDG_CACHE_HOME/lean-tpu-pipelines``
    (``~/.cache/lean-tpu-pipelines`` by default).
    """
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "lean-tpu-pipelines")


def is_gcs(uri: str) -> bool:
    """Tell whether ``uri`` names a GCS object or prefix (``gs://...``)."""
    return str(uri).startswith(GCS_PREFIX)


def join(base: str, *parts: str) -> str:
    """Join path parts with '/', for local paths and gs:// URIs alike (empty parts are skipped)."""
    out = base.rstrip("/")
    for part in parts:
        part = part.strip("/")
        if part:
            out = f"{out}/{part}" if out or base.startswith("/") else part
    return out or base


def split_gcs(uri: str) -> tuple[str, str]:
    """Split ``gs://bucket/a/b`` into ``("bucket", "a/b")`` (the object name without edge slashes).

    Raises:
        ValueError: the URI has no bucket name.
    """
    bucket, _, name = uri[len(GCS_PREFIX) :].partition("/")
    if not bucket:
        raise ValueError(f"{uri!r} is not a gs://<bucket>/<path> URI: the bucket name is missing")
    return bucket, name.strip("/")


def _prefix(name: str) -> str:
    """An object name as a folder prefix: ``a/b`` -> ``a/b/``; the bucket's root stays ``""``."""
    return f"{name}/" if name else ""


# --------------------------------------------------------------------------------------------
# The GCS client: one per process
# --------------------------------------------------------------------------------------------

_CLIENT: Any = None
_CLIENT_LOCK = threading.Lock()


def new_client() -> Any:
    """Make a ``google.cloud.storage.Client``: anonymous against ``STORAGE_EMULATOR_HOST`` when set.

    Most code wants :func:`client` (the process's cached one); this makes a fresh one.
    """
    from google.cloud import storage as gcs

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        return gcs.Client(project="local", credentials=AnonymousCredentials())
    return gcs.Client()


def client() -> Any:
    """Return the process's storage client, made on first use (threads share it)."""
    global _CLIENT
    found = _CLIENT
    if found is None:
        with _CLIENT_LOCK:  # several loader threads may ask at once: make one client, not several
            if _CLIENT is None:
                _CLIENT = new_client()
            found = _CLIENT
    return found


def reset_client() -> None:
    """Forget the cached client; the next call makes a new one (e.g. after the emulator address changed)."""
    global _CLIENT
    _CLIENT = None


def _after_fork_in_child() -> None:
    global _CLIENT, _CLIENT_LOCK
    _CLIENT = None
    _CLIENT_LOCK = threading.Lock()  # a thread of the parent may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def _blob(uri: str) -> Any:
    bucket, name = split_gcs(uri)
    return client().bucket(bucket).blob(name)


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


def read_bytes(uri: str) -> bytes:
    """Return a file's contents.

    Raises:
        FileNotFoundError: there is no such file or object.
        PermissionError: GCS refused access (the message says why).
    """
    if uri.startswith(GCS_PREFIX):
        from google.api_core import exceptions

        try:
            return _blob(uri).download_as_bytes()
        except exceptions.NotFound:
            raise FileNotFoundError(2, "No such object", uri) from None
        except exceptions.Forbidden as err:
            raise PermissionError(13, f"Permission denied ({err.message})", uri) from None
    # The converter's hot path (one call per photo): os.read costs half of open().read() for 25 KB.
    fd = os.open(uri, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        data = os.read(fd, size + 1)
        if len(data) != size:  # a short read, or a file that changed since fstat: read to the end
            parts = [data]
            while block := os.read(fd, 1 << 20):
                parts.append(block)
            data = b"".join(parts)
        return data
    finally:
        os.close(fd)


def read_text(uri: str) -> str:
    """Return a UTF-8 text file's contents.

    Raises:
        FileNotFoundError: there is no such file or object.
    """
    return read_bytes(uri).decode("utf-8")


def read_json(uri: str) -> Any:
    """Return a JSON file's parsed content, or None when the file does not exist.

    Raises:
        json.JSONDecodeError: the file is not valid JSON.
    """
    try:
        data = read_bytes(uri)
    except FileNotFoundError:
        return None
    return json.loads(data)


@dataclass(frozen=True)
class FileInfo:
    """A file found by :func:`list_info` or :func:`stat`.

    Attributes:
        path: relative to the folder listed, '/'-separated (for :func:`stat`, the URI given).
        size: bytes.
        version: changes when the file is replaced: the modification time in nanoseconds
            locally, the object's generation on GCS.
    """

    path: str
    size: int
    version: int


def stat(uri: str) -> FileInfo | None:
    """Return a file's size and version, or None when there is no such file."""
    if is_gcs(uri):
        bucket, name = split_gcs(uri)
        blob = client().bucket(bucket).get_blob(name)
        return None if blob is None else FileInfo(uri, blob.size, blob.generation)
    try:
        st = os.stat(uri)
    except FileNotFoundError:
        return None
    return FileInfo(uri, st.st_size, st.st_mtime_ns) if os.path.isfile(uri) else None


def exists(uri: str) -> bool:
    """Tell whether a file (not a folder) exists."""
    if is_gcs(uri):
        return _blob(uri).exists()
    return os.path.isfile(uri)


def isdir(uri: str) -> bool:
    """Tell whether a folder exists (on GCS: whether any object lies under the prefix)."""
    if is_gcs(uri):
        bucket, name = split_gcs(uri)
        return any(True for _ in client().list_blobs(bucket, prefix=_prefix(name), max_results=1))
    return os.path.isdir(uri)


def list_info(uri: str, recursive: bool = True) -> list[FileInfo]:
    """Return the files under a folder, sorted by relative path; empty when the folder is absent.

    Args:
        uri: the folder (local or gs://).
        recursive: also the files in subfolders (else only those directly in the folder).

    GCS "folder" placeholders (objects whose name ends in '/') are not files and are left out.
    """
    if is_gcs(uri):
        bucket, name = split_gcs(uri)
        prefix = _prefix(name)
        out = []
        for blob in client().list_blobs(bucket, prefix=prefix):
            rel = blob.name[len(prefix) :]
            if rel and not rel.endswith("/") and (recursive or "/" not in rel):
                out.append(FileInfo(rel, blob.size, blob.generation))
        return sorted(out, key=lambda f: f.path)
    if not os.path.isdir(uri):
        return []
    out = []
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(os.path.join(uri, rel) if rel else uri) as it:
            for entry in it:
                path = f"{rel}/{entry.name}" if rel else entry.name
                if entry.is_file():
                    st = entry.stat()
                    out.append(FileInfo(path, st.st_size, st.st_mtime_ns))
                elif recursive and entry.is_dir():
                    stack.append(path)
    return sorted(out, key=lambda f: f.path)


def list_files(uri: str) -> list[str]:
    """Return the relative paths of all files under a folder, sorted ('/'-separated)."""
    return [f.path for f in list_info(uri)]


def sizes(uri: str) -> dict[str, int]:
    """Return name -> size of the files directly in a folder (empty when it is absent)."""
    return {f.path: f.size for f in list_info(uri, recursive=False)}


def list_dirs(uri: str) -> list[str]:
    """Return the names of the immediate subfolders of a folder (on GCS: of a prefix)."""
    if is_gcs(uri):
        bucket, name = split_gcs(uri)
        prefix = _prefix(name)
        rels = (b.name[len(prefix) :] for b in client().list_blobs(bucket, prefix=prefix))
        return sorted({rel.split("/", 1)[0] for rel in rels if "/" in rel})
    if not os.path.isdir(uri):
        return []
    with os.scandir(uri) as it:
        return sorted(e.name for e in it if e.is_dir())


# --------------------------------------------------------------------------------------------
# Writing (each file atomically)
# --------------------------------------------------------------------------------------------


def _local_temp(path: str) -> str:
    """A hidden temporary name next to ``path``: the same file system, so the rename is atomic."""
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.tmp-{uuid.uuid4().hex[:8]}")


def _content_type(uri: str) -> str:
    return "application/json" if uri.endswith((".json", ".jsonl")) else "application/octet-stream"


def makedirs(uri: str) -> None:
    """Create a local folder and its parents (GCS has no folders: nothing to do)."""
    if not is_gcs(uri):
        os.makedirs(uri, exist_ok=True)


def write_bytes(uri: str, data: bytes) -> None:
    """Write a file whole: readers see the old or the new contents, never a part."""
    if is_gcs(uri):
        _blob(uri).upload_from_string(data, content_type=_content_type(uri))  # a GCS object appears whole
        return
    folder = os.path.dirname(uri)
    if folder:
        os.makedirs(folder, exist_ok=True)
    tmp = _local_temp(uri)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, uri)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_text(uri: str, text: str) -> None:
    """Write a UTF-8 text file whole (see :func:`write_bytes`)."""
    write_bytes(uri, text.encode("utf-8"))


def write_json(uri: str, value: Any, indent: int | None = 1) -> None:
    """Write a JSON file whole (see :func:`write_bytes`)."""
    write_text(uri, json.dumps(value, indent=indent))


def copy_file(src: str, dst: str) -> None:
    """Copy one file between any two of local and GCS; the destination appears whole.

    Raises:
        FileNotFoundError: ``src`` does not exist.
    """
    if is_gcs(src) and is_gcs(dst):
        sb, sn = split_gcs(src)
        db, dn = split_gcs(dst)
        from google.api_core.exceptions import NotFound

        bucket = client().bucket(sb)
        try:
            bucket.copy_blob(bucket.blob(sn), client().bucket(db), dn)
        except NotFound:
            raise FileNotFoundError(2, "No such object", src) from None
    elif is_gcs(dst):
        _blob(dst).upload_from_filename(src)
    else:
        os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
        tmp = _local_temp(dst)
        try:
            if is_gcs(src):
                from google.api_core.exceptions import NotFound

                try:
                    _blob(src).download_to_filename(tmp)
                except NotFound:
                    raise FileNotFoundError(2, "No such object", src) from None
            else:
                shutil.copyfile(src, tmp)
            os.replace(tmp, dst)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise


def upload_many(pairs: list[tuple[str, str]], move: bool = False, workers: int = 8) -> None:
    """Put local files under their destination names, each whole; several at a time on GCS.

    Args:
        pairs: (local file, destination path or gs:// URI).
        move: remove the local files afterwards (locally: a rename, so they must lie on the
            destination's file system, e.g. from :func:`temp_path`).
        workers: parallel uploads to GCS (``transfer_manager`` threads).
    """
    local = [(src, dst) for src, dst in pairs if not is_gcs(dst)]
    remote = [(src, dst) for src, dst in pairs if is_gcs(dst)]
    for src, dst in local:
        if move:
            os.replace(src, dst)
        else:
            copy_file(src, dst)
    if remote:
        from google.cloud.storage import transfer_manager

        blobs = [(src, _blob(dst)) for src, dst in remote]
        results = transfer_manager.upload_many(
            blobs, max_workers=workers, worker_type=transfer_manager.THREAD, raise_exception=True
        )
        for r in results:
            if isinstance(r, Exception):  # raise_exception covers this; kept for older versions
                raise r
        if move:
            for src, _ in remote:
                os.remove(src)


def delete(uri: str) -> None:
    """Delete one file (nothing happens if it is absent)."""
    if is_gcs(uri):
        from google.api_core.exceptions import NotFound

        try:
            _blob(uri).delete()
        except NotFound:
            pass  # absent already: what the caller wanted
        return
    try:
        os.remove(uri)
    except FileNotFoundError:
        pass  # absent already: what the caller wanted


def delete_tree(uri: str) -> None:
    """Delete a folder and everything under it (nothing happens if it is absent)."""
    if is_gcs(uri):
        bucket, name = split_gcs(uri)
        if not name:
            raise ValueError(f"refusing to delete a whole bucket ({uri})")
        for blob in list(client().list_blobs(bucket, prefix=_prefix(name))):
            blob.delete()
        return
    if os.path.lexists(uri):
        shutil.rmtree(uri)


def copy_tree(src: str, dst: str, last: Iterable[str] = ()) -> list[str]:
    """Copy every file under ``src`` to ``dst``, the files named in ``last`` after all others.

    Args:
        src: the source folder (local or gs://).
        dst: the destination folder (local or gs://).
        last: relative paths copied at the end, in order.

    Returns:
        The relative paths copied, in copy order.

    Raises:
        FileNotFoundError: ``src`` holds no files.
    """
    files = list_files(src)
    if not files:
        raise FileNotFoundError(f"{src} has no files to copy")
    last = [f for f in last if f in files]
    order = [f for f in files if f not in last] + last
    for rel in order:
        copy_file(join(src, rel), join(dst, rel))
    return order


def move_tree(src: str, dst: str) -> None:
    """Move a folder (a rename locally; copy then delete on GCS)."""
    if not is_gcs(src) and not is_gcs(dst):
        os.makedirs(os.path.dirname(dst.rstrip("/")) or ".", exist_ok=True)
        os.replace(src, dst)
        return
    copy_tree(src, dst)
    delete_tree(src)


def tree_sha256(uri: str) -> str:
    """Return a sha256 over a folder's relative file paths and contents (its identity).

    Raises:
        FileNotFoundError: the folder is empty or absent.
    """
    digest = hashlib.sha256()
    files = list_files(uri)
    if not files:
        raise FileNotFoundError(f"{uri} is empty or does not exist")
    for rel in files:
        digest.update(rel.encode() + b"\0")
        digest.update(hashlib.sha256(read_bytes(join(uri, rel))).digest())
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------
# Publishing a folder: everything, then its marker
# --------------------------------------------------------------------------------------------


def _as_bytes(content: bytes | str) -> bytes:
    return content.encode("utf-8") if isinstance(content, str) else content


def is_published(folder: str, marker: str) -> bool:
    """Tell whether a folder is complete: its marker file exists (without it the folder is absent)."""
    return exists(join(folder, marker))


def publish(
    folder: str,
    files: Mapping[str, bytes | str] | Iterable[tuple[str, bytes | str]],
    marker: str,
    marker_content: bytes | str,
) -> None:
    """Write files into a folder, then its marker: readers see all of them or (no marker) none.

    An earlier marker is deleted first, so that readers never take a mix of old and new files for
    a complete folder. If anything fails midway the marker is not written; the files written
    before the failure are whole (each write is atomic) and stay, as does the rest of the folder.

    Args:
        folder: the destination folder (local or gs://).
        files: relative path -> content (bytes or text), as a mapping or (path, content) pairs.
        marker: the marker's relative path (e.g. ``dataset.json``), written last.
        marker_content: its content.
    """
    delete(join(folder, marker))
    for rel, content in files.items() if isinstance(files, Mapping) else files:
        if rel == marker:
            raise ValueError(f"{rel!r} is the marker of {folder}: pass it as marker_content, not among the files")
        write_bytes(join(folder, rel), _as_bytes(content))
    write_bytes(join(folder, marker), _as_bytes(marker_content))


def publish_tree(src: str, dst: str, marker: str) -> list[str]:
    """Copy a folder with its marker file (a file of ``src``) copied last: all-or-nothing for readers.

    An earlier marker at ``dst`` is deleted first. A failure midway leaves no marker; the files
    copied before it are whole and stay.

    Args:
        src: the source folder (local or gs://); it must hold ``marker``.
        dst: the destination folder (local or gs://).
        marker: the relative path of the file that says the folder is complete
            (``saved_model.pb`` for a model server's version folder).

    Returns:
        The relative paths copied, in copy order (the marker last).

    Raises:
        FileNotFoundError: ``src`` has no ``marker``.
    """
    if not exists(join(src, marker)):
        raise FileNotFoundError(f"{src} has no {marker}: nothing says the folder is complete")
    delete(join(dst, marker))
    return copy_tree(src, dst, last=[marker])


# --------------------------------------------------------------------------------------------
# Staging: files written locally first, then published under their real names
# --------------------------------------------------------------------------------------------


class Staging:
    """Where files for a folder (local or gs://) are written before they are published.

    Locally a file is written under a hidden temporary name in the folder itself and renamed into
    place; for GCS it is written in a local temporary folder and uploaded whole. Either way a
    reader never sees half a file under a real name. Writers that need a local file (``pwrite``
    at offsets from several processes) get one from :meth:`path`.
    """

    TMP_TAG = ".tmp-"

    def __init__(self, folder: str):
        self.folder = str(folder).rstrip("/")
        self.gcs = is_gcs(self.folder)
        self._local_dir: str | None = None

    def path(self, name: str) -> str:
        """A new local path to write ``name``'s content to before :meth:`publish`."""
        if self.gcs:
            if self._local_dir is None:
                self._local_dir = tempfile.mkdtemp(prefix="storage-staging-")
            return os.path.join(self._local_dir, f"{uuid.uuid4().hex[:8]}-{os.path.basename(name)}")
        return _local_temp(join(self.folder, name))

    def publish(self, pairs: list[tuple[str, str]], workers: int = 8) -> None:
        """Move finished files, (path from :meth:`path`, name in the folder), to their real names."""
        upload_many([(tmp, join(self.folder, name)) for tmp, name in pairs], move=True, workers=workers)

    def remove_leftovers(self, names: Iterable[str]) -> None:
        """Delete what killed runs left: hidden temporaries of these names (local folders only).

        On GCS nothing is left: an interrupted upload leaves no object.
        """
        if self.gcs or not os.path.isdir(self.folder):
            return
        wanted = {f".{n}{self.TMP_TAG}" for n in names}
        with os.scandir(self.folder) as it:
            for e in it:
                at = e.name.find(self.TMP_TAG)
                if e.name.startswith(".") and at > 0 and e.name[: at + len(self.TMP_TAG)] in wanted:
                    os.remove(e.path)

    def close(self) -> None:
        """Remove the local staging folder of a GCS destination (and whatever is left in it)."""
        if self._local_dir is not None:
            shutil.rmtree(self._local_dir, ignore_errors=True)
            self._local_dir = None
