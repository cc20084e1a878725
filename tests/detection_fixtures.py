"""A small real detection dataset and one briefly trained RetinaNet (the anchor head), built once per test run.

The built-in ``shapes`` generator writes a COCO folder, the converter turns it into TFRecords
(dataset.json ``task: detection``), and the trainer trains keras-hub's RetinaNet on it for a few
dozen steps and exports it: the slow part, so every detection test shares it.
"""

from __future__ import annotations

import functools
from pathlib import Path

from tests.shared import once_per_run

# Small and quick, as the suite's budget wants: a 64 px detector trained for 48 steps finds the
# shapes only roughly; the tests check plumbing and agreement, make run and the benchmark quality.
IMAGES = 400
STEPS = 48


@functools.cache
def tiny_detection() -> dict[str, str]:
    """``{"root", "coco", "dataset", "model"}``: paths of the COCO file, dataset and model folders.

    Built once per test run, whichever worker asks first (tests/shared.py).
    """
    return once_per_run("tiny-detection", _build)


def _build(root: Path) -> dict[str, str]:
    from components.convert import convert
    from components.convert.config import ConvertConfig
    from components.image_input import shapes
    from trainer.config import TrainConfig
    from trainer.train import train

    coco = shapes.generate(root / "coco", count=IMAGES, seed=7)
    dataset = root / "dataset"
    convert(ConvertConfig(source=str(coco), workers=1), str(dataset))
    model = root / "model"
    config = TrainConfig(
        model="retinanet",
        # RetinaNet's anchor head: its focal loss scores the shapes over the export's 0.05 floor
        # within these 48 steps, which the tests of the plumbing need (boxes to compare); the dfl
        # head's quality targets stay under it this early. The dfl head's own tests are in
        # tests/unit/test_detection_edges.py, and the sweep and search pipelines train it.
        model_options={"head": "anchors"},
        epochs=2,
        steps_per_epoch=STEPS // 2,
        batch_size_per_replica=8,
        learning_rate=0.016,  # 1e-3 at batch 8
        validation_steps=2,
    )
    train(str(dataset), str(model), config)
    return {"root": str(root), "coco": str(coco), "dataset": str(dataset), "model": str(model)}
