"""The convert step's surface (components/surface.py): its components against ``ConvertConfig``."""

from components.convert.component import (
    convert_to_tfrecords,
    finalize_tfrecords,
    plan_tfrecords,
    write_tfrecord_shards,
)
from components.convert.config import ConvertConfig
from components.surface import StepOutputs, Surface


def headline(out: StepOutputs) -> str:
    """``N images converted, M rejected``; a delta's: ``N images converted (a delta: R reused, not read), ...``."""
    m = out.metadata("metrics")
    reused = m.get("records_reused", 0)
    if reused:
        delta = f"{m.get('records_written', 0):,.0f} images converted (a delta: {reused:,.0f} reused, not read)"
        return f"{delta}, {m.get('rejected', 0):,.0f} rejected"
    return f"{m.get('images', 0):,.0f} images converted, {m.get('rejected', 0):,.0f} rejected"


_CONVERT = {
    "config": ConvertConfig,
    "aliases": {"resize_height": "resize[0]", "resize_width": "resize[1]"},
    "step_only": frozenset({"verify", "parallelism"}),
}
SURFACES = (
    Surface(convert_to_tfrecords, headline=headline, record="convert", **_CONVERT),
    Surface(plan_tfrecords, **_CONVERT),
    Surface(write_tfrecord_shards),
    Surface(finalize_tfrecords, record="convert"),
)
