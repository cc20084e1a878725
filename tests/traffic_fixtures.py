"""A small stage's traffic without TensorFlow: Fashion-MNIST images, a nearest-centroid model, and the synthetic shifts.

The reference is the model's answers on the test split (as the evaluation writes it); unshifted
traffic is drawn from the training split (never the reference's images) with a seed; the shifts
are those the drift checks must catch: a class withheld, images darkened by 40%, images at a
quarter of their area, 30% of the images undecodable.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from components.image_input.sources import FASHION_MNIST_DIR, read_idx

SHIFTS = ("class_withheld", "darkened", "quarter_size", "undecodable")
# The check each shift must fire.
SHIFT_CHECK = {
    "class_withheld": "class_shares",
    "darkened": "psi_brightness",
    "quarter_size": "psi_width",
    "undecodable": "decode_failures",
}
WITHHELD_CLASS = 1  # trousers: the model rarely confuses them, so their share falls by about a tenth


def load_split(split: str) -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST's ``train`` or ``t10k`` images [N, 28, 28] uint8 and labels."""
    folder = Path(FASHION_MNIST_DIR)
    images = read_idx(str(folder / f"{split}-images-idx3-ubyte.gz"))
    labels = read_idx(str(folder / f"{split}-labels-idx1-ubyte.gz")).astype(np.int64)
    return images, labels


class CentroidModel:
    """Class probabilities from the distance to each class's mean image (a softmax; fitted on ``images``)."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, temperature: float = 2.0):
        flat = images.reshape(len(images), -1).astype(np.float32) / 255.0
        self.centroids = np.stack([flat[labels == k].mean(axis=0) for k in range(int(labels.max()) + 1)])
        self.temperature = temperature

    def probabilities(self, images: np.ndarray) -> np.ndarray:
        """[N, classes] for images [N, 28, 28] uint8."""
        flat = images.reshape(len(images), -1).astype(np.float32) / 255.0
        distances = np.sqrt(((flat[:, None, :] - self.centroids[None]) ** 2).sum(axis=-1))
        logits = -distances / self.temperature * 10
        logits -= logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        return e / e.sum(axis=1, keepdims=True)


def png(image: np.ndarray) -> bytes:
    """A grayscale PNG of a [H, W] uint8 image."""
    out = io.BytesIO()
    Image.fromarray(image, mode="L").save(out, format="PNG")
    return out.getvalue()


def draw(
    images: np.ndarray, labels: np.ndarray, count: int, seed: int, shift: str = ""
) -> tuple[list[bytes], np.ndarray]:
    """``count`` images drawn with ``seed`` (under ``shift``) as PNG bytes, and the pixels the model sees.

    An undecodable image's pixels are the original's (its answer is dropped by the caller).
    """
    rng = np.random.default_rng(seed)
    pool = np.flatnonzero(labels != WITHHELD_CLASS) if shift == "class_withheld" else np.arange(len(labels))
    chosen = images[rng.choice(pool, size=count, replace=False)]
    if shift == "darkened":
        chosen = (chosen.astype(np.float32) * 0.6).astype(np.uint8)
    if shift == "quarter_size":
        small = [np.asarray(Image.fromarray(i).resize((14, 14), Image.Resampling.BILINEAR)) for i in chosen]
        encoded = [png(s) for s in small]
        seen = np.stack([np.asarray(Image.fromarray(s).resize((28, 28), Image.Resampling.BILINEAR)) for s in small])
        return encoded, seen
    encoded = [png(i) for i in chosen]
    if shift == "undecodable":
        for i in rng.choice(count, size=int(round(count * 0.3)), replace=False):
            encoded[i] = encoded[i][: len(encoded[i]) // 3]  # a truncated upload
    return encoded, chosen


def answers(model: CentroidModel, encoded: list[bytes], seen: np.ndarray) -> list:
    """The model's answer per image (None where the bytes do not decode, as the server refuses them)."""
    probabilities = model.probabilities(seen)
    out = []
    for data, p in zip(encoded, probabilities, strict=True):
        try:
            Image.open(io.BytesIO(data)).load()
        except OSError:
            out.append(None)
            continue
        out.append({"probabilities": p.tolist()})
    return out
