"""Detection imports and trains without tensorflow-text, as on the tpu-vm image.

That image installs keras-hub with ``--no-deps`` (its tensorflow-text would bring a second
TensorFlow next to tensorflow-tpu). keras-hub imports tensorflow-text only for its text tokenizers,
inside try/except; this runs a detection training in a process where importing it fails, as it does
where it is not installed, and checks it was never loaded.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import importlib.abc, json, sys

class NoTensorflowText(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow_text" or name.startswith("tensorflow_text."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: the tpu-vm image has none)", name=name)
        return None

sys.meta_path.insert(0, NoTensorflowText())
from pathlib import Path
from components.convert import convert, shapes
from trainer.config import ConvertConfig, TrainConfig
from trainer.train import train

root = Path(sys.argv[1])
coco = shapes.generate(root / "coco", count=16, seed=1)
convert(ConvertConfig(source=str(coco), workers=1), str(root / "dataset"), log=lambda m: None)
config = TrainConfig(model="retinanet", epochs=1, steps_per_epoch=2, batch_size_per_replica=4, validation_split=None)
summary = train(str(root / "dataset"), str(root / "model"), config)
print(json.dumps({"steps": summary.steps, "keras_hub": "keras_hub" in sys.modules,
                  "tensorflow_text": "tensorflow_text" in sys.modules}))
"""


def test_detection_trains_with_tensorflow_text_missing(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == {"steps": 2, "keras_hub": True, "tensorflow_text": False}
    assert (tmp_path / "model" / "saved_model" / "saved_model.pb").is_file()
