"""The convert step: images from any common source into sharded, verified TFRecords.

Plain functions without TensorFlow (``verify`` imports it when called); ``component.py`` is the
KFP adapter.
"""

from components.convert.convert import convert, plan_ranges
from components.convert.plan import make_plan
from components.convert.publish import finalize
from components.convert.verify import VerifyError, verify
from components.convert.write import write_shards
from components.image_input.sources import ConvertError, SourceError

__all__ = [
    "ConvertError",
    "SourceError",
    "VerifyError",
    "convert",
    "finalize",
    "make_plan",
    "plan_ranges",
    "verify",
    "write_shards",
]
