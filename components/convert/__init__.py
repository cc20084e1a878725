"""The convert step: images from any common source into sharded, verified TFRecords.

Plain functions without TensorFlow (``verify`` imports it when called); ``component.py`` is the
KFP adapter.
"""

from components.convert.convert import convert, finalize, make_plan, plan_ranges, write_shards
from components.convert.sources import ConvertError, SourceError
from components.convert.verify import VerifyError, verify

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
