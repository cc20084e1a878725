"""keras-hub's RetinaNet backbone (an image encoder and a feature pyramid) with the pyramid's width
an argument: keras-hub's ``RetinaNetBackbone`` builds its ``FeaturePyramid`` at a fixed 256
filters, which on a CPU is a fifth of the detector's step at 128 px (``docs/detection.md``).

The class is keras-hub's (``isinstance`` checks, presets and ``from_config`` treat it as a
``RetinaNetBackbone``); only the pyramid's ``num_filters`` differs. A detector at 256 filters is
built with keras-hub's own class, so its files load without this package.
"""

from __future__ import annotations

from typing import Any

import keras
from keras_hub.models import RetinaNetBackbone
from keras_hub.src.models.feature_pyramid_backbone import FeaturePyramidBackbone
from keras_hub.src.models.retinanet.feature_pyramid import FeaturePyramid
from keras_hub.src.utils.keras_utils import standardize_data_format


@keras.saving.register_keras_serializable(package="lean_tpu")
class PyramidBackbone(RetinaNetBackbone):
    """An image encoder's pyramid outputs ``min_level``..P5 and a feature pyramid of ``fpn_filters``
    filters over them, up to ``max_level``; the other arguments are ``RetinaNetBackbone``'s.
    """

    def __init__(
        self,
        image_encoder: Any,
        min_level: int,
        max_level: int,
        use_p5: bool,
        fpn_filters: int = 256,
        use_fpn_batch_norm: bool = False,
        image_shape: Any = (None, None, 3),
        data_format: Any = None,
        dtype: Any = None,
        **kwargs: Any,
    ):
        if min_level > max_level:
            raise ValueError(f"min_level ({min_level}) is above max_level ({max_level})")
        data_format = standardize_data_format(data_format)
        top = min(max(int(name[1:]) for name in image_encoder.pyramid_outputs), max_level)
        levels = {f"P{level}": image_encoder.pyramid_outputs[f"P{level}"] for level in range(min_level, top + 1)}
        encoder = keras.Model(inputs=image_encoder.inputs, outputs=levels, name="backbone")
        pyramid = FeaturePyramid(
            min_level=min_level,
            max_level=max_level,
            num_filters=fpn_filters,
            use_p5=use_p5,
            use_batch_norm=use_fpn_batch_norm,
            data_format=data_format,
            dtype=dtype,
            name="fpn",
        )
        images = keras.layers.Input(image_shape, name="inputs")
        outputs = pyramid(encoder(images))
        FeaturePyramidBackbone.__init__(self, inputs=images, outputs=outputs, dtype=dtype, **kwargs)
        self.min_level, self.max_level, self.use_p5 = min_level, max_level, use_p5
        self.fpn_filters, self.use_fpn_batch_norm = fpn_filters, use_fpn_batch_norm
        self.image_encoder, self.feature_pyramid = image_encoder, pyramid
        self.image_shape, self.pyramid_outputs = image_shape, outputs

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "fpn_filters": self.fpn_filters}
