"""The batch prediction step's surface (components/surface.py): its components against ``PredictConfig``."""

from components.batch_predict.component import join_batch_prediction, plan_batch_prediction, predict_shard
from components.batch_predict.config import PredictConfig
from components.surface import StepOutputs, Surface

_POD = frozenset({"pod_accelerator_type", "pod_accelerator_count"})


def plan_headline(out: StepOutputs) -> str:
    """The images and the shards."""
    shards = out.parameters.get("Output") or []
    return f"{int(sum(s.get('images', 0) for s in shards)):,} images in {len(shards)} shards"


def shard_headline(out: StepOutputs) -> str:
    """One shard's images, rate and failures."""
    r = out.parameters.get("Output") or {}
    failed = f"; failed: {r.get('reason')}" if r.get("status") == "failed" else ""
    return (
        f"shard {r.get('index')}: {r.get('scored', 0):,} of {r.get('images', 0):,} images, "
        f"{r.get('images_per_sec', 0):,.1f} images/s{failed}"
    )


def join_headline(out: StepOutputs) -> str:
    """The images scored, the cost, and the shards lost."""
    s = out.parameters.get("Output") or {}
    names = ", ".join(f["shard"] for f in s.get("failed_shards") or [])
    lost = f"; incomplete: {names}" if names else ""
    return f"{s.get('scored', 0):,} of {s.get('images', 0):,} images scored, ${s.get('cost', 0):,.4f}{lost}"


SURFACES = (
    Surface(plan_batch_prediction, PredictConfig, step_only=_POD | {"pipeline_root"}, headline=plan_headline),
    Surface(predict_shard, headline=shard_headline),
    Surface(join_batch_prediction, headline=join_headline),
)
