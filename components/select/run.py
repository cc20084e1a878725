"""The select step: over a pool of unlabelled images, the ones worth labelling next, as files a
labelling tool opens (docs/labels.md, "Select the next images to label").

Its jobs, one module each: list the pool, leave out what the labelled dataset has and score the
rest (``pool.py``); rank and keep the picks apart (``picking.py``, pure functions); the whole
selection (``selection.py``: ``select``); what it writes (``write.py``) and its page (``page.py``).
How unsure the model is of an image is its task's to say (``trainer/tasks/selection.py``: the
task's strategies, and what a reviewer is shown of each image).

Everything goes under the selection's ``output_uri``::

    selection.json       each pick (its rank, score, reason, sha256, hash, proposal), the strategy, the seed
    images/              the picked images, under the names the exports give them
    label_studio.json    Label Studio tasks: the image, the model's predictions, a per-task score
    label_studio.xml     the labeling config those tasks fit
    cvat_coco.zip        a CVAT "COCO 1.0" archive of the predictions
    yolo/                YOLO label files, one per picked image (the confidence as a sixth value)
    report.md, report.html   the pick for people, the images drawn with what the model proposes

Listing and picking import no TensorFlow; scoring does (``trainer.batch_predict``).
"""

from __future__ import annotations

SELECTION = "selection.json"
IMAGES = "images"
LABEL_STUDIO = "label_studio.json"
LABEL_STUDIO_CONFIG = "label_studio.xml"
CVAT = "cvat_coco.zip"
YOLO = "yolo"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"


class SelectError(ValueError):
    """A selection cannot run as asked; the message names the problem and the fix."""
