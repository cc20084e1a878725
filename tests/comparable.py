"""What makes one process and several workers train comparably, weight for weight.

The mnist CNN's dropout draws other masks in one process than in two, and the training input's
parallel maps may hand whole batches over out of order (for speed): both are switched off here, in
the test process and in the worker processes alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def make_comparable(set_attr: Callable[[Any, str, Any], None] = setattr) -> None:
    """Dropout becomes the identity, tf.data's parallel maps keep their order.

    Args:
        set_attr: how to patch: ``setattr`` in a worker process, pytest's ``monkeypatch.setattr``
            (undone after the test) in the test process.
    """
    import keras
    import tensorflow as tf

    real_map = tf.data.Dataset.map

    def ordered_map(self, fn, num_parallel_calls=None, deterministic=None, **kwargs):
        return real_map(self, fn, num_parallel_calls, deterministic=True if num_parallel_calls else None, **kwargs)

    set_attr(keras.layers, "Dropout", lambda rate, **kwargs: keras.layers.Identity())
    set_attr(tf.data.Dataset, "map", ordered_map)
