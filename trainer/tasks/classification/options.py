"""The classifier's options: the transfer classifier's arguments (``TrainConfig.model_options``) and
the evaluation's settings (``EvaluateConfig.evaluation_options``).

``mnist_cnn`` takes none; ``transfer_classifier`` takes all of them (``model.py``). Unset
options are not passed, so each builder keeps its own defaults and refuses what it does not take.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Optional

from trainer.configbase import ConfigBase


@dataclasses.dataclass(frozen=True)
class ClassifierOptions(ConfigBase):
    """The model builder's arguments; None: not given (the builder's default).

    Attributes:
        backbone: the ``keras.applications`` backbone of ``transfer_classifier``.
        weights: the backbone's weights: a local or gs:// ``.weights.h5`` saved from the same
            ``keras.applications`` backbone with ``include_top=False``, or ``imagenet`` (Keras
            downloads them: the cluster needs access to storage.googleapis.com).
        trainable_backbone: fine-tune the backbone too.
        dropout: dropout before the classification layer.
        image_size: the side the transfer classifier resizes images to inside the model; None:
            fitted to the images (their short side, rounded down to a multiple of 32, in 32..224).
    """

    _section: ClassVar[str] = "model_options."

    backbone: Optional[str] = None
    weights: Optional[str] = None
    trainable_backbone: Optional[bool] = None
    dropout: Optional[float] = None
    image_size: Optional[int] = None

    def validate(self) -> None:
        if self.image_size is not None and not 32 <= self.image_size <= 1024:
            self._fail("image_size", f"must be in 32..1024 or null, got {self.image_size}")

    def builder_kwargs(self) -> dict[str, Any]:
        """The options that were given, as the builder's keyword arguments."""
        return {k: v for k, v in self.to_dict().items() if v is not None}


@dataclasses.dataclass(frozen=True)
class ClassifierEvaluationOptions(ConfigBase):
    """The classifier's settings of its evaluation (``EvaluateConfig.evaluation_options``).

    Attributes:
        top_k: the k of ``top_k_accuracy`` (the share whose right class is among the k likeliest),
            clipped to the number of classes.
    """

    _section: ClassVar[str] = "evaluation_options."
    _what: ClassVar[str] = "the classifier's evaluation options"

    top_k: int = 3

    def validate(self) -> None:
        if self.top_k < 1:
            self._fail("top_k", f"must be >= 1, got {self.top_k}")
