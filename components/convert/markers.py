"""What a conversion leaves in its folder for a re-run: the shards' markers and ``dataset.json``.

Each shard written gets a marker ``_convert/<shard>.json`` (its plan key, size and checksum);
``dataset.json`` is the folder's own marker, written last and removed first when the plan changed.
"""

from __future__ import annotations

import re

from components.convert.plan import Plan, ShardPlan
from components.convert.storage import Output
from trainer.tfrecords import MANIFEST_NAME, DatasetError, DatasetInfo

MARKERS = "_convert"
SHARD_RE = re.compile(r"^[\w.-]+-\d{5}-of-\d{5}\.tfrecord(\.gz)?$")


def marker_name(shard: ShardPlan) -> str:
    """The path of a shard's marker in the dataset folder."""
    return f"{MARKERS}/{shard.file}.json"


def valid_marker(plan: Plan, out: Output, shard: ShardPlan, sizes: dict[str, int]) -> dict | None:
    """The shard's marker when it is of this plan and the shard has the size it records; else None."""
    marker = out.read_json(marker_name(shard))
    if marker and marker.get("plan_key") == plan.key and sizes.get(shard.file) == marker.get("bytes"):
        return marker
    return None


def up_to_date(plan: Plan, out: Output) -> DatasetInfo | None:
    """The existing ``dataset.json`` when it is of this plan and every shard has its size; else None.

    A file that is not a valid :class:`DatasetInfo` (written by another version) is not up to date.
    """
    manifest = out.read_json(MANIFEST_NAME)
    if not manifest or manifest.get("plan_key") != plan.key:
        return None
    # Written before the task was recorded: the file stays as it is (no reconversion for a key that
    # only names what the plan already fixes: every such dataset of a detection source was planned by
    # an older COCO reader and is not up to date), and what is returned says it.
    manifest.setdefault("task", plan.source.task)
    try:
        info = DatasetInfo.from_json(manifest, out.join(MANIFEST_NAME))
    except DatasetError:
        return None
    sizes = out.sizes()
    for split in info.splits.values():
        for s in split.shards:
            if s.dir is None and sizes.get(s.file) != s.bytes:  # a delta's parents are checked by the plan
                return None
    return info


def invalidate(plan: Plan, out: Output) -> None:
    """An existing dataset.json of another plan goes before any shard is overwritten."""
    manifest = out.read_json(MANIFEST_NAME)
    if manifest is not None and manifest.get("plan_key") != plan.key:
        out.delete(MANIFEST_NAME)
