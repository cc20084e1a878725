"""The files of a model folder, named once: what training writes and every later step reads.

```
<model>/saved_model/    the SavedModel (serving_default takes encoded image bytes)
<model>/model.keras     the Keras model
<model>/config.yaml     the effective train config (what ``auto`` resolved to)
<model>/training.json   the training summary (``trainer.train.TrainingSummary``)
<model>/model_card.md   the model card
<model>/checkpoints/    checkpoints while training runs (a restarted step resumes from them)
<model>/preset/         a keras-hub preset of the model, for tasks that write one (detection):
                        ``model_options.weights`` of a later run can start from it
```

No TensorFlow here: the pipelines' steps use these names freely.
"""

from __future__ import annotations

from trainer import storage

SAVED_MODEL = "saved_model"
KERAS_MODEL = "model.keras"
CONFIG = "config.yaml"
SUMMARY = "training.json"
MODEL_CARD = "model_card.md"
CHECKPOINTS = "checkpoints"
PRESET = "preset"


def saved_model_dir(model_dir: str) -> str:
    """The SavedModel folder of a model folder (local or gs://)."""
    return storage.join(model_dir, SAVED_MODEL)


def summary_path(model_dir: str) -> str:
    """The training summary's path in a model folder (local or gs://)."""
    return storage.join(model_dir, SUMMARY)


def checkpoints_dir(model_dir: str) -> str:
    """Where training keeps its checkpoints in a model folder (local or gs://)."""
    return storage.join(model_dir, CHECKPOINTS)


def preset_dir(model_dir: str) -> str:
    """The keras-hub preset folder of a model folder (local or gs://)."""
    return storage.join(model_dir, PRESET)


def append_to_card(model_dir: str, lines: list[str]) -> None:
    """Adds a section (Markdown lines) at the end of a model folder's card; no card: writes one of it."""
    path = storage.join(model_dir, MODEL_CARD)
    before = storage.read_bytes(path).decode("utf-8") if storage.exists(path) else ""
    storage.write_text(path, before.rstrip("\n") + ("\n\n" if before else "") + "\n".join(lines) + "\n")
