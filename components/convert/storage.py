"""The output folder of a conversion (a local directory or a gs:// prefix), on ``trainer.storage``.

:class:`Output` binds the storage functions to one dataset folder and adds the convert step's
own staging: each shard is written to a local file (:meth:`Output.temp_path`) and published
under its real name when complete (``trainer.storage.Staging``: a rename locally, a whole upload
on GCS, several at a time), so a reader never sees half a shard under a real shard name.
``dataset.json``, the folder's marker, is written last (``trainer.storage.publish``).
"""

from __future__ import annotations

from typing import Any

from trainer import storage


class Output:
    """A dataset folder being written: ``uri`` is a local path or ``gs://bucket/prefix``."""

    def __init__(self, uri: str):
        self.uri = str(uri).rstrip("/")
        self.gcs = storage.is_gcs(self.uri)
        self._staging = storage.Staging(self.uri)

    def join(self, name: str) -> str:
        """The path or URI of a file in the folder."""
        return storage.join(self.uri, name)

    # --- reading -----------------------------------------------------------------------------

    def read_text(self, name: str) -> str | None:
        """A file's text, or None when it does not exist."""
        try:
            return storage.read_text(self.join(name))
        except FileNotFoundError:
            return None

    def read_json(self, name: str) -> Any:
        """A JSON file's content, or None when it does not exist."""
        return storage.read_json(self.join(name))

    def sizes(self, under: str = "") -> dict[str, int]:
        """Name -> size of the files directly in the folder (or in its subfolder ``under``)."""
        return storage.sizes(self.join(under) if under else self.uri)

    # --- writing -----------------------------------------------------------------------------

    def makedirs(self) -> None:
        storage.makedirs(self.uri)

    def write_text(self, name: str, text: str) -> None:
        """Writes a small file atomically (temp + rename locally; one upload on GCS)."""
        storage.write_text(self.join(name), text)

    def publish_marked(self, files: dict[str, str], marker: str, content: str) -> None:
        """Writes ``files`` (name -> text), then the folder's marker ``marker`` last."""
        storage.publish(self.uri, files, marker, content)

    def delete(self, name: str) -> None:
        storage.delete(self.join(name))

    def delete_tree(self, under: str) -> None:
        storage.delete_tree(self.join(under))

    def remove_temporaries(self, names: list[str]) -> None:
        """Deletes leftovers of killed runs: hidden temporary files of these shard names."""
        self._staging.remove_leftovers(names)

    def temp_path(self, name: str) -> str:
        """Where a shard is written (a local file) before it is published."""
        return self._staging.path(name)

    def publish(self, pairs: list[tuple[str, str]]) -> None:
        """Moves finished temporary files (temp path, shard name) to their real names."""
        if pairs:
            self._staging.publish(pairs)

    def close(self) -> None:
        self._staging.close()
