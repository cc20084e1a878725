"""The ``select`` pipeline: the images of a pool worth labelling next, scored with what a stage serves.

One step: score the pool (the model a stage serves, or a model folder), leave out the images the
labelled dataset has, rank the rest by how unsure the model is (or at random: the baseline), keep
the picks apart, and write them under ``output_uri`` as files a labelling tool opens (Label Studio
tasks with the model's predictions, a CVAT COCO 1.0 archive, YOLO labels) with ``selection.json``
and a page with the picks drawn (docs/labels.md). No TensorFlow here.
"""

from kfp import dsl

from components.select.component import select_images
from pipelines import platform

NAME = "select"
DESCRIPTION = (
    "Picks the images of a pool worth labelling next: scored with what a stage serves (or a model folder), "
    "ranked by the model's doubt, kept apart, written as Label Studio tasks, a CVAT COCO archive and YOLO labels."
)


@platform.pipeline(name=NAME, description=DESCRIPTION)
def pipeline(
    data: str,
    output_uri: str,
    stage: str = "",
    model_name: str = "",
    model_dir: str = "",
    stages_root: str = "",
    dataset: str = "",
    count: int = 100,
    strategy: str = "auto",
    selection_options: dict = {},  # noqa: B006 (a pipeline default, never mutated)
    diversity: str = "hash",
    near_bits: int = 4,
    seed: int = 0,
    batch_size: int = 64,
    read_threads: int = 8,
):
    """Picks the images to label next and writes them for the labelling tools.

    Args:
        data: the pool of unlabelled images: a folder or gs:// prefix, a CSV/JSONL list, a COCO
            file, any source batch prediction reads.
        output_uri: where the pick goes: selection.json, images/, label_studio.json,
            cvat_coco.zip, yolo/, report.html.
        stage: score with the version this stage serves (demo, staging, prod); empty to score model_dir.
        model_name: the served model name at the stage; empty: the one model it serves.
        model_dir: a model folder (saved_model/ inside) or SavedModel folder, instead of a stage's.
        stages_root: the stage store; empty for <pipeline root>/stages.
        dataset: the labelled dataset folder: an image it has (same sha256) is never picked; empty: none.
        count: how many images to pick.
        strategy: auto (the task's first), random (a seeded random pick: the baseline), or one of
            the model's task: least_confidence, margin, entropy (classification); uncertainty,
            threshold, flip (detection).
        selection_options: the model's task's own settings, e.g. {threshold: 0.4} (detection:
            threshold, the score a box is taken at; match_iou, the flip's match); empty: its defaults.
        diversity: hash (pass over near-copies of a pick, in rank order), kcenter (spread the picks
            over the best ranked by hash distance) or none.
        near_bits: near-copies differ in at most this many of their perceptual hashes' 64 bits.
        seed: the random order's seed (random, and ties).
        batch_size: images per model call.
        read_threads: threads reading image bytes.
    """
    select_images(
        data=data,
        output_uri=output_uri,
        stage=stage,
        model_name=model_name,
        model_dir=model_dir,
        stages_root=stages_root,
        dataset=dataset,
        count=count,
        strategy=strategy,
        selection_options=selection_options,
        diversity=diversity,
        near_bits=near_bits,
        seed=seed,
        batch_size=batch_size,
        read_threads=read_threads,
        pipeline_root=dsl.PIPELINE_ROOT_PLACEHOLDER,
    ).set_display_name("Select images to label").set_caching_options(False)  # the stage's version is read now
