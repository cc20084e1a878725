"""The source seam (docs/ARCHITECTURE.md, Data sources): one registry of source kinds that the convert
step and batch prediction both read (``components/image_input/sources/``).

- Every registered kind is converted and batch-predicted: on a sample of each, what the converter
  scans and what a batch prediction lists are the same images in the same order, read from the
  same bytes; the check fails on a planted kind that batch prediction does not see.
- The kinds claim a source in a declared order: a layout kind registered after ``folder`` (as an
  extension's is) is offered a folder before ``folder`` is.
- Batch prediction lists a folder, a CSV/JSONL list and a COCO file as it did before the seam:
  the same items and the same fingerprints (an output location planned before stays resumable).
- A kind from outside the tree (``tests/toy_source.py``, through ``LTP_EXTENSIONS``) is converted
  and batch-predicted, and a task from outside it without batch prediction (``tests/toy_task.py``)
  is refused when the batch prediction is planned.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from components.batch_predict import inputs
from components.image_input import sources
from components.image_input.sources import Claim, Listing, SourceError, SourceKind, registry
from tests import label_sets
from trainer import storage
from trainer.extensions import EXTENSIONS_ENV
from trainer.registry import Registry

ROOT = Path(__file__).resolve().parents[3]


def _png(seed: int, size: tuple[int, int] = (6, 5)) -> bytes:
    arr = np.random.default_rng(seed).integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "PNG")
    return buf.getvalue()


def _photos(root: Path, count: int = 6) -> Path:
    """``root/<a|b>/NNN.png``: an image folder with two classes."""
    for i in range(count):
        sub = root / "ab"[i % 2]
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"{i:03d}.png").write_bytes(_png(i))
    return root


def _idx(path: Path, arr: np.ndarray) -> None:
    header = struct.pack(">BBBB", 0, 0, 0x08, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    path.write_bytes(gzip.compress(header + arr.tobytes()))


def _idx_folder(root: Path) -> Path:
    root.mkdir(parents=True)
    pixels = np.random.default_rng(0).integers(0, 255, (5, 4, 4), dtype=np.uint8)
    for split in ("train", "t10k"):
        _idx(root / f"{split}-images-idx3-ubyte.gz", pixels)
        _idx(root / f"{split}-labels-idx1-ubyte.gz", (np.arange(5) % 3).astype(np.uint8))
    return root


def _coco(root: Path) -> Path:
    photos = _photos(root / "coco", 4)
    data = {
        "images": [{"id": 10 + i, "file_name": f"{'ab'[i % 2]}/{i:03d}.png"} for i in range(4)],
        "annotations": [{"id": 1, "image_id": 11, "category_id": 5, "bbox": [1, 1, 3, 2]}],
        "categories": [{"id": 5, "name": "dot"}],
    }
    (photos / "instances.json").write_text(json.dumps(data))
    return photos / "instances.json"


def _list(root: Path, suffix: str) -> Path:
    photos = _photos(root / suffix)
    rows = [(f"{'ab'[i % 2]}/{i:03d}.png", "ab"[i % 2]) for i in (3, 0, 5)]
    if suffix == "csv":
        text = "path,label\n" + "".join(f"{p},{c}\n" for p, c in rows)
    else:
        text = "".join(json.dumps({"path": p, "label": c}) + "\n" for p, c in rows)
    (photos / f"list.{suffix}").write_text(text)
    return photos / f"list.{suffix}"


def _npz(root: Path) -> Path:
    root.mkdir(parents=True)
    images = np.random.default_rng(1).integers(0, 255, (4, 3, 3), dtype=np.uint8)
    np.savez(root / "arrays.npz", images=images, labels=np.array([0, 1, 0, 1]))
    return root / "arrays.npz"


def _fashion_mnist(root: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(sources.fashion_mnist, "FASHION_MNIST_DIR", str(_idx_folder(root / "fmnist")))
    return "fashion-mnist"


# One sample per registered kind: a kind added to the registry needs one here (the contract test names it).
SAMPLES = {
    "folder": lambda root, mp: _photos(root / "photos"),
    "csv": lambda root, mp: _list(root, "csv"),
    "jsonl": lambda root, mp: _list(root, "jsonl"),
    "npz": lambda root, mp: _npz(root / "npz"),
    "idx": lambda root, mp: _idx_folder(root / "idx"),
    "coco": lambda root, mp: _coco(root),
    "yolo": lambda root, mp: label_sets.yolo(root / "yolo", label_sets.original(4, 2)),
    "voc": lambda root, mp: label_sets.voc(root / "voc", label_sets.original(4, 2)),
    "label-studio": lambda root, mp: label_sets.label_studio(root / "ls", label_sets.original(4, 2)),
    "fashion-mnist": _fashion_mnist,
    "digits": lambda root, mp: "digits",
    "shapes": lambda root, mp: "shapes:6",
}


def _pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)))


def seam_gaps(kind_name: str, uri: str) -> list[str]:
    """How a kind breaks the seam on a sample: images the converter scans that a batch prediction
    does not list (or lists in another order, or reads other bytes of); empty when it keeps it.
    """
    converted = sources.open_source(uri, kind_name)
    kind = sources.kind(kind_name)
    listing = kind.prediction_listing(uri)
    keys, paths = [it.key for it in converted.items], [it.path for it in listing.items]
    if keys != paths:
        return [f"{kind_name}: the converter scans {len(keys)} images {keys[:3]}, batch prediction lists {paths[:3]}"]
    gaps = []
    read, load = kind.prediction_reader(uri), sources.loader(converted.spec())
    for item, scored in list(zip(converted.items, listing.items, strict=True))[:3]:
        what, content = load.load(item)
        given = read(scored.uri if scored.record is None else f"{scored.uri}#{scored.record}")
        same = given == content if what == "bytes" else np.array_equal(_pixels(given), np.squeeze(content))
        if not same:
            gaps.append(f"{kind_name}: {item.key} is scored from other bytes than the converter writes")
    return gaps


@pytest.mark.parametrize("kind", sources.kind_names())
def test_every_source_kind_is_converted_and_batch_predicted(kind, tmp_path, monkeypatch):
    assert kind in SAMPLES, f"source kind {kind!r} has no sample here: add one to SAMPLES"
    uri = str(SAMPLES[kind](tmp_path, monkeypatch))
    assert sources.detect(uri) == kind
    assert seam_gaps(kind, uri) == []
    listing = inputs.list_input(uri)  # batch prediction's own entry finds the kind
    assert listing == sources.kind(kind).prediction_listing(uri) and listing.items


def test_the_seam_check_sees_a_kind_that_batch_prediction_does_not(tmp_path, monkeypatch):
    class ConvertOnly(SourceKind):
        name = "convert-only"

        def matches(self, uri):
            return False

        def open(self, uri, classes):
            return registry.FOLDER.open(uri, classes)

    with pytest.raises(TypeError, match="abstract method.*prediction_listing"):
        ConvertOnly()  # a kind cannot be made without the listing batch prediction needs
    with pytest.raises(SourceError, match="register_kind takes a SourceKind"):
        sources.register_kind(object())
    old_style = type("OldStyle", (VocLike,), {"name": "old", "builtin": True})()
    with pytest.raises(SourceError, match="kind 'old' says builtin: a built-in name's kind sets claim = Claim.NAME"):
        sources.register_kind(old_style)

    class ListsNothing(ConvertOnly):
        def prediction_listing(self, uri):
            return Listing(self.name, [], "", labelled=False)

    photos = str(_photos(tmp_path / "photos"))
    fresh = Registry("source format", error=SourceError, ordered=True)
    fresh.register("convert-only", ListsNothing())
    monkeypatch.setattr(registry, "_KINDS", fresh)
    assert seam_gaps("convert-only", photos) == [
        "convert-only: the converter scans 6 images ['a/000.png', 'a/002.png', 'a/004.png'], batch prediction lists []"
    ]


def test_the_kinds_claim_a_source_in_a_declared_order_with_folder_last():
    assert [k.name for k in sources.claim_order()] == [
        "fashion-mnist", "digits", "shapes", "csv", "jsonl", "npz", "label-studio", "coco", "idx", "yolo", "voc",
        "folder"
    ]  # fmt: skip
    assert all(k.builtin == (k.claim is Claim.NAME) for k in sources.kinds())
    assert [k.name for k in sources.kinds() if k.claim is Claim.ANY_FOLDER] == ["folder"]


class VocLike(SourceKind):
    """A folder known by what it holds (``Annotations/``), as a Pascal VOC root is."""

    name = "voc-like"
    description = "a folder with Annotations/"
    claim = Claim.LAYOUT

    def matches(self, uri):
        return os.path.isdir(os.path.join(uri, "Annotations"))

    def open(self, uri, classes):
        raise NotImplementedError

    def prediction_listing(self, uri):
        raise NotImplementedError


def test_a_layout_kind_registered_after_folder_is_offered_a_folder_before_folder(tmp_path, monkeypatch):
    voc = tmp_path / "voc"
    (voc / "Annotations").mkdir(parents=True)
    _photos(voc / "Images")  # subfolders that folder would take for classes (no JPEGImages/: no real VOC root)
    photos = _photos(tmp_path / "photos")
    fresh = Registry("source format", error=SourceError, ordered=True)
    for kind in (*registry.BUILTIN_KINDS, VocLike()):  # last, as an extension module registers
        fresh.register(kind.name, kind)
    monkeypatch.setattr(registry, "_KINDS", fresh)
    assert [sources.detect(str(voc)), sources.detect(str(photos))] == ["voc-like", "folder"]
    late = VocLike()
    late.claim = Claim.ANY_FOLDER  # the claim decides, not the order of registration
    monkeypatch.setattr(registry, "_KINDS", Registry("source format", error=SourceError, ordered=True))
    for kind in (*registry.BUILTIN_KINDS, late):
        registry._KINDS.register(kind.name, kind)
    assert sources.detect(str(voc)) == "folder"


def _digest(lines: list[str]) -> str:
    """The fingerprint batch prediction gave its inputs before the seam (a sha256 of lines)."""
    h = hashlib.sha256()
    for line in lines:
        h.update(line.encode() + b"\n")
    return h.hexdigest()


def _version(path: Path) -> str:
    return f"{path.stat().st_size}:{path.stat().st_mtime_ns}" if path.is_file() else "missing"


def test_batch_prediction_lists_folders_lists_and_coco_files_as_before(tmp_path):
    photos = _photos(tmp_path / "photos", 5)
    (photos / "a" / "deep").mkdir()
    (photos / "a" / "deep" / "x.JPG").write_bytes(_png(7))
    (photos / "loose.webp").write_bytes(b"not decoded while listing")
    (photos / "notes.txt").write_text("not an image")
    images = ["a/000.png", "a/002.png", "a/004.png", "a/deep/x.JPG", "b/001.png", "b/003.png", "loose.webp"]
    folder = inputs.list_input(str(photos))
    assert [it.to_dict() for it in folder.items] == [
        {"uri": str(photos / p), "path": p, "image_id": i + 1} for i, p in enumerate(images)
    ]
    assert (folder.kind, folder.labelled) == ("folder", False)
    assert folder.fingerprint == _digest([f"{p}\t{_version(photos / p)}" for p in images])

    text = "image,label\nb/001.png,cat\nmissing.png,dog\n"
    (photos / "list.csv").write_text(text)
    listed = inputs.list_input(str(photos / "list.csv"))
    assert [it.to_dict() for it in listed.items] == [
        {"uri": str(photos / "b/001.png"), "path": "b/001.png", "image_id": 1, "label": "cat"},
        {"uri": str(photos / "missing.png"), "path": "missing.png", "image_id": 2, "label": "dog"},
    ]
    parts = [hashlib.sha256(text.encode()).hexdigest(), _version(photos / "b/001.png"), "missing"]
    assert (listed.kind, listed.labelled, listed.fingerprint) == ("list", True, _digest(parts))

    coco_file = _coco(tmp_path)
    coco = inputs.list_input(str(coco_file))
    assert [(it.image_id, it.path, it.label) for it in coco.items] == [
        (10, "a/000.png", []), (11, "b/001.png", [{"box": [1.0, 1.0, 4.0, 3.0], "class": "dot"}]),
        (12, "a/002.png", []), (13, "b/003.png", []),
    ]  # fmt: skip
    text = coco_file.read_text()
    parts = [hashlib.sha256(text.encode()).hexdigest(), *(_version(coco_file.parent / it.path) for it in coco.items)]
    assert (coco.kind, coco.labelled, coco.fingerprint) == ("coco", True, _digest(parts))


def _run_extension(code: str, module: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), EXTENSIONS_ENV: module}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_a_task_from_outside_the_tree_without_batch_prediction_is_refused_when_planned(tmp_path):
    model = tmp_path / "model"
    (model / "saved_model").mkdir(parents=True)
    (model / "saved_model" / "saved_model.pb").write_bytes(b"a stand-in: planning never loads it")
    (model / "training.json").write_text(json.dumps({"task": "brightness"}))
    photos = _photos(tmp_path / "photos")
    code = (
        "import sys\nfrom components.batch_predict.__main__ import main\n"
        f"sys.exit(main(['plan', '--data', {str(photos)!r}, '--output-uri', {str(tmp_path / 'out')!r}, "
        f"'--model-dir', {str(model)!r}]))\n"
    )
    done = _run_extension(code, "tests.toy_task")
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        "error: task 'brightness' does no batch prediction: its prediction() gives no Prediction; give the task a "
        "Prediction with load and records (trainer/tasks/base.py, 7. Batch prediction)\n"
    )
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.slow
def test_a_source_kind_from_outside_the_tree_is_converted_and_batch_predicted(tmp_path):
    from tests.eval_bench_fixtures import tiny_assets

    flat = tmp_path / "flat"
    flat.mkdir()
    names = [f"img{i:02d}.png" for i in range(12)]
    for i, name in enumerate(names):
        (flat / name).write_bytes(_png(i, (20, 16)))
    labels = [f"{name} {'dark' if i % 2 else 'light'}\n" for i, name in enumerate(names)]
    (flat / "labels.txt").write_text("".join(labels))
    code = f"""
import json
from components.batch_predict.__main__ import main
from components.convert.convert import convert
from components.image_input import sources
from components.convert.config import ConvertConfig
print(sources.detect({str(flat)!r}))
m = convert(ConvertConfig(source={str(flat)!r}, workers=1), {str(tmp_path / "dataset")!r}, log=lambda s: None)
print(m["source"]["format"], m["classes"], sum(s["count"] for s in m["splits"].values()))
status = main(["run", "--data", {str(flat)!r}, "--output-uri", {str(tmp_path / "out")!r},
               "--model-dir", {tiny_assets()["model"]!r}, "--images-per-shard", "5"])
print(status, json.load(open({str(tmp_path / "out" / "summary.json")!r}))["scored"])
"""
    done = _run_extension(code, "tests.toy_source")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[:2] == ["flat", "flat ['dark', 'light'] 12"] and lines[-1] == "0 12"
    rows = [json.loads(x) for f in sorted((tmp_path / "out").glob("shard-*.jsonl")) for x in f.read_text().splitlines()]
    assert [r["path"] for r in rows] == names and all(r["classes"] for r in rows)
    assert storage.read_json(str(tmp_path / "out" / "manifest.json"))["kind"] == "flat"
