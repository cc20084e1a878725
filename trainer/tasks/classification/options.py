"""The classifier's options (``TrainConfig.model_options``): the transfer classifier's arguments.

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
        weights: a local or gs:// path to the backbone's weights.
        trainable_backbone: fine-tune the backbone too.
        dropout: dropout before the classification layer.
    """

    _section: ClassVar[str] = "model_options."

    backbone: Optional[str] = None
    weights: Optional[str] = None
    trainable_backbone: Optional[bool] = None
    dropout: Optional[float] = None

    def builder_kwargs(self) -> dict[str, Any]:
        """The options that were given, as the builder's keyword arguments."""
        return {k: v for k, v in self.to_dict().items() if v is not None}
