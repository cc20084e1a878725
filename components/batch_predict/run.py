"""Batch prediction: what its three jobs share. Plan the shards (``plan.py``), score one shard
(``score.py``), join what the shards wrote (``join.py``); the input is listed by ``inputs.py``
(a source kind's listing, or a converted dataset's records) and the summary rendered by ``page.py``.

Everything lives under the run's ``output_uri`` (docs/batch_prediction.md)::

    manifest.json        the plan: the input's fingerprint, the pinned model, the settings, the shards
    items.jsonl          the images, in plan order (each shard reads its range)
    shard-NNNNN.jsonl    one prediction per scored image, written whole when the shard ends
    shard-NNNNN.json     the shard's summary (counts, failures and their reasons, time, cost), last
    summary.json, coco_results.json, coco_images.json, report.md, report.html   the join's

A shard whose summary says ``ok`` for this plan is done: a re-run skips it, so a killed shard is
the only one redone and a re-run on the same input and model redoes nothing. The plan refuses an
output location that holds another input's or model's predictions instead of mixing them.

Planning and the join import no TensorFlow; scoring a shard does (``trainer.batch_predict``).
"""

from __future__ import annotations

MANIFEST = "manifest.json"
ITEMS = "items.jsonl"
SUMMARY = "summary.json"
COCO_RESULTS = "coco_results.json"
COCO_IMAGES = "coco_images.json"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
# How many failed images a summary names one by one (all of them are counted).
LISTED_FAILURES = 1000


class PredictError(ValueError):
    """A batch prediction cannot start; the message names the problem and the fix."""


def shard_name(index: int) -> str:
    """``shard-NNNNN``: the base name of a shard's files."""
    return f"shard-{index:05d}"
