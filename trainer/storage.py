"""Files on a local folder or on GCS (gs://), the few operations the stage store needs.

GCS goes through ``google-cloud-storage`` (not TensorFlow, whose gs:// reader ignores the local
emulator): with ``STORAGE_EMULATOR_HOST`` set, the client talks to that emulator anonymously.
No client is made and nothing is read at import time.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

GCS_PREFIX = "gs://"


def is_gcs(uri: str) -> bool:
    """Tell whether ``uri`` names a GCS object or prefix."""
    return uri.startswith(GCS_PREFIX)


def join(base: str, *parts: str) -> str:
    """Join path parts with '/', for local paths and gs:// URIs alike."""
    out = base.rstrip("/") if len(base) > 1 else base
    for part in parts:
        out = f"{out}/{part.strip('/')}"
    return out


def _split(uri: str) -> tuple[str, str]:
    rest = uri[len(GCS_PREFIX) :]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"{uri!r} is not a gs://<bucket>/<path> URI: the bucket name is missing")
    return bucket, prefix.strip("/")


_CLIENT = None


def _client():
    """Return the process's storage client (anonymous against STORAGE_EMULATOR_HOST when set)."""
    global _CLIENT
    if _CLIENT is None:
        from trainer.tfrecords import gcs_client

        _CLIENT = gcs_client()
    return _CLIENT


def reset_client() -> None:
    """Forget the cached client (after the emulator address changed, e.g. in tests)."""
    global _CLIENT
    _CLIENT = None


def _blob(uri: str):
    bucket, name = _split(uri)
    return _client().bucket(bucket).blob(name)


def read_bytes(uri: str) -> bytes:
    """Return a file's contents.

    Raises:
        FileNotFoundError: there is no such file.
    """
    if is_gcs(uri):
        from google.api_core.exceptions import NotFound

        try:
            return _blob(uri).download_as_bytes()
        except NotFound:
            raise FileNotFoundError(f"{uri} does not exist") from None
    return Path(uri).read_bytes()


def write_bytes(uri: str, data: bytes) -> None:
    """Write a file whole: readers see the old or the new contents, never a part."""
    if is_gcs(uri):
        _blob(uri).upload_from_string(data)  # a GCS object appears whole
        return
    path = Path(uri)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def exists(uri: str) -> bool:
    """Tell whether a file exists."""
    if is_gcs(uri):
        return _blob(uri).exists()
    return Path(uri).is_file()


def list_files(uri: str) -> list[str]:
    """Return the paths of all files under a folder, relative to it, sorted ('/'-separated)."""
    if is_gcs(uri):
        bucket, prefix = _split(uri)
        prefix = f"{prefix}/" if prefix else ""
        names = [b.name[len(prefix) :] for b in _client().list_blobs(bucket, prefix=prefix)]
        return sorted(n for n in names if n and not n.endswith("/"))
    root = Path(uri)
    if not root.is_dir():
        return []
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def list_dirs(uri: str) -> list[str]:
    """Return the names of the immediate subfolders of a folder (on GCS: of a prefix)."""
    if is_gcs(uri):
        return sorted({rel.split("/", 1)[0] for rel in list_files(uri) if "/" in rel})
    root = Path(uri)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir())


def copy_file(src: str, dst: str) -> None:
    """Copy one file between any two of local and GCS."""
    if is_gcs(src) and is_gcs(dst):
        sb, sn = _split(src)
        db, dn = _split(dst)
        client = _client()
        client.bucket(sb).copy_blob(client.bucket(sb).blob(sn), client.bucket(db), dn)
    elif is_gcs(dst):
        _blob(dst).upload_from_filename(src)
    elif is_gcs(src):
        Path(dst).parent.mkdir(parents=True, exist_ok=True)
        _blob(src).download_to_filename(dst)
    else:
        Path(dst).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)


def copy_tree(src: str, dst: str, last: Iterable[str] = ()) -> list[str]:
    """Copy every file under ``src`` to ``dst``, the files named in ``last`` after all others.

    Args:
        src: the source folder (local or gs://).
        dst: the destination folder (local or gs://).
        last: relative paths copied at the end, in order (a reader's "ready" marker).

    Returns:
        The relative paths copied, in copy order.
    """
    files = list_files(src)
    if not files:
        raise FileNotFoundError(f"{src} has no files to copy")
    last = [f for f in last if f in files]
    order = [f for f in files if f not in last] + last
    for rel in order:
        copy_file(join(src, rel), join(dst, rel))
    return order


def delete_tree(uri: str) -> None:
    """Delete a folder and everything under it (nothing happens if it is absent)."""
    if is_gcs(uri):
        bucket, prefix = _split(uri)
        if not prefix:
            raise ValueError(f"refusing to delete a whole bucket ({uri})")
        for blob in list(_client().list_blobs(bucket, prefix=f"{prefix}/")):
            blob.delete()
        return
    if Path(uri).exists():
        shutil.rmtree(uri)


def move_tree(src: str, dst: str) -> None:
    """Move a folder (a rename locally; copy then delete on GCS)."""
    if not is_gcs(src) and not is_gcs(dst):
        Path(dst).parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
        return
    copy_tree(src, dst)
    delete_tree(src)


def tree_sha256(uri: str) -> str:
    """Return a sha256 over a folder's relative file paths and contents (its identity)."""
    digest = hashlib.sha256()
    files = list_files(uri)
    if not files:
        raise FileNotFoundError(f"{uri} is empty or does not exist")
    for rel in files:
        digest.update(rel.encode() + b"\0")
        digest.update(hashlib.sha256(read_bytes(join(uri, rel))).digest())
    return digest.hexdigest()
