"""The output folder of a conversion: a local directory or a gs:// prefix, with atomic publishing.

Local shards are written under a hidden temporary name and renamed when complete; GCS objects are
uploaded whole (an object appears only once its upload finished), several at a time with
``google.cloud.storage.transfer_manager``. Either way a reader never sees half a shard under a
real shard name.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from typing import Any

from components.convert.sources import gcs, is_gcs


class Output:
    """A dataset folder being written: ``uri`` is a local path or ``gs://bucket/prefix``."""

    def __init__(self, uri: str):
        self.uri = str(uri).rstrip("/")
        self.gcs = is_gcs(self.uri)
        if self.gcs:
            self.bucket_name, _, prefix = self.uri[len("gs://") :].partition("/")
            self.prefix = prefix + "/" if prefix else ""
            self._staging: str | None = None

    # --- names -------------------------------------------------------------------------------

    def join(self, name: str) -> str:
        return f"{self.uri}/{name}"

    def _blob(self, name: str) -> Any:
        return gcs().bucket(self.bucket_name).blob(self.prefix + name)

    # --- reading -----------------------------------------------------------------------------

    def read_text(self, name: str) -> str | None:
        if self.gcs:
            blob = self._blob(name)
            return blob.download_as_text() if blob.exists() else None
        try:
            with open(self.join(name), encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def read_json(self, name: str) -> Any:
        text = self.read_text(name)
        return None if text is None else json.loads(text)

    def sizes(self, under: str = "") -> dict[str, int]:
        """Name -> size of the files directly in the folder (or in its subfolder ``under``)."""
        if self.gcs:
            prefix = self.prefix + (under.rstrip("/") + "/" if under else "")
            out = {}
            for blob in gcs().list_blobs(self.bucket_name, prefix=prefix):
                rel = blob.name[len(prefix) :]
                if rel and "/" not in rel:
                    out[rel] = blob.size
            return out
        folder = self.join(under) if under else self.uri
        if not os.path.isdir(folder):
            return {}
        with os.scandir(folder) as it:
            return {e.name: e.stat().st_size for e in it if e.is_file()}

    # --- writing -----------------------------------------------------------------------------

    def makedirs(self) -> None:
        if not self.gcs:
            os.makedirs(self.uri, exist_ok=True)

    def write_text(self, name: str, text: str) -> None:
        """Writes a small file atomically (temp + rename locally; one upload on GCS)."""
        if self.gcs:
            self._blob(name).upload_from_string(text, content_type="application/json")
            return
        path = self.join(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.tmp-{uuid.uuid4().hex[:8]}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)

    def delete(self, name: str) -> None:
        if self.gcs:
            blob = self._blob(name)
            if blob.exists():
                blob.delete()
            return
        try:
            os.remove(self.join(name))
        except FileNotFoundError:
            pass

    def delete_tree(self, under: str) -> None:
        if self.gcs:
            for name in self.sizes(under):
                self.delete(f"{under}/{name}")
            return
        shutil.rmtree(self.join(under), ignore_errors=True)

    def remove_temporaries(self, names: list[str]) -> None:
        """Deletes leftovers of killed runs: hidden temporary files of these shard names."""
        if self.gcs:
            return  # uploads are atomic: GCS has no partial objects
        wanted = {f".{n}.tmp-" for n in names}
        with os.scandir(self.uri) as it:
            for e in it:
                if e.name.startswith(".") and ".tmp-" in e.name and e.name[: e.name.index(".tmp-") + 5] in wanted:
                    os.remove(e.path)

    def temp_path(self, name: str) -> str:
        """Where a shard is written before it is published."""
        if self.gcs:
            if self._staging is None:
                self._staging = tempfile.mkdtemp(prefix="convert-staging-")
            return os.path.join(self._staging, name)
        return self.join(f".{name}.tmp-{uuid.uuid4().hex[:8]}")

    def publish(self, pairs: list[tuple[str, str]]) -> None:
        """Moves finished temporary files (temp path, shard name) to their real names."""
        if not pairs:
            return
        if not self.gcs:
            for tmp, name in pairs:
                os.replace(tmp, self.join(name))
            return
        from google.cloud.storage import transfer_manager

        bucket = gcs().bucket(self.bucket_name)
        blobs = [(tmp, bucket.blob(self.prefix + name)) for tmp, name in pairs]
        results = transfer_manager.upload_many(
            blobs, max_workers=8, worker_type=transfer_manager.THREAD, raise_exception=True
        )
        for r in results:
            if isinstance(r, Exception):  # raise_exception covers this; kept for older versions
                raise r
        for tmp, _ in pairs:
            os.remove(tmp)

    def close(self) -> None:
        if self.gcs and self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None
