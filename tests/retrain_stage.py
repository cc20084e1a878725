"""A served model's records for the retrain step's tests.

:func:`served_stage` writes a small image folder (the source), the ``dataset.json`` of its
conversion, a model folder with ``training.json`` and ``config.yaml``, and a stage entry serving
it, all as the main pipeline leaves them (docs/CONTRACTS.md), in a few milliseconds: no training,
only what the decision reads. :func:`trained_stage` serves a real classifier, converted, trained
and scored here in seconds: what a retraining on new data starts from and is gated against.
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


def _noisy_images(source: Path, per_class: int, seed: int, start: int = 0) -> None:
    """``per_class`` 8x8 images per class, ``a`` dark and ``b`` bright, each with its own noise."""
    rng = np.random.default_rng(seed)
    for label, low in (("a", 0), ("b", 150)):
        (source / label).mkdir(parents=True, exist_ok=True)
        for i in range(start, start + per_class):
            pixels = rng.integers(low, low + 100, size=(8, 8), dtype=np.uint8)
            Image.fromarray(pixels).save(source / label / f"{i}.png")


def trained_stage(root: Path, *, per_class: int = 40) -> ServedStage:
    """Prod serving version 1 of ``classifier``: a real model trained a few steps on a folder under ``root``.

    Its training record, config, ``model.keras`` and SavedModel are the trainer's own, its metrics
    the evaluation's on the test split; the folder grows with :meth:`grow`.
    """
    from components.convert import convert
    from components.convert.config import ConvertConfig
    from trainer.config import EvaluateConfig, TrainConfig
    from trainer.tasks import get_task
    from trainer.train import train

    source, dataset, model_dir = root / "images", root / "dataset", root / "model"
    _noisy_images(source, per_class, seed=0)
    convert(ConvertConfig(source=str(source), split_by="content", workers=1), str(dataset))
    config = TrainConfig(model="mnist_cnn", epochs=1, steps_per_epoch=30, batch_size_per_replica=16, validation_steps=1)
    train(str(dataset), str(model_dir), config)
    evaluated = get_task("classification").evaluate(str(model_dir / "saved_model"), str(dataset), EvaluateConfig())
    metrics = {k: float(v) for k, v in evaluated.metrics.items() if isinstance(v, (int, float))}
    stages = root / "stages"
    entry = StageEntry(
        "promote", 1, str(model_dir), "run-1", model_name=MODEL_NAME, task="classification", metrics=metrics
    )
    StageRegistry(str(stages)).record("prod", entry)
    return ServedStage(source, stages, model_dir)


def grow(stage: ServedStage, per_class: int, start: int) -> None:
    """``per_class`` new images per class in the stage's source (names from ``start`` on): new data."""
    _noisy_images(stage.source, per_class, seed=start, start=start)
