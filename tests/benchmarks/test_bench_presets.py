"""Fine-tuning from a preset directory against training from scratch, on the same small set.

A detector is trained on one set of generated shapes (three classes) and saved as a preset
(``preset/`` in its model folder); a small set of other images with other classes (the shapes
merged into ``round`` and ``angular``) is then trained on for the same few steps twice: from that
preset (re-headed: backbone and FPN kept, heads fresh) and from random weights. Both are scored on
the small set's test split through the exported model; the figures are printed, not asserted
beyond "a number came out" (this machine is noisy and shared).

Knobs: ``LTP_BENCH_PRESET_SOURCE`` (images of the source set, 1000), ``LTP_BENCH_PRESET_SOURCE_STEPS``
(300), ``LTP_BENCH_PRESET_TARGET`` (images of the small set, 300), ``LTP_BENCH_PRESET_STEPS`` (60).
"""

from __future__ import annotations

import os
import time

import pytest

from tests.unit.test_presets import _two_class_coco

pytestmark = pytest.mark.benchmark

SOURCE = int(os.environ.get("LTP_BENCH_PRESET_SOURCE", "1000"))
SOURCE_STEPS = int(os.environ.get("LTP_BENCH_PRESET_SOURCE_STEPS", "300"))
TARGET = int(os.environ.get("LTP_BENCH_PRESET_TARGET", "300"))
STEPS = int(os.environ.get("LTP_BENCH_PRESET_STEPS", "60"))
BATCH = 16


def _config(steps: int, **options):
    from trainer.config import TrainConfig

    # The detection run form's recipe (augment, lr 0.008 for a batch of 128 = 1e-3 at 16), in steps.
    return TrainConfig(
        model="retinanet", epochs=1, steps_per_epoch=steps, batch_size_per_replica=BATCH, learning_rate=0.008,
        augment=True, validation_steps=1, model_options=options,
    )  # fmt: skip


def test_fine_tuning_from_a_preset_directory_beats_training_from_scratch(tmp_path, capsys):
    from components.convert import convert
    from components.convert.config import ConvertConfig
    from components.image_input import shapes
    from trainer import model_folder
    from trainer.config import EvaluateConfig
    from trainer.tasks import get_task
    from trainer.train import train

    source = tmp_path / "source"
    convert(
        ConvertConfig(source=str(shapes.generate(tmp_path / "coco-source", SOURCE, seed=11)), workers=2), str(source)
    )
    coco = _two_class_coco(
        shapes.generate(tmp_path / "coco-target", TARGET, seed=12), tmp_path / "two" / "instances.json"
    )
    target = tmp_path / "target"
    convert(ConvertConfig(source=str(coco), workers=2), str(target))
    train(str(source), str(tmp_path / "pretrained"), _config(SOURCE_STEPS))
    preset = model_folder.preset_dir(str(tmp_path / "pretrained"))

    rows = {}
    for name, options in (("from scratch", {}), ("from the preset", {"weights": preset})):
        started = time.perf_counter()
        out = tmp_path / name.replace(" ", "-")
        train(str(target), str(out), _config(STEPS, **options))
        seconds = time.perf_counter() - started
        result = get_task("detection").evaluate(model_folder.saved_model_dir(str(out)), str(target), EvaluateConfig())
        rows[name] = (result.metrics["ap50"], result.metrics["ap"], seconds)
    with capsys.disabled():
        print(f"\nsmall set: {TARGET} images (2 classes), {STEPS} steps of {BATCH}; preset: {SOURCE_STEPS} steps on "
              f"{SOURCE} other images (3 classes)")  # fmt: skip
        for name, (ap50, ap, seconds) in rows.items():
            print(f"  {name:16s} test AP@0.5 {ap50:.3f}  AP {ap:.3f}  ({seconds:.0f} s)")
    assert all(0.0 <= r[0] <= 1.0 for r in rows.values())
