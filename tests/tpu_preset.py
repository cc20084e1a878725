"""The ``tpu-512`` detector preset exercised on the CPU: build, train a few steps, export, serve.

The preset a TPU user runs (ResNet-50 bottleneck stacks, P3-P7, 9 anchors per location, 512 px)
is built from ``model_options: {preset: tpu-512}``, trained at batch 2 on a handful of built-in
``shapes`` images (letterboxed to 512 px), exported, served by the local Python server, and a few
images are scored through the served signature: the benchmark (``python -m tests.tpu_preset
--epochs 2 --steps 2``), in a fresh process so that its peak memory is its own. The suite's test
builds and compiles it only (``--build-only``): training, exporting and serving a ResNet-50 at
512 px took 105-133 s of a 2-core CPU, the suite's largest single test.

``--without-tensorflow-text`` runs it as on the ``tpu-vm`` image, the one a TPU VM user trains
this preset with: that image installs keras-hub with ``--no-deps`` (its tensorflow-text would bring
a second TensorFlow next to tensorflow-tpu), and keras-hub imports tensorflow-text only for its text
tokenizers, inside try/except. Importing it then fails as it does where it is not installed, and
the JSON printed says which of the two was loaded.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import importlib.abc
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BATCH = 2
IMAGES = 12


@dataclasses.dataclass(frozen=True)
class PresetRun:
    """What one exercise of the preset measured.

    Attributes:
        image_shape: the trained model's input shape (512 x 512 x 3 for the preset).
        steps: training steps run.
        epoch_seconds: each epoch's time; the first includes building the graph (the first step).
        train_seconds: the whole ``train()`` call: build, epochs, export and saving.
        served_images: images scored through the served signature.
        serve_seconds: the server's start (loading the SavedModel) and one request of them.
        detections: detections per scored image (an untrained detector finds anything).
        peak_rss_mib: this process's peak resident memory.
    """

    image_shape: list[int]
    steps: int
    epoch_seconds: list[float]
    train_seconds: float
    served_images: int
    serve_seconds: float
    detections: list[int]
    peak_rss_mib: float


def exercise(root: Path, epochs: int = 1, steps_per_epoch: int = 2, served: int = 2) -> PresetRun:
    """Builds, trains, exports and serves the ``tpu-512`` detector under ``root`` (see the module)."""
    from trainer.train import train

    dataset, model = _dataset(root), root / "model"
    began = time.perf_counter()
    summary = train(dataset, str(model), _config(epochs, steps_per_epoch))
    train_seconds = time.perf_counter() - began
    began = time.perf_counter()
    detections = _serve_and_score(dataset, str(model / "saved_model"), served)
    return PresetRun(
        image_shape=list(summary.image_shape),
        steps=summary.steps,
        epoch_seconds=list(summary.epoch_seconds),
        train_seconds=train_seconds,
        served_images=len(detections),
        serve_seconds=time.perf_counter() - began,
        detections=detections,
        peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )


def built(root: Path) -> dict[str, Any]:
    """Builds and compiles the ``tpu-512`` detector as ``train()`` does before its first step (the
    preset resolved, fitted to a handful of ``shapes`` images), without training or exporting it.

    Returns:
        The model's input shape, its parameter count and its resolved options.
    """
    from trainer import distribute
    from trainer.training.checks import prepare
    from trainer.training.run import Run
    from trainer.training.setup import build, fit_to_data, resolve_settings

    dataset, model_dir, config = _dataset(root), str(root / "model"), _config(1, 1)
    prepared = prepare(dataset, model_dir, config, None)
    strategy = distribute.get_strategy(config.accelerator)
    run = fit_to_data(
        Run(dataset, model_dir, config, prepared, resolve_settings(config, prepared.info, strategy), strategy)
    )
    model = build(run)[0]
    return {
        "image_shape": list(run.prepared.task.input_shape(run.prepared.info)),
        "parameters": int(model.count_params()),
        "options": run.prepared.task.options.to_dict(),
    }


def _dataset(root: Path) -> str:
    """A handful of built-in ``shapes`` images converted under ``root``; the dataset folder."""
    from components.convert import convert
    from components.convert.config import ConvertConfig
    from components.image_input import shapes

    coco = shapes.generate(root / "coco", count=IMAGES, seed=3)
    dataset = str(root / "dataset")
    convert(ConvertConfig(source=str(coco), workers=1), dataset, log=lambda m: None)
    return dataset


def _config(epochs: int, steps_per_epoch: int) -> Any:
    """The preset's training settings: batch 2, no validation split."""
    from trainer.config import TrainConfig

    return TrainConfig(
        model="retinanet",
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        batch_size_per_replica=BATCH,
        validation_split=None,
        model_options={"preset": "tpu-512"},
    )


def _serve_and_score(dataset_dir: str, saved_model: str, count: int) -> list[int]:
    """Scores ``count`` training images over REST; checks each answer against the task's schema."""
    from components.serving.checks import http_json
    from components.serving.server import ModelServer
    from trainer.tasks import get_task

    task = get_task("detection")
    images = [encoded for encoded, _ in task.known_examples(dataset_dir, "train", count)]
    body = {"instances": [{"b64": base64.b64encode(b).decode()} for b in images]}
    with ModelServer(saved_model, "detector") as server:
        status, answer = http_json("POST", f"{server.url}/v1/models/detector:predict", body, timeout_s=300)
    if status != 200:
        raise RuntimeError(f"the served tpu-512 detector answered {status}, expected 200: {answer}")
    predictions = answer["predictions"]
    if len(predictions) != len(images):
        raise RuntimeError(f"{len(images)} images sent, {len(predictions)} predictions received")
    for prediction in predictions:
        task.check_prediction(prediction)
    return [int(p["num_detections"]) for p in predictions]


class _NoTensorflowText(importlib.abc.MetaPathFinder):
    """Makes ``import tensorflow_text`` fail as it does where the package is not installed."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "tensorflow_text" or name.startswith("tensorflow_text."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: the tpu-vm image has none)", name=name)
        return None


def main(argv: list[str] | None = None) -> int:
    """Runs :func:`exercise` and prints its :class:`PresetRun` as JSON, with the modules it loaded."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2, help="steps per epoch")
    parser.add_argument("--served", type=int, default=2, help="images scored through the served signature")
    parser.add_argument("--root", help="folder for the data and the model (kept); default: a temporary one")
    parser.add_argument("--without-tensorflow-text", action="store_true", help="as on the tpu-vm image")
    parser.add_argument("--build-only", action="store_true", help="build and compile the model; no training, no export")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if args.without_tensorflow_text:
        sys.meta_path.insert(0, _NoTensorflowText())
    with contextlib.ExitStack() as stack:
        root = args.root or stack.enter_context(tempfile.TemporaryDirectory(prefix="ltp-tpu512-"))
        if args.build_only:
            result = built(Path(root))
        else:
            result = dataclasses.asdict(exercise(Path(root), args.epochs, args.steps, args.served))
    loaded = {name: name in sys.modules for name in ("keras_hub", "tensorflow_text")}
    print(json.dumps({**result, "loaded": loaded}), file=sys.stdout, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
