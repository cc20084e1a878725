"""MNIST-style IDX folders: ``<split>-images-idx3-ubyte[.gz]`` and ``<split>-labels-idx1-ubyte[.gz]`` pairs."""

from __future__ import annotations

import gzip
import hashlib
import os
import struct
import threading
import zlib
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from components.image_input.sources.arrays import ArrayKind, array_source
from components.image_input.sources.base import Claim, Source, SourceError, fingerprint, stamp
from trainer import storage
from trainer.storage import is_gcs, read_bytes

_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def is_idx_name(name: str) -> bool:
    """Whether a file name is an IDX file's (``train-images-idx3-ubyte``, maybe ``.gz``)."""
    base = name[:-3] if name.endswith(".gz") else name
    return base.endswith(("-idx1-ubyte", "-idx2-ubyte", "-idx3-ubyte", "-idx4-ubyte"))


def _idx_header(raw: bytes, path: str) -> tuple[np.dtype, tuple[int, ...], int]:
    """(dtype, shape, data offset) from the first bytes of an IDX file's content."""
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise SourceError(f"{path} is not an IDX file: bad magic {raw[:4]!r}")
    if raw[2] not in _IDX_DTYPES:
        raise SourceError(f"{path}: unknown IDX data type 0x{raw[2]:02x}")
    ndim = raw[3]
    if len(raw) < 4 + 4 * ndim:
        raise SourceError(f"{path}: truncated IDX header")
    return np.dtype(_IDX_DTYPES[raw[2]]), struct.unpack_from(f">{ndim}I", raw, 4), 4 + 4 * ndim


def read_idx(path: str) -> np.ndarray:
    """Reads an MNIST-style IDX file (optionally gzipped) into a NumPy array."""
    raw = read_bytes(path)
    if path.endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as err:
            raise SourceError(f"{path} is not a readable gzip file ({err}); re-download or gunzip it") from None
    dtype, shape, offset = _idx_header(raw, path)
    data = np.frombuffer(raw, dtype=dtype, offset=offset) if len(raw) > offset else np.empty(0, dtype)
    if data.size != int(np.prod(shape)):
        raise SourceError(f"{path}: truncated IDX file, header says {shape}, holds {data.size} values")
    return data.reshape(shape)


def _idx_prefix(path: str, want: int) -> bytes:
    """The first ``want`` bytes of an IDX file's content (gunzipped as far as needed)."""
    with open(path, "rb") as f:
        if not path.endswith(".gz"):
            return f.read(want)
        inflate, out = zlib.decompressobj(31), bytearray()
        try:
            while len(out) < want:
                block = inflate.unconsumed_tail or f.read(1 << 16)
                if not block:
                    break
                out += inflate.decompress(block, want - len(out))
        except zlib.error as err:
            raise SourceError(f"{path} is not a readable gzip file ({err}); re-download or gunzip it") from None
        if len(out) < want and not inflate.eof:
            raise SourceError(f"{path} is not a readable gzip file (it ends too early); re-download or gunzip it")
        return bytes(out)


@dataclass
class IdxImages:
    """An IDX images file: its header and first images now, all its pixels from a background thread.

    Gunzipping Fashion-MNIST's training images takes 0.2 s; zlib releases the GIL, so the labels,
    the split hashing and the shard plan are done meanwhile on another core. :meth:`array` waits
    for the pixels (and raises a truncated or corrupt file's error).
    """

    path: str
    shape: tuple[int, ...]
    head: np.ndarray  # the first images (up to 32), for the size estimate
    pending: Future

    @classmethod
    def open(cls, path: str) -> IdxImages:
        dtype, shape, offset = _idx_header(_idx_prefix(path, 4 + 4 * 255), path)
        if len(shape) not in (3, 4):
            raise SourceError(f"{path}: IDX images must be [N, H, W] or [N, H, W, C], the header says {shape}")
        per_image = int(np.prod(shape[1:])) * dtype.itemsize
        raw = _idx_prefix(path, offset + min(32, shape[0]) * per_image)
        got = (len(raw) - offset) // per_image if per_image else 0
        head = np.frombuffer(raw, dtype, count=got * per_image // dtype.itemsize, offset=offset)
        pending: Future = Future()

        def read() -> None:
            try:
                pending.set_result(read_idx(path))
            except BaseException as err:  # handed to whoever waits for the pixels
                pending.set_exception(err)

        threading.Thread(target=read, name="idx-read", daemon=True).start()
        return cls(path, tuple(shape), head.reshape(got, *shape[1:]), pending)

    def __len__(self) -> int:
        return self.shape[0]

    def array(self) -> np.ndarray:
        return self.pending.result()


def _idx_pairs(folder: str) -> dict[str, tuple[str, str]]:
    """Split name -> (images file, labels file): ``train-images-idx3-ubyte.gz`` etc."""
    names = sorted(os.listdir(folder))
    pairs: dict[str, dict[str, str]] = {}
    for n in names:
        if not is_idx_name(n):
            continue
        prefix, _, rest = n.partition("-")
        role = "images" if "idx3" in n or "idx4" in n else "labels"
        split = {"t10k": "test", "training": "train"}.get(prefix, prefix)
        pairs.setdefault(split, {})[role] = os.path.join(folder, n)
    out = {}
    for split, d in pairs.items():
        if set(d) != {"images", "labels"}:
            raise SourceError(f"{folder}: IDX split {split!r} needs both an images and a labels file, got {d}")
        out[split] = (d["images"], d["labels"])
    if not out:
        raise SourceError(f"no IDX files in {folder}: expected <split>-images-idx3-ubyte[.gz] pairs")
    return out


_IDX_CACHE: dict[tuple, tuple[dict[str, IdxImages], dict[str, np.ndarray]]] = {}


def load_idx(folder: str) -> tuple[dict[str, IdxImages], dict[str, np.ndarray]]:
    """The images (read in the background) and labels of every split of an IDX folder."""
    # Scanning and loading in the same process (and forked workers) decompress the files once.
    key = stamp(folder)
    if key not in _IDX_CACHE:
        _IDX_CACHE.clear()
        _IDX_CACHE[key] = _load_idx_files(folder)
    return _IDX_CACHE[key]


def _load_idx_files(folder: str) -> tuple[dict[str, IdxImages], dict[str, np.ndarray]]:
    images, labels = {}, {}
    for split, (img, lab) in _idx_pairs(folder).items():
        images[split] = IdxImages.open(img)  # pixels arrive in the background
        labels[split] = read_idx(lab).astype(np.int64)
    return images, labels


def _sha_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def open_idx(uri: str, kind: str, classes: list[str] | None, names: list[str] | None = None) -> Source:
    """An IDX folder's source (as kind ``kind``): the declared classes, else ``names``, else the label indices."""
    images, labels = load_idx(uri)
    top = max(int(v.max()) for v in labels.values()) + 1
    names = list(classes or names or [str(i) for i in range(top)])
    files = sorted(p for pair in _idx_pairs(uri).values() for p in pair)
    fp = fingerprint([(os.path.basename(p), os.path.getsize(p), _sha_file(p)) for p in files])
    return array_source(kind, uri, labels, images, names, fp, True, {})


def idx_arrays(folder: str) -> dict[str, np.ndarray]:
    """Every split's pixels of an IDX folder (waits for the background reads)."""
    pending, _ = load_idx(folder)
    return {name: images.array() for name, images in pending.items()}


class IdxKind(ArrayKind):
    """A local folder of IDX files, one images and one labels file per split (claimed by them, before ``folder``)."""

    name = "idx"
    description = "a folder of IDX files"
    claim = Claim.LAYOUT

    def matches(self, uri: str) -> bool:
        return storage.isdir(uri) and not is_gcs(uri) and any(is_idx_name(n) for n in os.listdir(uri))

    def open(self, uri: str, classes: list[str] | None) -> Source:
        return open_idx(uri, self.name, classes)

    def arrays(self, spec: dict[str, Any]) -> dict[str, np.ndarray]:
        return idx_arrays(spec["uri"])

    def cache_key(self, spec: dict[str, Any]) -> tuple:
        return stamp(spec["uri"])


IDX = IdxKind()
