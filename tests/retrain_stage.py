"""A served model's records for the retrain step's tests: no training, only what the decision reads.

:func:`served_stage` writes a small image folder (the source), the ``dataset.json`` of its
conversion, a model folder with ``training.json`` and ``config.yaml``, and a stage entry serving
it, all as the main pipeline leaves them (docs/CONTRACTS.md), in a few milliseconds.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import tempfile
from pathlib import Path
from typing import Optional

import numpy as np
from PIL import Image

from components.image_input.sources import open_source
from components.serving.stages import StageEntry, StageRegistry

MODEL_NAME = "classifier"


@dataclasses.dataclass(frozen=True)
class ServedStage:
    """Where the records are: the source folder, the stage store, the model folder."""

    source: Path
    stages: Path
    model_dir: Path

    def add_image(self, label: str = "a", name: str = "new.png", value: int = 200) -> Path:
        """One more image in the source: new data."""
        path = self.source / label / name
        Image.fromarray(np.full((8, 8), value, np.uint8)).save(path)
        return path


@functools.lru_cache(maxsize=1)
def _manifest_template() -> str:
    """A real ``dataset.json`` of a tiny folder, converted once: each stage's copy changes its source."""
    from components.convert import convert
    from components.convert.config import ConvertConfig

    with tempfile.TemporaryDirectory(prefix="retrain-manifest-") as tmp:
        folder = Path(tmp)
        for label, value in (("a", 10), ("b", 240)):
            (folder / "images" / label).mkdir(parents=True)
            Image.fromarray(np.full((8, 8), value, np.uint8)).save(folder / "images" / label / "0.png")
        convert(ConvertConfig(source=str(folder / "images"), split_by="content", workers=1), str(folder / "dataset"))
        return (folder / "dataset" / "dataset.json").read_text()


def served_stage(root: Path, *, stage: str = "prod", fingerprinted: bool = True) -> ServedStage:
    """A stage serving version 1 of ``classifier``, trained on an image folder under ``root``.

    Args:
        root: where everything goes.
        stage: the stage that serves it.
        fingerprinted: whether its ``training.json`` records its data's fingerprint (models
            trained before fingerprints were recorded do not).
    """
    source = root / "images"
    for label, value in (("a", 10), ("b", 240)):
        (source / label).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(np.full((8, 8), value + i, np.uint8)).save(source / label / f"{i}.png")
    opened = open_source(str(source))
    dataset = root / "dataset"
    dataset.mkdir()
    manifest = json.loads(_manifest_template())
    manifest["source"] = {"uri": str(source), "format": opened.kind, "fingerprint": opened.fingerprint}
    manifest["config"]["source"] = str(source)
    (dataset / "dataset.json").write_text(json.dumps(manifest))
    model_dir = root / "model"
    model_dir.mkdir()
    training: dict[str, Optional[str]] = {"task": "classification", "model": "mnist_cnn", "dataset": str(dataset)}
    if fingerprinted:
        training["dataset_fingerprint"] = opened.fingerprint
    else:
        manifest["source"]["fingerprint"] = ""
        (dataset / "dataset.json").write_text(json.dumps(manifest))
    (model_dir / "training.json").write_text(json.dumps(training))
    (model_dir / "config.yaml").write_text("train:\n  model: mnist_cnn\n  model_options: {}\n")
    stages = root / "stages"
    entry = StageEntry("promote", 1, str(model_dir), "run-1", model_name=MODEL_NAME, task="classification")
    StageRegistry(str(stages)).record(stage, entry)
    return ServedStage(source, stages, model_dir)
